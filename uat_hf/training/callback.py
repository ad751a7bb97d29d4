"""When to measure, update, log and checkpoint the corpus distribution.

:class:`CorpusBalancingCallback` is the one update loop behind every strategy, built-in or outside: static
priors only keep the sampler's epoch and state in step with the Trainer (and record their p once, at the
start); a dynamic strategy additionally, at the steps it asks for
(:meth:`~uat_hf.strategies.base.BalancingStrategy.measures_at`: every ``update_every`` optimizer steps, and
mixing-law's probe-window boundaries), draws a dev batch per corpus, has its reward measure one number per
corpus and hands them to the :class:`~uat_hf.sampling.distribution.CorpusDistribution`, whose strategy proposes
the new p. The sampler reads the mix to draw with from the distribution for its next batch. Nothing here
knows a strategy by name.

Distributed runs: every rank holds its own sampler and strategy and must reach bit-identical probabilities.
The rewards are computed as a share per rank (the reward splits the work), summed with one all-reduce and
finished identically everywhere, so the strategy, which is deterministic, moves identically on every rank.
Dev batches are drawn from generators seeded by ``(seed, update index, corpus)``, so they are the same on
every rank and in a resumed run.

State (the distribution, with its strategy state and update count, and the sampler's position) is written as JSON
into each checkpoint folder by :meth:`CorpusBalancingCallback.on_save`, under ``UATTrainer`` and a stock Trainer
alike, and read back by :meth:`CorpusBalancingCallback.restore` when training resumes. A streamed run's sampler
(:mod:`uat_hf.sampling.stream_batches`) reads another shard on every rank: each rank writes its own state beside it.
Each update's record goes to ``balancing_history.jsonl`` (:class:`~uat_hf.utils.checkpoints.HistoryFile`), and its
numbers join the Trainer's next training log entry: the one its loggers receive and the one kept in
``state.log_history`` (so ``trainer_state.json``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from ..sampling.distribution import CorpusDistribution
from ..sampling.packing import draw_token_batch, example_lengths, split_by_tokens
from ..sampling.sampler import CorpusBatchSampler
from ..strategies.rewards import BalancingReward
from ..utils.checkpoints import (
    BALANCING_STATE_FILE,
    FINAL_MIX_FILE,
    HISTORY_FILE,
    STREAM_STATE_FILE,
    HistoryFile,
    read_stream_state,
    write_json_atomically,
)
from ..utils.columns import model_columns
from ..utils.names import check_exact_names
from .resume_check import STATE_FORMAT as _STATE_FORMAT
from .resume_check import check_resume

logger = logging.getLogger(__name__)


class CorpusBalancingCallback(TrainerCallback):
    """Keeps a :class:`~uat_hf.sampling.sampler.CorpusBatchSampler` in step with training and asks for p's updates.

    The strategy, prior and p belong to ``sampler.distribution`` (a
    :class:`~uat_hf.sampling.distribution.CorpusDistribution`); this callback decides when to measure and update it,
    and logs and checkpoints it: it is the one writer of the balancing state and of the history file.

    Args:
        sampler: the sampler the training DataLoader iterates.
        reward: what a dynamic strategy measures (its
            :meth:`~uat_hf.strategies.base.BalancingStrategy.build_reward`); ``None`` for static strategies.
        dev_corpora: tokenized trusted dev sets, one per training corpus (same names).
        collate_fn: turns a list of dataset rows into model inputs (the Trainer's data collator).
        update_every: S, optimizer steps between two updates (checked by
        :class:`~uat_hf.training.uat_config.UATConfig`).
        dev_batch_tokens: tokens drawn per dev corpus at each update, an example counting max(source, target)
            tokens as in the authors' fairseq batches (and as the training batches count them).
        sub_batch_tokens: padded-token cap of one forward pass during measurement.
        seed: must be the same on every rank.
        accelerator: the Trainer's ``accelerate.Accelerator`` (for the all-reduce); ``None`` on one process.
        train_corpora: tokenized training corpora, needed only by a reward that draws fresh train batches
            (MultiDDS-S: ``needs_train_batches``, of its ``train_batch_tokens``).
        allow_inexact_resume: resume from a checkpoint without the balancing state (the sampler restarts its
            epoch and the distribution its prior, so the run no longer continues the same sequence) instead
            of refusing it.
        settings: the run's settings that a resume must keep
            (:func:`~uat_hf.training.resume_check.resume_settings`), saved in the state and checked on resume.
    """

    def __init__(
        self,
        sampler: CorpusBatchSampler,
        *,
        reward: BalancingReward | None = None,
        dev_corpora: Mapping[str, Any] | None = None,
        collate_fn: Callable[[list[dict]], dict[str, torch.Tensor]] | None = None,
        update_every: int = 1000,
        dev_batch_tokens: int = 1024,
        sub_batch_tokens: int = 4096,
        seed: int = 0,
        accelerator: Any = None,
        train_corpora: Mapping[str, Any] | None = None,
        allow_inexact_resume: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.sampler = sampler
        self.distribution = sampler.distribution
        self.reward = reward
        self.update_every = int(update_every)
        self.dev_batch_tokens = int(dev_batch_tokens)
        self.sub_batch_tokens = int(sub_batch_tokens)
        self.seed = int(seed)
        self.accelerator = accelerator
        self.collate_fn = collate_fn
        self.allow_inexact_resume = bool(allow_inexact_resume)
        self.settings = dict(settings or {})
        #: Checkpoint folder to restore from at the start of training; when unset and the Trainer resumes,
        #: ``output_dir/checkpoint-<global_step>`` (where the Trainer itself saves) is used.
        self.resume_from: str | None = None
        #: (checkpoint folder, its balancing state) once :func:`~uat_hf.training.resume_check.check_resume` accepted
        #: it, so that the restore reads and checks it no second time.
        self.checked_resume: tuple[str, dict] | None = None
        self._history: HistoryFile | None = None  # set when training begins, where output_dir is known
        self._pending_logs: dict[str, float] = {}
        self._dev_batches: tuple[int, list] | None = None  # (update count, its dev batches)
        # Only the model's columns, selected once: select_columns builds a new Dataset (and fingerprint) per call.
        self.dev_corpora = {n: model_columns(d) for n, d in (dev_corpora or {}).items()}
        self.train_corpora = {n: model_columns(d) for n, d in (train_corpora or {}).items()}
        if (reward is not None) != self.distribution.is_dynamic:
            raise ValueError(
                f"Strategy {self.distribution.strategy!r} "
                + ("learns p and needs a reward to measure." if reward is None
                   else "keeps p fixed; give it no reward.")
            )
        if reward is not None:
            if collate_fn is None:
                raise ValueError("A dynamic strategy needs collate_fn to turn dev rows into model inputs.")
            _check_same_corpora(sampler.names, self.dev_corpora, "dev")
            if reward.needs_train_batches:
                _check_same_corpora(sampler.names, self.train_corpora, "train")
            self._dev_lengths = {n: example_lengths(self.dev_corpora[n]) for n in sampler.names}
            self._train_lengths = (
                {n: example_lengths(self.train_corpora[n]) for n in sampler.names}
                if reward.needs_train_batches else {}
            )
            self.distribution.check_training(self.update_every)

    @property
    def strategy(self) -> str:
        return self.distribution.strategy

    @property
    def update_count(self) -> int:
        return self.distribution.update_count

    @property
    def caps(self) -> dict[str, float]:
        """The shares of p the health actions cap corpora at, by name (the distribution owns them)."""
        return dict(self.distribution.caps)

    @property
    def proposed(self) -> dict[str, float]:
        """The strategy's own p before the caps, by name: what a cap is a share of."""
        return dict(zip(self.distribution.names, self.distribution.proposed.tolist()))

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        # UATConfig refuses update_every >= max_steps; a run by epochs learns its max_steps only here.
        if self.reward is not None and args.max_steps <= 0 < state.max_steps <= self.update_every:
            raise ValueError(f"update_every={self.update_every} >= max_steps={state.max_steps} (the steps this "
                             f"run trains): strategy {self.strategy!r} would never re-balance. Lower update_every or "
                             "train longer.")
        # Every rank draws the same batch sequence, and one optimizer step consumes this many of it: how the sampler
        # maps a batch to the step it is for (planned mixes: mixing-law's probe windows free of the prefetch lag).
        self.sampler.batches_per_step = int(args.gradient_accumulation_steps) * self._shard()[1]
        folder = self.resume_from or os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        path = os.path.join(folder, BALANCING_STATE_FILE)
        if state.global_step > 0 and os.path.isfile(path):
            self.restore(folder, args)
            return
        if state.global_step > 0:
            if not self.allow_inexact_resume:
                raise ValueError(f"Cannot resume exactly at step {state.global_step}: {path} is missing, so the "
                                 "corpus sampler would restart its epoch and the corpus distribution its prior. "
                                 "Resume from a complete checkpoint, or set allow_inexact_resume=True to continue "
                                 "anyway.")
            logger.warning(
                "Resuming at step %d without %s (allow_inexact_resume): the corpus sampler restarts its epoch and the "
                "corpus distribution its prior, so the run will not continue the exact same sequence.",
                state.global_step, path)
        self._history = HistoryFile(os.path.join(args.output_dir, HISTORY_FILE), writes=args.should_save)
        self._history.restore(0)  # a new run into an old output_dir, or a restart at the prior: only its own records
        if not self.distribution.is_dynamic:
            self._finish(self.distribution.record_start())  # a static p leaves its trace too, at step 0

    def on_epoch_begin(self, args, state, control, **kwargs):
        # A sampler accelerate wrapped (skip_first_batches on several ranks) is out of the Trainer's reach: set here.
        self.sampler.set_epoch(math.floor(state.epoch or 0), first_step=state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.reward is not None and self.distribution.measures_at(state.global_step, self.update_every):
            if self.update(model, state.global_step) is not None:
                control.should_log = True  # each update's numbers join a log entry of their own step
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The last update's numbers join the next training entry: the dict the loggers after us receive, and the
        # copy Trainer.log put in state.log_history before calling us (what trainer_state.json keeps).
        if join_training_log(state, logs, self._pending_logs):
            self._pending_logs = {}

    def on_train_end(self, args, state, control, **kwargs):
        if args.should_save:  # the mix training ended with, for interleave_datasets or another trainer
            os.makedirs(args.output_dir, exist_ok=True)
            write_json_atomically(os.path.join(args.output_dir, FINAL_MIX_FILE),
                                  {"step": state.global_step, **self.distribution.final_mix()})

    def on_save(self, args, state, control, **kwargs):
        # After the Trainer's own files: a kill in between leaves a folder without the balancing state, which
        # checkpoint_problem() counts as incomplete, so resume never trusts it.
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if getattr(self.sampler, "per_rank_state", False):  # each rank streams its own shard: its own file
            # The DataLoader drew ahead: the stream sampler saves its state at this step, not at the batches drawn.
            self.sampler.steps_done = state.global_step
            os.makedirs(folder, exist_ok=True)
            write_json_atomically(os.path.join(folder, STREAM_STATE_FILE.format(rank=args.process_index)),
                                  self.sampler.state_dict())
        if args.should_save:
            os.makedirs(folder, exist_ok=True)
            self.save(os.path.join(folder, BALANCING_STATE_FILE))

    # ------------------------------------------------------------------ the update
    def update(self, model: torch.nn.Module, step: int) -> dict | None:
        """Measure every corpus and hand the measurement to the distribution, whose strategy proposes p; returns
        the update's record, or ``None`` while the strategy's update is still in progress (mixing-law's probe
        windows switch the sampler's mix, and only the last one moves p). The record is appended to
        ``balancing_history.jsonl`` (during training), and its numbers go out with the Trainer's next log entry."""
        start = time.perf_counter()
        values, extras = self._measure(model)
        measure = getattr(self.reward, "measure", None)
        rng = np.random.default_rng([self.seed, self.update_count, 3])  # e.g. mixing-law's window order
        record = self.distribution.measured(step, values, {"measure": measure, **extras} if measure else extras,
                                            rng=rng, seconds=time.perf_counter() - start)
        if record is not None:
            self._finish(record)
        return record

    def _measure(self, model: torch.nn.Module) -> tuple[np.ndarray, dict]:
        """One measurement of the reward on this update's dev (and train) batches, summed over the ranks."""
        process_index, num_processes = self._shard()
        dev_batches = self.dev_batches()
        train_batches = self._train_batches(process_index, num_processes) if self.reward.needs_train_batches else None
        with self._training_precision():
            return self.reward.rewards_over_ranks(model, dev_batches, train_batches, process_index=process_index,
                                                  num_processes=num_processes, reduce=self._sum_over_ranks,
                                                  seed=lambda block: self.dropout_seed(process_index, block))

    def _finish(self, record: dict) -> None:
        """Append the record to the history file and queue its numbers for the next log: p and the seconds for
        every strategy, the strategy's own numbers (:meth:`~uat_hf.strategies.base.BalancingStrategy.log_fields`)
        below ``balance/`` too."""
        if self._history is not None:
            self._history.append(record)
        self._pending_logs = {f"balance/p_{n}": value for n, value in record["probabilities"].items()}
        own = self.distribution.log_fields(record)
        self._pending_logs.update({f"balance/{key}": value for key, value in own.items()})
        self._pending_logs["balance/seconds"] = record["seconds"]

    def cap(self, name: str, share: float | None, step: int, reason: str) -> dict | None:
        """Cap corpus ``name`` at ``share`` of p from ``step`` on, or lift its cap (``None``;
        :meth:`~uat_hf.sampling.distribution.CorpusDistribution.cap`): its record joins the history file and the new
        p the next log entry. Called with the same arguments on every rank."""
        record = self.distribution.cap(name, share, step, reason)
        if record is not None:
            if self._history is not None:
                self._history.append(record)
            self._pending_logs.update({f"balance/p_{n}": value for n, value in record["probabilities"].items()})
        return record

    def dev_batches(self) -> list[list[dict]]:
        """The collated dev batches of every corpus for the next update (seeded by the seed and the update count),
        drawn once per update: mixing-law measures them again at every probe window's end."""
        if self._dev_batches is None or self._dev_batches[0] != self.update_count:
            self._dev_batches = (self.update_count, [
                self._token_batches(self.dev_corpora[n], self._dev_lengths[n], self.dev_batch_tokens, i, 0)
                for i, n in enumerate(self.sampler.names)])
        return self._dev_batches[1]

    def _train_batches(self, process_index: int, num_processes: int) -> list:
        """Fresh train batches: one per corpus, or with a per-pair reward ``[i][j]`` for dev corpus i and train
        corpus j (only the pairs this rank computes are drawn; the others are ``None``)."""
        names = self.sampler.names

        def draw(j: int, key: int | tuple[int, int], purpose: int) -> list[dict]:
            n = names[j]
            return self._token_batches(self.train_corpora[n], self._train_lengths[n], self.reward.train_batch_tokens,
                                       key, purpose)

        if not getattr(self.reward, "per_pair_train_batches", False):
            return [draw(j, j, 1) for j in range(len(names))]
        return [[draw(j, (i, j), 2) if j % num_processes == process_index else None for j in range(len(names))]
                for i in range(len(names))]

    def dropout_seed(self, process_index: int = 0, block: int = 0) -> int:
        """Seed of this rank's MC-dropout masks (or gradient-cosine dropout) for the next update; ``block`` > 0:
        for adaptive K's later blocks of passes."""
        key = [self.seed, self.update_count, process_index] + ([block] if block else [])
        return int(np.random.SeedSequence(key).generate_state(1)[0])

    def _token_batches(self, dataset, lengths: np.ndarray, tokens: int, corpus: int | Sequence[int],
                       purpose: int) -> list[dict]:
        rng = np.random.default_rng([self.seed, self.update_count, purpose, *np.atleast_1d(corpus).tolist()])
        chosen = draw_token_batch(lengths, tokens, rng)
        chunks = split_by_tokens(chosen, lengths, self.sub_batch_tokens)
        return [self.collate_fn(_rows(dataset, chunk)) for chunk in chunks]

    def _training_precision(self):
        """The passes run in the precision the model trains in: under ``bf16``/``fp16`` the Trainer's forward is
        autocast, and measuring in float32 instead would make the K·N passes several times slower on a GPU."""
        return self.accelerator.autocast() if self.accelerator is not None else contextlib.nullcontext()

    def _shard(self) -> tuple[int, int]:
        if self.accelerator is None:
            return 0, 1
        return self.accelerator.process_index, self.accelerator.num_processes

    def _sum_over_ranks(self, shares: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every share summed over the ranks in one all-reduce (the arrays laid end to end), not one per key."""
        arrays = {key: np.asarray(value, dtype=np.float64) for key, value in shares.items()}
        if self.accelerator is None or self.accelerator.num_processes == 1:
            return arrays
        flat = np.concatenate([a.ravel() for a in arrays.values()])
        tensor = torch.as_tensor(flat, device=self.accelerator.device)
        summed = self.accelerator.reduce(tensor, reduction="sum").cpu().numpy()
        ends = np.cumsum([a.size for a in arrays.values()])
        return {key: part.reshape(a.shape) for (key, a), part in zip(arrays.items(), np.split(summed, ends[:-1]))}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"format": _STATE_FORMAT, "distribution": self.distribution.state_dict(),
                "sampler": self.sampler.state_dict(), "settings": self.settings}

    def load_state_dict(self, state: Mapping, history: Sequence[Mapping] = ()) -> None:
        """Restore a :meth:`state_dict` and the ``history`` records of its distribution's updates."""
        if state.get("format") != _STATE_FORMAT:
            raise ValueError(
                f"The balancing state has format {state.get('format')!r}, this version of uat_hf reads "
                f"{_STATE_FORMAT} (an older checkpoint kept the history, or p in the sampler and scorer, inside the "
                "state, or a mixing-law probe mix as p); resume it with the uat_hf that wrote it, or start a new run."
            )
        self.distribution.load_state_dict(state["distribution"], history)
        self.sampler.load_state_dict(state["sampler"])

    def save(self, path: str) -> None:
        write_json_atomically(path, self.state_dict())

    def restore(self, folder: str, args: Any) -> None:
        """Continue from checkpoint ``folder``: its balancing state, and the history records of the updates it had
        seen, read from the history file of the run that saved it (in ``folder``'s parent) and kept as the history
        file of this run (``args.output_dir``), without the records a later checkpoint or a kill left there. The
        history file is written only after the state was checked (:func:`~uat_hf.training.resume_check.check_resume`)
        and loaded: a refused resume changes no file."""
        checked, self.checked_resume = self.checked_resume, None
        state = checked[1] if checked is not None and checked[0] == folder else check_resume(
            folder, strategy=self.strategy, names=self.sampler.names, settings=self.settings,
            distribution=self.distribution)
        self._history = HistoryFile(os.path.join(args.output_dir, HISTORY_FILE), writes=args.should_save)
        saved_in = os.path.join(os.path.dirname(os.path.abspath(folder)), HISTORY_FILE)
        records = self._history.records(CorpusDistribution.records_in(state["distribution"]), source=saved_in)
        if getattr(self.sampler, "per_rank_state", False):
            state = {**state, "sampler": read_stream_state(folder, args.process_index)}
        self.load_state_dict(state, records)
        self._history.keep(records)


def join_training_log(state: Any, logs: dict | None, numbers: Mapping[str, float]) -> bool:
    """Add ``numbers`` to a training log entry (one with a loss): to ``logs``, the dict the loggers after the
    calling callback receive, and to the copy ``Trainer.log`` put in ``state.log_history`` before calling the
    callbacks (what ``trainer_state.json`` keeps). Whether they were added."""
    if logs is None or not numbers or not ("loss" in logs or "train_loss" in logs):
        return False
    logs.update(numbers)
    if state.log_history and state.log_history[-1].get("step") == state.global_step:
        state.log_history[-1].update(numbers)
    return True


def _rows(dataset, indices: Sequence[int]) -> list[dict]:
    batch = dataset[np.asarray(indices).tolist()]
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def _check_same_corpora(names: Sequence[str], corpora: Mapping[str, Any], kind: str) -> None:
    check_exact_names(corpora, names, kind=kind, Kind=kind.capitalize(),
                      missing="Training corpus {name!r} has no {kind} set; give one {kind} set per training corpus.",
                      extra="{Kind} set {name!r} has no training corpus of the same name.")
    for n in names:
        if len(corpora[n]) == 0:
            raise ValueError(f"The {kind} set of corpus {n!r} is empty.")
