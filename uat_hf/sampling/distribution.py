"""The corpus distribution p, and the one object that owns it.

p is what the library exists to change, so exactly one object holds it: :class:`CorpusDistribution`. It
owns the prior p starts from, the scorer ψ of a dynamic strategy, the count of balancing updates and
their history. Static strategies keep p at the prior for the whole run; dynamic ones sample with the
prior until the first update, then with softmax(ψ). The sampler only reads p from here (and records
where each change took effect); the callback only asks for updates; a checkpoint saves the whole of it
in one piece, and loading checks that p, ψ and the update count agree. The history is the one exception:
its records stay in memory and in ``balancing_history.jsonl`` only (:class:`~uat_hf.utils.checkpoints.HistoryFile`),
never in a checkpoint, which records how many there are; loading takes them back and checks they agree.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..strategies.mixing_law.law import MixingLaw, MixingLawSettings
from ..strategies.scorer import CorpusScorer, NonFiniteRewardError
from ..utils.names import check_exact_names, check_unique_names
from .priors import STATIC_TEMPERATURES, temperature_prior, validate_probabilities

__all__ = ["CorpusDistribution", "DYNAMIC_STRATEGIES", "SCORER_STRATEGIES", "STATIC_STRATEGIES", "STRATEGIES"]

logger = logging.getLogger(__name__)

#: Static strategies: p is fixed for the whole run. ``fixed`` samples with hand-given probabilities.
STATIC_STRATEGIES: tuple[str, ...] = tuple(STATIC_TEMPERATURES) + ("fixed",)
#: Dynamic strategies with a scorer ψ that re-learns p every ``update_every`` steps.
SCORER_STRATEGIES: tuple[str, ...] = ("multiuat", "multidds-s")
#: Dynamic strategies: the scorer ones, and ``mixing-law`` (a :class:`~uat_hf.strategies.mixing_law.law.MixingLaw`
#: learns p).
DYNAMIC_STRATEGIES: tuple[str, ...] = SCORER_STRATEGIES + ("mixing-law",)
STRATEGIES: tuple[str, ...] = STATIC_STRATEGIES + DYNAMIC_STRATEGIES

_STATE_FORMAT = 2  # 2: the history is no longer inside the state (only its length, the update count)


class CorpusDistribution:
    """The live distribution p over named corpora, its prior, its scorer, its updates and their history.

    Args:
        names: corpus names, in the order of every probability vector.
        prior: the distribution p starts from (validated once, here).
        strategy: one of :data:`STRATEGIES`; a dynamic one needs ``scorer``.
        scorer: the learned ψ of multiuat / multidds-s, built from ``prior`` (:meth:`for_strategy` does), ``None``
            otherwise. The prior itself is kept here only.
        law: the state of strategy ``mixing-law`` (its p, fitted law and probe windows), ``None`` otherwise.
    """

    def __init__(self, names: Sequence[str], prior: Sequence[float], *, strategy: str = "fixed",
                 scorer: CorpusScorer | None = None, law: MixingLaw | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"Unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}.")
        self.names: list[str] = [str(n) for n in names]
        check_unique_names(self.names, "Corpus names must be unique, got {names}.")
        self.strategy = strategy
        self._prior = validate_probabilities(prior, self.names)
        if (strategy in SCORER_STRATEGIES) != (scorer is not None):
            raise ValueError(f"Strategy {strategy!r} " + ("needs a scorer." if scorer is None else "has no scorer."))
        if (strategy == "mixing-law") != (law is not None):
            raise ValueError(f"Strategy {strategy!r} " + ("needs a MixingLaw." if law is None else "has no law."))
        if scorer is not None and scorer.names != self.names:
            raise ValueError(f"The scorer is for corpora {scorer.names}, the distribution for {self.names}.")
        self.scorer = scorer
        self.law = law
        self._p = self._prior.copy()
        #: Balancing updates asked for, skipped ones included (the seed of each update's dev batches).
        self.update_count = 0
        #: Times p changed; a reader that remembers it knows whether p moved since it last looked.
        self.version = 0
        #: One record per update: step, rewards, the p that followed (or why the update was skipped), ...
        self.history: list[dict[str, Any]] = []

    @classmethod
    def for_strategy(
        cls,
        strategy: str,
        sizes: Mapping[str, int],
        *,
        temperature: float | None = None,
        probabilities: Sequence[float] | None = None,
        scorer_lr: float = 1e-4,
        scorer_steps: int = 200,
        scorer_prior_fit: str = "released",
        mixing_law: MixingLawSettings | None = None,
    ) -> CorpusDistribution:
        """The distribution a strategy starts from: the hand-given ``probabilities``, else the τ prior over
        the corpus ``sizes`` (τ: ``temperature``, else the strategy's own; 1 for dynamic strategies)."""
        names = list(sizes)
        if probabilities is not None:
            prior = np.asarray(probabilities, dtype=np.float64)
        else:
            tau = temperature if temperature is not None else STATIC_TEMPERATURES.get(strategy, 1.0)
            prior = temperature_prior(dict(sizes), tau)
        scorer = law = None
        if strategy in SCORER_STRATEGIES:
            scorer = CorpusScorer(names, prior, lr=scorer_lr, steps=scorer_steps, prior_fit=scorer_prior_fit)
        elif strategy == "mixing-law":
            law = MixingLaw(prior, mixing_law)
        return cls(names, prior, strategy=strategy, scorer=scorer, law=law)

    # ------------------------------------------------------------------ reading
    @property
    def probabilities(self) -> np.ndarray:
        """p now (a float64 copy)."""
        return self._p.copy()

    @property
    def prior(self) -> np.ndarray:
        return self._prior.copy()

    @property
    def is_dynamic(self) -> bool:
        return self.scorer is not None or self.law is not None

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self._p.tolist()))

    # ------------------------------------------------------------------ changing p
    def set_probabilities(self, probabilities: Sequence[float] | Mapping[str, float]) -> None:
        """Set p of a static distribution by hand (a custom schedule, or a test); readers see it from their next
        batch on. A dynamic strategy's p follows its scorer only (so that a checkpoint can check one against the
        other)."""
        if self.is_dynamic:
            learner = "scorer" if self.scorer is not None else "mixing law"
            raise ValueError(
                f"p of strategy {self.strategy!r} follows its {learner}; it cannot be set by hand. Use a static "
                "strategy ('fixed') to set p yourself."
            )
        if isinstance(probabilities, Mapping):
            check_exact_names(probabilities, self.names,
                              missing="Probabilities must name exactly the corpora {expected}, got {given}.")
            probabilities = [probabilities[name] for name in self.names]
        self._p = validate_probabilities(probabilities, self.names)
        self.version += 1

    def update(self, rewards: Sequence[float], record: dict[str, Any]) -> dict[str, Any]:
        """One balancing update with one reward per corpus: ψ moves, p = softmax(ψ).

        Non-finite rewards skip the update (p stays, the record says why). ``record`` (the step, the
        measure, extras of the reward) is completed with the rewards and the resulting p, added to the
        history and returned.
        """
        if self.scorer is None:
            raise ValueError(f"Strategy {self.strategy!r} keeps p fixed; it has no balancing update.")
        self.update_count += 1
        record["rewards"] = dict(zip(self.names, map(float, rewards)))
        try:
            self._p = self.scorer.update(rewards)
            self.version += 1
        except NonFiniteRewardError as error:
            logger.warning("Skipping the balancing update at step %s: %s. p stays %s.", record.get("step", "?"), error,
                           dict(zip(self.names, self._p.round(4).tolist())))
            record["skipped"] = str(error)
        record["probabilities"] = self.as_dict()
        record["prior"] = dict(zip(self.names, self._prior.tolist()))  # where p stood at step 0, for the plots
        self.history.append(record)
        return record

    def law_measured(self, losses: Sequence[float], step: int, rng: np.random.Generator,
                     record: dict[str, Any]) -> dict[str, Any] | None:
        """Strategy ``mixing-law``: every corpus's dev loss, measured at the start of a probe phase or at the end
        of one of its windows (``rng`` draws the window order when a phase starts). p switches to the next
        window's probe mix; after the last window the law is fitted and p moves, and ``record`` (the step, the
        measure), completed with the law, the probe mixes and p, is added to the history and returned."""
        if self.law is None:
            raise ValueError(f"Strategy {self.strategy!r} has no mixing law to measure.")
        result = self.law.measured(step, np.asarray(losses, dtype=np.float64), rng)
        sampling = self.law.sampling_probabilities()
        if not np.array_equal(sampling, self._p):
            self._p = sampling
            self.version += 1
        if result is None:
            return None
        self.update_count += 1
        if "skipped" in result:
            logger.warning("Skipping the mixing-law update at step %s: %s. p stays %s.", step, result["skipped"],
                           dict(zip(self.names, self._p.round(4).tolist())))
        gains = self.law.smoothed.sum(axis=0).tolist() if "law" in result else [math.nan] * len(self.names)
        record["rewards"] = dict(zip(self.names, gains))  # the law's column sums Σ_i Â_ij: the gain of each corpus
        record.update(result)
        record["probabilities"] = self.as_dict()
        self.history.append(record)
        return record

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: p, the prior, the scorer and the counts (floats round-trip exactly). Not the history,
        which would grow the state with every update: ``update_count`` says how many records it holds."""
        return {
            "format": _STATE_FORMAT,
            "strategy": self.strategy,
            "names": list(self.names),
            "prior": self._prior.tolist(),
            "probabilities": self._p.tolist(),
            "update_count": self.update_count,
            "version": self.version,
            "scorer": self.scorer.state_dict() if self.scorer is not None else None,
            "law": self.law.state_dict() if self.law is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> None:
        """Restore a :meth:`state_dict` and the ``history`` records of its updates (one per update, as
        :class:`~uat_hf.utils.checkpoints.HistoryFile` reads them back) after checking they belong to this run and
        agree with each other."""
        if state.get("format") != _STATE_FORMAT:
            raise ValueError(
                f"Unsupported corpus distribution state format {state.get('format')!r} (expected {_STATE_FORMAT}); "
                + ("format 1 kept the history inside every checkpoint: resume it with the uat_hf that wrote it, or "
                   "start a new run." if state.get("format") == 1 else "upgrade uat_hf to resume from it.")
            )
        if state["strategy"] != self.strategy:
            raise ValueError(
                f"The checkpoint was trained with strategy {state['strategy']!r}, this run uses {self.strategy!r}; "
                "resume with the same strategy or start a new run."
            )
        if list(state["names"]) != self.names:
            raise ValueError(f"The checkpoint's corpora are {list(state['names'])}, this run's {self.names}; "
                             "resume with the same corpora in the same order.")
        validate_probabilities(state["probabilities"], self.names)
        probabilities = np.asarray(state["probabilities"], dtype=np.float64)  # as saved, bit for bit
        prior = np.asarray(state["prior"], dtype=np.float64)
        if not np.allclose(prior, self._prior, rtol=0, atol=1e-12):
            raise ValueError(
                f"The checkpoint's prior is {dict(zip(self.names, prior.tolist()))}, this run's "
                f"{dict(zip(self.names, self._prior.tolist()))}: the prior settings (sampling_temperature, "
                "scorer_prior_temperature, corpus_probabilities) or the corpus sizes changed. Resume with the same "
                "settings and data, or start a new run."
            )
        update_count, version = int(state["update_count"]), int(state["version"])
        if self.scorer is not None:
            self.scorer.load_state_dict(state["scorer"])
            # p is softmax(ψ) once an update went through, the prior before: anything else is a corrupt state.
            expected = self.scorer.probabilities if version > 0 else prior
            if not np.array_equal(probabilities, expected):
                raise ValueError(
                    f"Inconsistent corpus distribution state: p = {probabilities.tolist()} but "
                    + (f"softmax(ψ) = {expected.tolist()}" if version > 0 else f"the prior is {expected.tolist()}")
                    + f" (after {version} changes of p); the checkpoint is corrupt."
                )
        if self.law is not None:
            self.law.load_state_dict(state["law"])
            # p is the law's p, or the probe mix of the window in progress: anything else is a corrupt state.
            if not np.array_equal(probabilities, self.law.sampling_probabilities()):
                raise ValueError(f"Inconsistent corpus distribution state: p = {probabilities.tolist()} but the "
                                 f"mixing law samples {self.law.sampling_probabilities().tolist()}; the checkpoint is "
                                 "corrupt.")
        if len(history) != update_count:
            raise ValueError(f"Inconsistent corpus distribution state: {len(history)} history records for "
                             f"{update_count} updates.")
        last = history[-1].get("probabilities") if history else None
        if last is not None and last != dict(zip(self.names, probabilities.tolist())):
            raise ValueError(f"The last history record (step {history[-1].get('step')}) has p = {last}, the "
                             f"checkpoint p = {probabilities.tolist()}: the history is another run's.")
        self._prior, self._p = prior, probabilities
        self.update_count, self.version = update_count, version
        self.history = [dict(record) for record in history]

    def __repr__(self) -> str:
        p = ", ".join(f"{n}={v:.4f}" for n, v in zip(self.names, self._p))
        return f"CorpusDistribution({self.strategy}: {p}; updates={self.update_count})"
