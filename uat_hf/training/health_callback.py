"""Corpus health during training: warn, naming the corpus and the numbers, when its training pairs look broken.

A few checks per run (``corpus_health_checks``, evenly spaced) measure how much the model relies on the sources of
a sample of every corpus's training pairs, held out of training (``corpus_health_holdout``; a fresh part of them at
each check where they hold more than one sample), against its dev pairs (:mod:`uat_hf.evaluation.corpus_health`).
Each check reads the first half of every corpus's sample, and the second half only where the first cannot clear
the corpus (:meth:`~uat_hf.evaluation.corpus_health.CorpusHealth.undecided`): a sound corpus costs about half a
sample, and every verdict is still reached on the whole sample. A corpus suspect at two consecutive checks (by a
margin that keeps a sound corpus's chance of being called broken in a run under 1 %:
:func:`~uat_hf.evaluation.corpus_health.suspect_z`) gets one warning in the log. With ``corpus_health_action:
set_aside`` it is also set aside: it keeps at most ``corpus_health_share`` of p from that step on. With
``down_weight`` it is capped from the first check that finds it damaged with confidence (one check's margin, the
same 1 % per run), at its share of the strategy's p times the measured ratio of source uses, and the cap follows
every later check, lifted when one no longer finds the damage. Either holds whatever the strategy
(:meth:`~uat_hf.training.callback.CorpusBalancingCallback.cap`). The strategies' own measurements cannot do
this: a corpus of misaligned pairs still lowers its dev loss (its targets teach the domain's
words) and stays the one the model is most uncertain about, so MultiUAT and mixing-law keep or raise its share. The
checks join the Trainer's log entries as ``health/<corpus>_source_use``, ``_z`` and ``_dev_z`` (so
``trainer_state.json`` keeps them, and a resumed run picks up the last one), and :attr:`CorpusHealthCallback.last`
gives the final verdict to whoever writes the run's results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from transformers import TrainerCallback

from ..evaluation.corpus_health import (
    DAMAGED_SHARE,
    MIN_DEV_Z,
    CorpusHealth,
    HealthSample,
    SampleCheck,
    check_sample,
    draw_health_sample,
    fresh_parts,
    suspect_corpora,
    suspect_z,
)
from ..models.causal_lm import is_causal_lm
from .balancing_arguments import HEALTH_ACTIONS
from .callback import CorpusBalancingCallback, join_training_log

__all__ = ["CorpusHealthCallback"]

logger = logging.getLogger(__name__)

_PREFIX = "health/"
_KEYS = ("source_use", "z", "dev_z")  # logged per corpus: what suspect_corpora reads


class CorpusHealthCallback(TrainerCallback):
    """Checks every corpus's training/dev loss ratio ``checks`` times per run and warns about broken corpora."""

    def __init__(self, train_corpora: Mapping[str, Any], dev_corpora: Mapping[str, Any],
                 collate_fn: Callable[[list[dict]], dict], *, held_out: Mapping[str, Any] | None = None,
                 checks: int = 3, tokens: int = 4096, sub_batch_tokens: int = 4096, seed: int = 0,
                 language_code_ids: Collection[int] = (), balancing: CorpusBalancingCallback | None = None,
                 action: str = "warn", share: float = 0.01, accelerator: Any = None) -> None:
        if checks < 1:
            raise ValueError(f"corpus_health_checks must be >= 1 to build a CorpusHealthCallback, got {checks}.")
        if action not in HEALTH_ACTIONS:
            raise ValueError(f"A CorpusHealthCallback's action must be one of {', '.join(HEALTH_ACTIONS)}, got "
                             f"{action!r}.")
        if (action != "warn") != (balancing is not None):
            raise ValueError(f"action={action!r} caps p through the balancing callback: give balancing= for "
                             "set_aside and down_weight, and none for warn.")
        #: Caps broken corpora's shares through it (``action``; ``share``: the set-aside share, the least a
        #: down-weighted corpus keeps).
        self.balancing, self.action, self.share, self.accelerator = balancing, action, float(share), accelerator
        self.names = list(train_corpora)
        self.train_corpora, self.dev_corpora = train_corpora, dev_corpora
        #: Per corpus, the pairs held out of training that the checks sample (:func:`hold_out_pairs`); a corpus
        #: absent here is checked on pairs it trains on.
        self.held_out = dict(held_out or {})
        self.collate_fn = collate_fn
        self.checks, self.tokens, self.sub_batch_tokens = checks, tokens, sub_batch_tokens
        self.seed, self.language_code_ids = seed, language_code_ids
        self.every = 0
        self.last: CorpusHealth | None = None
        self.warned: dict[str, str] = {}
        self._previous: tuple[dict[str, float], ...] | None = None
        #: Per corpus, the held-out pairs in parts, a fresh one for each check in turn (:meth:`_sample`) ...
        self._parts: dict[str, list] = {}
        #: ... and the part its last check read with that check's sample.
        self._samples: dict[str, tuple[int, HealthSample]] = {}
        self._pending: dict[str, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.every = max(1, state.max_steps // self.checks)
        for entry in state.log_history:  # a resumed run: the last check before the checkpoint
            logged = [{n: entry.get(f"{_PREFIX}{n}_{key}") for n in self.names} for key in _KEYS]
            if all(v is not None for values in logged for v in values.values()):
                self._previous = tuple(logged)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if model is not None and (step % self.every == 0 or step == state.max_steps):
            self.check(model, step)
            control.should_log = True  # each check's numbers join a log entry of their own step
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if join_training_log(state, logs, self._pending):
            self._pending = {}

    def check(self, model: Any, step: int) -> CorpusHealth:
        """Measure now; warn about corpora suspect now and at the previous check."""
        every = self.every or max(1, step // self.checks)  # 0: a finished run evaluated again, at its last step
        index = -(-step // every) - 1  # the check's number, from its step alone: a resumed run agrees
        samples = {n: self._sample(n, i, index, is_causal_lm(model)) for i, n in enumerate(self.names)}
        threshold = suspect_z(len(self.names), self.checks)
        halves = [[check_sample(model, getattr(samples[n], side)[0], self.language_code_ids)
                   for n in self.names] for side in ("train", "dev")]
        undecided = self._agreed(CorpusHealth(step, self.names, *halves, threshold).undecided())
        if undecided:
            logger.info(f"corpus health at step {step}: the first half of the sample cannot clear "
                        f"{', '.join(undecided)}; their second half is read")
        for n in undecided:  # the same passes on every rank (a sharded model needs them)
            i = self.names.index(n)
            for side, checks in zip(("train", "dev"), halves):
                checks[i] = SampleCheck.pooled([checks[i], *(check_sample(model, half, self.language_code_ids)
                                                            for half in getattr(samples[n], side)[1:])])
        health = CorpusHealth(step, self.names, *halves, threshold)
        before = suspect_corpora(*self._previous, threshold=threshold) if self._previous else []
        confirmed = [name for name in health.suspects() if name in before]
        for name in confirmed:
            if name not in self.warned:
                self.warned[name] = health.describe(name)
                logger.warning(self.warned[name])
        if self.action == "down_weight":
            self._down_weight(health)
        elif self.action == "set_aside":
            for name in self._agreed(confirmed):
                if self.balancing.cap(name, self.share, step, health.describe(name)) is not None:
                    note = (f"Corpus {name!r} was set aside from step {step}: it kept at most {self.share:g} of p "
                            "from then on (corpus_health_action=set_aside).")
                    self.warned[name] = f"{self.warned.get(name, health.describe(name))} {note}"
                    logger.warning(note)
        values = {key: dict(zip(self.names, v)) for key, v in zip(_KEYS, (health.share, health.z, health.dev_z))}
        self._previous = tuple(values.values())
        unmeasured = health.not_measurable()
        if unmeasured:
            logger.info(f"corpus health at step {step}: not measurable yet for {', '.join(unmeasured)} (dev z < "
                        f"{MIN_DEV_Z:g})")
        self._pending = {f"{_PREFIX}{n}_{key}": round(float(v), 4)
                         for key, per in values.items() for n, v in per.items()}
        self.last = health
        return health

    def _sample(self, name: str, position: int, index: int, causal: bool) -> HealthSample:
        """Corpus ``name``'s sample for check number ``index``: the next part of its held-out pairs
        (:func:`~uat_hf.evaluation.corpus_health.fresh_parts`, in turn), or the one fixed sample of the pairs it
        trains on where none are held out. Drawn once per part (the last one kept) and seeded, so every rank and
        every resume reads the same pairs."""
        pool = self.held_out.get(name)
        if pool is not None and name not in self._parts:
            self._parts[name] = fresh_parts(pool, self.tokens, self.seed + position)
        part = index % len(self._parts[name]) if pool is not None else 0
        if self._samples.get(name, (None,))[0] != part:
            train = self.train_corpora[name] if pool is None else pool.select(self._parts[name][part])
            self._samples[name] = (part, draw_health_sample(
                train, self.dev_corpora[name], self.collate_fn, tokens=self.tokens,
                sub_batch_tokens=self.sub_batch_tokens, seed=self.seed + position, causal=causal))
        return self._samples[name][1]

    def _down_weight(self, health: CorpusHealth) -> None:
        """Cap each corpus this check alone finds damaged with confidence (its training pairs' source use below its
        dev pairs' by :func:`suspect_z` of one check, and at most :data:`DAMAGED_SHARE` of it) at its sound share of
        the strategy's p: p times the ratio of the source uses, about the share of its pairs that are sound (and at
        least ``share``); lift the cap of one a check measures without that evidence. A corpus not measurable yet
        keeps what it has. Acting on the first confident check, instead of waiting for a second, is what saves the
        steps a late verdict costs; the ratio, instead of a fixed share, keeps the sound part of a partly broken
        corpus."""
        margin = suspect_z(len(self.names), self.checks, in_a_row=False)
        proposed = self.balancing.proposed
        caps: dict[str, float | None] = {}
        for name, ratio, z, dev_z in zip(self.names, health.share, health.z, health.dev_z):
            if dev_z >= MIN_DEV_Z:
                sound = min(max(ratio, 0.0), 1.0)
                damaged = z <= -margin and ratio <= DAMAGED_SHARE
                caps[name] = round(max(self.share, sound * proposed[name]), 6) if damaged else None
        for name, cap in self._agreed(caps).items():
            lifted = cap is None
            reason = (f"lifted at step {health.step}: its training pairs' source use is no longer {margin:.1f} "
                      "standard errors below its dev pairs'" if lifted else health.describe(name))
            if self.balancing.cap(name, cap, health.step, reason) is None:
                continue
            note = (f"Corpus {name!r}'s cap is lifted at step {health.step} (corpus_health_action=down_weight): "
                    "the check no longer finds its training pairs broken." if lifted else
                    f"Corpus {name!r} keeps at most {cap:g} of p from step {health.step} (corpus_health_action="
                    f"down_weight): its share of the strategy's p times the ratio of source uses, until a check "
                    "measures it without that evidence.")
            if not lifted and name not in self.warned:
                self.warned[name] = f"{health.describe(name)} {note}"
            logger.warning(note)

    def _agreed(self, value: Any) -> Any:
        """The main process's verdict on every rank: the checks run on each, and p must move identically."""
        if self.accelerator is None or self.accelerator.num_processes == 1:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value], from_process=0)[0]

    def summary(self) -> dict:
        """The last check, the warnings of the run, the caps in force and a note naming the corpora the last
        check could not judge, for ``eval_results.json`` and the model card."""
        caps = self.balancing.caps if self.balancing is not None else {}
        unmeasured = self.last.not_measurable() if self.last else []
        note = (f"Corpus health not measurable yet for {', '.join(repr(n) for n in unmeasured)} at step "
                f"{self.last.step}: the model does not clearly use the sources of their dev pairs yet (dev z < "
                f"{MIN_DEV_Z:g}), so broken training pairs there would go unseen; the audit before training "
                "(corpus_audit) is what checks them." if unmeasured else None)
        held = {n: len(self.held_out[n]) if n in self.held_out else 0 for n in self.names}
        parts = {n: len(self._parts[n]) for n in self.names if n in self._parts}
        return {**(self.last.as_dict() if self.last else {}), "held_out_pairs": held, "fresh_samples": parts,
                "warnings": list(self.warned.values()),
                **({"caps": dict(caps)} if caps else {}), **({"note": note} if note else {})}
