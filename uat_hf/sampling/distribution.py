"""The corpus distribution p, and the one object that owns it.

p is what the library exists to change, so exactly one object holds it: :class:`CorpusDistribution`. It
owns the prior p starts from, p itself, the count of balancing updates and their history. Strategies
(:mod:`uat_hf.strategies`) only *propose*: the callback hands each measurement to
:meth:`CorpusDistribution.measured`, which asks the strategy for a proposal, moves p, counts the update and
builds the update's one history record (the same top-level fields for every strategy, the strategy's own
under its name). Static strategies keep p at the prior and record it once, at the start
(:meth:`CorpusDistribution.record_start`).

The sampler reads :attr:`CorpusDistribution.probabilities`, the mix it draws with: p, unless the strategy
asks for another mix for a while (mixing-law's probe windows), which it derives from p and its own state,
so there is no second copy of p to keep in step. A corpus *capped* (:meth:`CorpusDistribution.cap`: the
corpus-health checks found its training pairs broken) keeps at most its cap of p, whatever the strategy proposes,
and of every mix derived from p, until the cap is moved or lifted; the rest is spread over the other corpora in the
ratio the strategy gave them. A checkpoint saves the whole in one piece; the history is
the one exception: its records stay in memory and in ``balancing_history.jsonl`` only
(:class:`~uat_hf.utils.checkpoints.HistoryFile`), never in a checkpoint, which records how many there are;
loading takes them back and checks they agree (their number, and the last record's p).

This module is below the strategies (it imports none of them): the strategy object it is given is used
through the small interface :class:`~uat_hf.strategies.base.BalancingStrategy` defines.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..utils.names import check_exact_names, check_unique_names
from .priors import validate_probabilities
from .proposal import Measurement

__all__ = ["CorpusDistribution"]

logger = logging.getLogger(__name__)

# 2: the history is no longer inside the state; 3: p is the strategy's p (not a probe mix), the strategy's state
# is under "strategy_state", and "update_count" counts the records (a static strategy's step-0 one included) but
# those of caps (under "set_aside", and "set_aside_records" where they are not one per cap); 4: the caps are "caps"
# (optional: absent in a checkpoint with none), the records of caps set, changed and lifted "cap_records", and the
# history records of caps "cap". A format-3 state is read as format 4.
_STATE_FORMAT = 4
_READ_FORMATS = (3, 4)
#: An update that moves p by more than this share of p's distance to uniform (and at least LARGE_UPDATE_MIN, in total
#: variation) is said once per run: the 0.9975/0.0025 prior of a 2M and a 5K corpus sent to 0.5/0.5 by one step.
LARGE_UPDATE_SHARE, LARGE_UPDATE_MIN = 0.5, 0.05


class CorpusDistribution:
    """The live distribution p over named corpora, its prior, its updates and their history.

    Args:
        names: corpus names, in the order of every probability vector.
        prior: the distribution p starts from (validated once, here).
        strategy: the strategy's name, as configured (recorded in the history and checked on resume).
        proposer: the strategy object (:class:`~uat_hf.strategies.base.BalancingStrategy`) that proposes p's
            updates; ``None`` for a distribution whose p is only set by hand (:meth:`set_probabilities`).
    """

    def __init__(self, names: Sequence[str], prior: Sequence[float], *, strategy: str = "fixed",
                 proposer: Any = None) -> None:
        self.names: list[str] = [str(n) for n in names]
        check_unique_names(self.names, "Corpus names must be unique, got {names}.")
        self.strategy = str(strategy)
        self._prior = validate_probabilities(prior, self.names)
        if proposer is not None and list(proposer.names) != self.names:
            raise ValueError(f"The strategy is for corpora {list(proposer.names)}, the distribution for {self.names}.")
        self.proposer = proposer
        self._p = self._prior.copy()
        self._proposed = self._prior.copy()  # p as the strategy last set it, before the caps
        #: Records of the history: one per balancing update (skipped ones included; the seed of each update's dev
        #: batches), or a static strategy's one record of its p at the start.
        self.update_count = 0
        #: Times the sampled mix changed; a reader that remembers it knows whether it moved since it last looked.
        self.version = 0
        #: One record per update: step, strategy, p (the prior in the first), seconds, the strategy's own fields.
        self.history: list[dict[str, Any]] = []
        self._warned_large = False
        self._pending_seconds = 0.0
        #: Corpora capped (:meth:`cap`): name -> the share of p they keep at most.
        self.caps: dict[str, float] = {}
        #: History records of caps set, changed or lifted (:meth:`cap`); they are no balancing update.
        self.cap_records = 0

    # ------------------------------------------------------------------ reading
    @property
    def p(self) -> np.ndarray:
        """p, the mix the strategy learned (a float64 copy): what the history records."""
        return self._p.copy()

    @property
    def probabilities(self) -> np.ndarray:
        """The mix the sampler draws with now (a float64 copy): p, or the strategy's temporary mix
        (mixing-law's probe window), derived from p."""
        mix = self.proposer.sampling_mix(self._p) if self.proposer is not None else None
        return self._p.copy() if mix is None else self._capped(np.asarray(mix, dtype=np.float64))

    @property
    def plans_step_mixes(self) -> bool:
        """Whether the strategy plans each optimizer step's mix from the examples drawn for it (mixing-law's probe
        windows), which needs every process to draw the same batches."""
        return bool(getattr(self.proposer, "plans_step_mixes", False))

    def measures_at(self, step: int, update_every: int) -> bool:
        """Whether the strategy measures after optimizer step ``step`` (never for a p set by hand)."""
        return self.proposer is not None and self.proposer.measures_at(step, update_every)

    def check_training(self, update_every: int) -> None:
        """Refuse a training schedule the strategy cannot follow."""
        if self.proposer is not None:
            self.proposer.check_training(update_every)

    def log_fields(self, record: Mapping[str, Any]) -> dict[str, float]:
        """The numbers of a history record the strategy logs (below ``balance/``): none for a p set by hand."""
        return {} if self.proposer is None else self.proposer.log_fields(record.get(self.strategy) or {})

    def planned_mix(self, p: np.ndarray, step: int) -> np.ndarray:
        """The mix to draw the batches of optimizer step ``step`` with, given the p in force (``p``): the strategy's
        planned mix (mixing-law's probe window of that step), or ``p`` itself. Lets the sampler draw ahead of
        training with the mix of the step a batch is for, not of the step it is drawn in."""
        mix = self.proposer.planned_mix(p, step) if self.proposer is not None else None
        return p if mix is None else self._capped(np.asarray(mix, dtype=np.float64))

    def drawn(self, step: int, counts: np.ndarray) -> None:
        """The sampler drew ``counts`` examples per corpus for optimizer step ``step``: told to the strategy
        (mixing-law fits its law on the shares its windows really drew)."""
        if self.proposer is not None:
            self.proposer.drawn(step, counts)

    @property
    def prior(self) -> np.ndarray:
        return self._prior.copy()

    @property
    def is_dynamic(self) -> bool:
        return self.proposer is not None and bool(self.proposer.learns)

    def as_dict(self) -> dict[str, float]:
        """p by corpus name."""
        return dict(zip(self.names, self._p.tolist()))

    def as_interleave_probabilities(self) -> list[float]:
        """p in corpus-name order (:attr:`names`), as ``datasets.interleave_datasets(datasets, probabilities=...)``
        takes it for datasets given in that order: the learned mix, taken to another tool."""
        return self._p.tolist()

    def final_mix(self) -> dict[str, Any]:
        """What ``final_mix.json`` holds: the strategy, the corpora and p in one order."""
        return {"strategy": self.strategy, "corpora": list(self.names),
                "probabilities": self.as_interleave_probabilities()}

    # ------------------------------------------------------------------ changing p
    def set_probabilities(self, probabilities: Sequence[float] | Mapping[str, float]) -> None:
        """Set p of a static distribution by hand (a custom schedule, or a test); readers see it from their next
        batch on. A dynamic strategy's p follows its strategy only (so that a run can be resumed exactly)."""
        if self.is_dynamic:
            raise ValueError(
                f"p of strategy {self.strategy!r} follows {self.proposer.learned_by}; it cannot be set by hand. Use a "
                "static strategy ('fixed') to set p yourself."
            )
        if isinstance(probabilities, Mapping):
            check_exact_names(probabilities, self.names,
                              missing="Probabilities must name exactly the corpora {expected}, got {given}.")
            probabilities = [probabilities[name] for name in self.names]
        self._proposed = validate_probabilities(probabilities, self.names)
        self._p = self._capped(self._proposed)
        self.version += 1

    def measured(self, step: int, values: Sequence[float], extras: Mapping[str, Any] | None = None, *,
                 rng: np.random.Generator | None = None, seconds: float = 0.0) -> dict[str, Any] | None:
        """One measurement of every corpus at ``step`` (``values``, and the reward's ``extras``), which took
        ``seconds``: the strategy proposes (:class:`~uat_hf.sampling.proposal.Proposal`), p moves to the proposed
        p (none: p stays; a skipped update is logged), the update is counted and its record built, added to the
        history and returned. A strategy still inside an update (a probe window ended) proposes nothing yet: no
        record, and its seconds count toward the next. Either way the sampled mix is read again, so a probe
        window's mix reaches the sampler. ``rng``: the strategy's randomness, the same on every rank and after a
        resume (the callback seeds it with the seed and the update count)."""
        if not self.is_dynamic:
            raise ValueError(f"Strategy {self.strategy!r} keeps p fixed; it has no balancing update.")
        before, p_before = self.probabilities, self._p
        self._pending_seconds += seconds
        measurement = Measurement(int(step), np.asarray(values, dtype=np.float64), dict(extras or {}), self.p,
                                  self.prior, rng if rng is not None else np.random.default_rng(self.update_count))
        proposal = self.proposer.propose(measurement)
        if proposal is None:
            self._mix_changed(before, accepted=False)
            return None
        accepted = proposal.p is not None
        if accepted:
            validate_probabilities(proposal.p, self.names)
            self._proposed = np.array(proposal.p, dtype=np.float64)
            self._p = self._capped(self._proposed)  # as proposed, bit for bit, unless a corpus is capped
            self._say_if_large(p_before, step)
        elif proposal.skipped:
            logger.warning("Skipping the balancing update at step %s: %s. p stays %s.", step, proposal.skipped,
                           dict(zip(self.names, self._p.round(4).tolist())))
        self._mix_changed(before, accepted)
        return self._record(step, proposal.fields, proposal.skipped)

    def cap(self, name: str, share: float | None, step: int, reason: str) -> dict[str, Any] | None:
        """From ``step`` on, corpus ``name`` keeps at most ``share`` of p (and of every mix derived from it); its
        excess goes to the other corpora in proportion to their p. A corpus already capped gets the new share;
        ``share=None`` lifts its cap (the corpus-health checks set a corpus aside at a fixed share, or move and
        lift its cap as the evidence changes). Returns the history record of the change, or ``None`` when nothing
        changes: the share is the one it has, a cap to lift is not there, or (with a warning) ``name`` is the last
        corpus not capped, as a run needs something to train on. ``reason`` is recorded with it (the corpus-health
        verdict)."""
        if name not in self.names:
            raise ValueError(f"Cannot cap {name!r}: it is not a training corpus (corpora: {self.names}).")
        if share is not None and not 0.0 <= share < 1.0:
            raise ValueError(f"The share a capped corpus keeps must be in [0, 1), got {share!r}.")
        if self.caps.get(name) == share or (share is None and name not in self.caps):
            return None
        if share is not None and name not in self.caps and len(self.caps) + 1 >= len(self.names):
            logger.warning("Not capping corpus %r at step %s: every other corpus is capped already, and training "
                           "needs at least one corpus. Check the training data.", name, step)
            return None
        if share is None:
            del self.caps[name]
        else:
            self.caps[name] = float(share)
        self._p = self._capped(self._proposed)
        self.version += 1
        self.cap_records += 1
        return self._record(step, {}, None, cap={name: {"share": None if share is None else float(share),
                                                        "reason": str(reason)}})

    @property
    def proposed(self) -> np.ndarray:
        """p as the strategy last set it, before the caps (a float64 copy)."""
        return self._proposed.copy()

    def _capped(self, p: np.ndarray, shares: Mapping[str, float] | None = None) -> np.ndarray:
        """``p`` with every capped corpus (``shares``, default this run's caps) at most at its share, and the others
        scaled up to fill the rest."""
        shares = self.caps if shares is None else shares
        if not shares:
            return p
        held = np.array([n in shares for n in self.names])
        caps = np.array([shares.get(n, 1.0) for n in self.names])
        capped = np.where(held, np.minimum(p, caps), p)
        free = capped[~held].sum()
        rest = 1.0 - capped[held].sum()
        capped[~held] = capped[~held] * (rest / free) if free > 0 else rest / (~held).sum()
        return capped

    def record_start(self) -> dict[str, Any]:
        """The record of a static strategy, written once when training starts (at step 0, where its p holds from):
        its p, so that every run, learned or not, leaves a p trace to plot and compare."""
        return self._record(0, {}, None)

    def _say_if_large(self, before: np.ndarray, step: int) -> None:
        """Warn, once per run, when one update moved p by more than :data:`LARGE_UPDATE_SHARE` of the way from p to
        uniform (total variation, and at least :data:`LARGE_UPDATE_MIN`): a step that size is a jump, not balancing,
        and usually means the strategy's step setting is too large for this run."""
        if self._warned_large:
            return
        moved = 0.5 * float(np.abs(self._p - before).sum())
        to_uniform = 0.5 * float(np.abs(before - 1.0 / len(before)).sum())
        if moved >= LARGE_UPDATE_MIN and moved > LARGE_UPDATE_SHARE * to_uniform:
            self._warned_large = True
            setting = getattr(self.proposer, "step_setting", None)
            logger.warning(
                "The balancing update at step %s moved p by %.2f (total variation), %.0f%% of its distance to uniform "
                "(%.2f), in one step: from %s to %s. %s Said once per run.", step, moved,
                100 * moved / to_uniform if to_uniform else float("inf"), to_uniform,
                dict(zip(self.names, before.round(4).tolist())), dict(zip(self.names, self._p.round(4).tolist())),
                f"Lower {setting} for gradual balancing." if setting else "The strategy's step is large for this run.")

    def _mix_changed(self, before: np.ndarray, accepted: bool) -> None:
        if accepted or not np.array_equal(before, self.probabilities):
            self.version += 1

    def _record(self, step: int, fields: Mapping[str, Any], skipped: str | None, *,
                cap: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The one place a history record is built: the same top-level fields for every strategy (and ``cap``, in
        the record of a cap set, changed or lifted)."""
        record: dict[str, Any] = {"step": int(step), "strategy": self.strategy}
        if not self.history:
            record["prior"] = dict(zip(self.names, self._prior.tolist()))  # where p stood at step 0, for the plots
        record["probabilities"] = self.as_dict()
        if skipped:
            record["skipped"] = skipped
        if cap:
            record["cap"] = dict(cap)
        record["seconds"], self._pending_seconds = self._pending_seconds, 0.0
        record[self.strategy] = dict(fields)
        if not cap:  # a cap is no update: the seeds of the dev batches and dropout stay in step
            self.update_count += 1
        self.history.append(record)
        return record

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: p, the prior, the strategy's state and the counts (floats round-trip exactly). Not
        the history, which would grow the state with every update: :meth:`records_in` says how many records it
        holds."""
        return {
            "format": _STATE_FORMAT,
            "strategy": self.strategy,
            "names": list(self.names),
            "prior": self._prior.tolist(),
            "probabilities": self._p.tolist(),
            "update_count": self.update_count,
            "version": self.version,
            **({"caps": dict(self.caps), "proposed": self._proposed.tolist()}
               if self.caps else {}),
            "cap_records": self.cap_records,
            "strategy_state": self.proposer.state_dict() if self.proposer is not None else None,
        }

    @staticmethod
    def records_in(state: Mapping[str, Any]) -> int:
        """How many history records a :meth:`state_dict` has seen: its updates and its caps set, changed or lifted
        (format 3 named them ``set_aside_records``, and left them out where they were one per cap)."""
        records = state.get("cap_records", state.get("set_aside_records", len(_caps_in(state))))
        return int(state["update_count"]) + int(records)

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Refuse (``ValueError``) a :meth:`state_dict` that is not this run's, changing nothing: its format,
        strategy, corpora, p and prior."""
        if state.get("format") not in _READ_FORMATS:
            raise ValueError(
                f"Unsupported corpus distribution state format {state.get('format')!r} (this uat_hf reads formats "
                f"{' and '.join(map(str, _READ_FORMATS))}); "
                + ("it was written by an older uat_hf (before strategies plugged in through their registry): resume "
                   "it with the uat_hf that wrote it, or start a new run."
                   if isinstance(state.get("format"), int) and state["format"] < min(_READ_FORMATS)
                   else "upgrade uat_hf to resume from it.")
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
        probabilities = np.asarray(state["probabilities"], dtype=np.float64)
        prior = np.asarray(state["prior"], dtype=np.float64)
        if not np.allclose(prior, self._prior, rtol=0, atol=1e-12):
            raise ValueError(
                f"The checkpoint's prior is {dict(zip(self.names, prior.tolist()))}, this run's "
                f"{dict(zip(self.names, self._prior.tolist()))}: the prior settings (sampling_temperature, "
                "scorer_prior_temperature, corpus_probabilities) or the corpus sizes changed. Resume with the same "
                "settings and data, or start a new run."
            )
        if int(state["version"]) == 0 and not np.array_equal(probabilities, prior):
            raise ValueError(f"Inconsistent corpus distribution state: p = {probabilities.tolist()} but the prior is "
                             f"{prior.tolist()} and p never changed; the checkpoint is corrupt.")

    def load_state_dict(self, state: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> None:
        """Restore a :meth:`state_dict` and the ``history`` records of its updates (one per update, as
        :class:`~uat_hf.utils.checkpoints.HistoryFile` reads them back) after checking they belong to this run and
        agree with each other."""
        self.check_state(state)
        probabilities = np.asarray(state["probabilities"], dtype=np.float64)  # as saved, bit for bit
        prior = np.asarray(state["prior"], dtype=np.float64)
        update_count, version = int(state["update_count"]), int(state["version"])
        caps = _caps_in(state)
        proposed = np.asarray(state.get("proposed", probabilities), dtype=np.float64)
        if not np.array_equal(self._capped(proposed, caps), probabilities):
            raise ValueError(f"Inconsistent corpus distribution state: p = {probabilities.tolist()} is not the "
                             f"strategy's p {proposed.tolist()} with the caps {caps}; the checkpoint is corrupt.")
        if self.proposer is not None:  # it checks its state against its own p, before the caps
            self.proposer.load_state_dict(state["strategy_state"], proposed, version > 0)
        if len(history) != self.records_in(state):
            raise ValueError(f"Inconsistent corpus distribution state: {len(history)} history records for "
                             f"{update_count} updates and {self.records_in(state) - update_count} caps set, "
                             "changed or lifted.")
        last = history[-1].get("probabilities") if history else None
        if last is not None and last != dict(zip(self.names, probabilities.tolist())):
            raise ValueError(f"The last history record (step {history[-1].get('step')}) has p = {last}, the "
                             f"checkpoint p = {probabilities.tolist()}: the history is another run's.")
        self._prior, self._p = prior, probabilities
        self.update_count, self.version = update_count, version
        self._proposed, self.caps = proposed, caps
        self.cap_records = self.records_in(state) - update_count
        self.history = [dict(record) for record in history]

    def __repr__(self) -> str:
        p = ", ".join(f"{n}={v:.4f}" for n, v in zip(self.names, self._p))
        return f"CorpusDistribution({self.strategy}: {p}; updates={self.update_count})"


def _caps_in(state: Mapping[str, Any]) -> dict[str, float]:
    """The caps of a :meth:`CorpusDistribution.state_dict` (format 3 kept them under ``set_aside``)."""
    return {str(n): float(v) for n, v in state.get("caps", state.get("set_aside", {})).items()}
