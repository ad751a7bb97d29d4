"""When to measure, update, log and checkpoint the corpus distribution.

:class:`CorpusBalancingCallback` is the one update loop behind every strategy: static priors only keep
the sampler's epoch and state in step with the Trainer; MultiUAT and MultiDDS-S additionally, every
``update_every`` optimizer steps, draw a dev batch per corpus, ask their reward for one number per
corpus, update the scorer ψ and hand the new distribution to the sampler.

Distributed runs: every rank holds its own sampler and scorer and must reach bit-identical probabilities.
The rewards are computed as a share per rank (the reward splits the work), summed with one all-reduce and
finished identically everywhere, so the scorer, which is deterministic, moves identically on every rank.
Dev batches are drawn from generators seeded by ``(seed, update index, corpus)``, so they are the same on
every rank and in a resumed run.

State (sampler, scorer, update count) is written as JSON into each checkpoint folder and read back when
training resumes, whether the Trainer is ours or a stock one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from transformers import TrainerCallback

from .checkpoints import BALANCING_STATE_FILE, write_json_atomically
from .priors import temperature_prior
from .rewards import BalancingReward
from .sampler import CorpusBatchSampler, example_lengths
from .scorer import CorpusScorer, NonFiniteRewardError

logger = logging.getLogger(__name__)

STATE_FILE = BALANCING_STATE_FILE
HISTORY_FILE = "balancing_history.jsonl"


def draw_token_batch(lengths: np.ndarray, target_tokens: int, rng: np.random.Generator) -> np.ndarray:
    """Random examples (without replacement) until their lengths add up to ``target_tokens``.

    The draw is random, so the reward estimates the whole dev set; the drawn examples are then sorted by
    length, so that splitting them into sub-batches cuts padding without changing which are measured.
    """
    order = rng.permutation(len(lengths))
    count = int(np.searchsorted(np.cumsum(lengths[order]), target_tokens, side="left")) + 1
    chosen = order[: min(count, len(order))]
    return chosen[np.argsort(lengths[chosen], kind="stable")]


def split_by_tokens(indices: np.ndarray, lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Split length-sorted ``indices`` into consecutive sub-batches of at most ``max_tokens`` padded tokens."""
    chunks, start = [], 0
    for end in range(1, len(indices) + 1):
        if end - start > 1 and (end - start) * lengths[indices[end - 1]] > max_tokens:
            chunks.append(indices[start : end - 1])
            start = end - 1
    chunks.append(indices[start:])
    return chunks


class CorpusBalancingCallback(TrainerCallback):
    """Keeps a :class:`~uat_hf.sampler.CorpusBatchSampler` in step with training and re-learns its p.

    Args:
        sampler: the sampler the training DataLoader iterates.
        strategy: ``proportional`` / ``temperature`` / ``uniform`` (static) or ``multiuat`` / ``multidds-s``.
        reward: what a dynamic strategy measures (:class:`~uat_hf.rewards.UncertaintyReward` or
            :class:`~uat_hf.gradient_cosine.GradientCosineReward`); ``None`` for static strategies.
        dev_corpora: tokenized trusted dev sets, one per training corpus (same names).
        collate_fn: turns a list of dataset rows into model inputs (the Trainer's data collator).
        update_every: S, optimizer steps between two updates.
        dev_batch_tokens: target tokens drawn per dev corpus at each update.
        sub_batch_tokens: padded-token cap of one forward pass during measurement.
        scorer_lr, scorer_steps: Adam settings of ψ.
        scorer_prior_fit: how ψ starts (:data:`~uat_hf.scorer.PRIOR_FITS`).
        prior_temperature: τ of the prior ψ starts from.
        initial_probabilities: hand-given distribution over ``sampler.names`` that ψ starts from instead of the
            τ prior (every entry > 0).
        seed: must be the same on every rank.
        accelerator: the Trainer's ``accelerate.Accelerator`` (for the all-reduce); ``None`` on one process.
        log_fn: called with a flat dict of scalars after each update (``trainer.log`` routes it to every
            reporting integration: TensorBoard, trackio, W&B ...).
        train_corpora: tokenized training corpora, needed only by MultiDDS-S for its fresh train batches.
        allow_inexact_resume: resume from a checkpoint without the balancing state (the sampler restarts its
            epoch and the scorer its prior, so the run no longer continues the same sequence) instead of
            refusing it.
    """

    def __init__(
        self,
        sampler: CorpusBatchSampler,
        *,
        strategy: str = "proportional",
        reward: BalancingReward | None = None,
        dev_corpora: Mapping[str, Any] | None = None,
        collate_fn: Callable[[list[dict]], dict[str, torch.Tensor]] | None = None,
        update_every: int = 1000,
        dev_batch_tokens: int = 1024,
        sub_batch_tokens: int = 4096,
        scorer_lr: float = 1e-4,
        scorer_steps: int = 200,
        scorer_prior_fit: str = "released",
        prior_temperature: float = 1.0,
        initial_probabilities: Sequence[float] | None = None,
        seed: int = 0,
        accelerator: Any = None,
        log_fn: Callable[[dict[str, float]], None] | None = None,
        train_corpora: Mapping[str, Any] | None = None,
        train_batch_tokens: int = 1024,
        allow_inexact_resume: bool = False,
    ) -> None:
        self.sampler = sampler
        self.strategy = strategy
        self.reward = reward
        self.update_every = int(update_every)
        self.dev_batch_tokens = int(dev_batch_tokens)
        self.sub_batch_tokens = int(sub_batch_tokens)
        self.seed = int(seed)
        self.accelerator = accelerator
        self.log_fn = log_fn
        self.collate_fn = collate_fn
        self.train_batch_tokens = int(train_batch_tokens)
        self.allow_inexact_resume = bool(allow_inexact_resume)
        self.update_count = 0
        #: Checkpoint folder to restore from at the start of training; when unset and the Trainer resumes,
        #: ``output_dir/checkpoint-<global_step>`` (where the Trainer itself saves) is used.
        self.resume_from: str | None = None
        self.scorer: CorpusScorer | None = None
        # Only the model's columns, selected once: select_columns builds a new Dataset (and fingerprint) per call.
        self.dev_corpora = {n: _model_columns(d) for n, d in (dev_corpora or {}).items()}
        self.train_corpora = {n: _model_columns(d) for n, d in (train_corpora or {}).items()}
        if reward is not None:
            if self.update_every < 1:
                raise ValueError(f"update_every must be >= 1, got {update_every}.")
            if collate_fn is None:
                raise ValueError("A dynamic strategy needs collate_fn to turn dev rows into model inputs.")
            _check_same_corpora(sampler.names, self.dev_corpora, "dev")
            if reward.needs_train_batches:
                _check_same_corpora(sampler.names, self.train_corpora, "train")
            if initial_probabilities is not None:
                prior = np.asarray(initial_probabilities, dtype=np.float64)
            else:
                prior = temperature_prior(sampler.sizes, prior_temperature)
            self.scorer = CorpusScorer(sampler.names, prior, lr=scorer_lr, steps=scorer_steps, prior_fit=scorer_prior_fit)
            # Until the first update, batches follow the prior itself, as in the authors' code (the fitted ψ only
            # approximates it and takes over at the first update).
            sampler.set_probabilities(self.scorer.prior)
            self._dev_lengths = {n: _target_lengths(self.dev_corpora[n]) for n in sampler.names}
            self._train_lengths = (
                {n: example_lengths(self.train_corpora[n]) for n in sampler.names} if reward.needs_train_batches else {}
            )

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        if self.reward is not None and state.max_steps > 0 and self.update_every >= state.max_steps:
            raise ValueError(
                f"update_every={self.update_every} >= max_steps={state.max_steps} (the steps this run trains): "
                f"strategy {self.strategy!r} would never re-balance. Lower update_every or train longer."
            )
        if state.global_step == 0:
            return
        folder = self.resume_from or os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        path = os.path.join(folder, STATE_FILE)
        if not os.path.isfile(path):
            if not self.allow_inexact_resume:
                raise ValueError(
                    f"Cannot resume exactly at step {state.global_step}: {path} is missing, so the corpus sampler "
                    "would restart its epoch and the scorer its prior. Resume from a complete checkpoint, or set "
                    "allow_inexact_resume=True to continue anyway."
                )
            logger.warning(
                "Resuming at step %d without %s (allow_inexact_resume): the corpus sampler restarts its epoch and the "
                "scorer its prior, so the run will not continue the exact same sequence.", state.global_step, path,
            )
            return
        self.load(path)
        if args.should_save:
            _truncate_history(os.path.join(args.output_dir, HISTORY_FILE), state.global_step)

    def on_epoch_begin(self, args, state, control, **kwargs):
        # The Trainer cannot always reach a sampler wrapped by accelerate (e.g. after skip_first_batches on
        # several processes), so the epoch is set here, from the Trainer's own count.
        self.sampler.set_epoch(math.floor(state.epoch or 0))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.reward is not None and state.global_step > 0 and state.global_step % self.update_every == 0:
            # Logging the update goes through the Trainer's on_log, which clears the flags it has served;
            # keep the step's own logging/saving/evaluation decisions intact.
            flags = (control.should_log, control.should_save, control.should_evaluate)
            self.update(model, state.global_step, args.output_dir, is_world_process_zero=state.is_world_process_zero)
            control.should_log, control.should_save, control.should_evaluate = flags

    def on_save(self, args, state, control, **kwargs):
        if args.should_save:
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            self.save(os.path.join(folder, STATE_FILE))

    # ------------------------------------------------------------------ the update
    def update(self, model: torch.nn.Module, step: int, output_dir: str | None = None, *, is_world_process_zero: bool = True) -> dict | None:
        """One balancing update: measure every corpus, update ψ, set the sampler's p. Returns the record."""
        start = time.perf_counter()
        process_index, num_processes = self._shard()
        dev_batches = self.dev_batches()
        train_batches = self._train_batches(process_index, num_processes) if self.reward.needs_train_batches else None
        seed = self.dropout_seed(process_index)
        with self._training_precision():
            shares = self.reward.compute(model, dev_batches, train_batches, process_index=process_index,
                                         num_processes=num_processes, seed=seed)
        totals = {key: self._sum_over_ranks(value) for key, value in shares.items()}
        rewards, extras = self.reward.finalize(totals)
        self.update_count += 1
        names = self.sampler.names
        record = {"step": int(step), "strategy": self.strategy, "measure": getattr(self.reward, "measure", None),
                  "rewards": dict(zip(names, map(float, rewards)))}
        try:
            probabilities = self.scorer.update(rewards)
        except NonFiniteRewardError as error:
            logger.warning("Skipping the balancing update at step %d: %s. p stays %s.", step, error,
                           dict(zip(names, self.sampler.probabilities.round(4).tolist())))
            probabilities = None
            record["skipped"] = str(error)
        if probabilities is not None:
            self.sampler.set_probabilities(probabilities)
        record["probabilities"] = dict(zip(names, self.sampler.probabilities.tolist()))
        record.update(extras)
        record["seconds"] = time.perf_counter() - start
        if is_world_process_zero and output_dir is not None:
            os.makedirs(output_dir, exist_ok=True)
            with open(os.path.join(output_dir, HISTORY_FILE), "a", encoding="utf-8") as history:
                history.write(json.dumps(record) + "\n")
        if self.log_fn is not None:
            logs = {f"balance/p_{n}": record["probabilities"][n] for n in names}
            logs.update({f"balance/reward_{n}": record["rewards"][n] for n in names})
            logs["balance/seconds"] = record["seconds"]
            self.log_fn(logs)
        return record

    def dev_batches(self) -> list[list[dict]]:
        """The collated dev batches of every corpus for the next update (seeded by the seed and the update count)."""
        return [self._token_batches(self.dev_corpora[n], self._dev_lengths[n], self.dev_batch_tokens, i, 0)
                for i, n in enumerate(self.sampler.names)]

    def _train_batches(self, process_index: int, num_processes: int) -> list:
        """Fresh train batches: one per corpus, or with a per-pair reward ``[i][j]`` for dev corpus i and train
        corpus j (only the pairs this rank computes are drawn; the others are ``None``)."""
        names = self.sampler.names

        def draw(j: int, key: int | tuple[int, int], purpose: int) -> list[dict]:
            n = names[j]
            return self._token_batches(self.train_corpora[n], self._train_lengths[n], self.train_batch_tokens, key, purpose)

        if not getattr(self.reward, "per_pair_train_batches", False):
            return [draw(j, j, 1) for j in range(len(names))]
        return [[draw(j, (i, j), 2) if j % num_processes == process_index else None for j in range(len(names))]
                for i in range(len(names))]

    def dropout_seed(self, process_index: int = 0) -> int:
        """Seed of this rank's MC-dropout masks (or gradient-cosine dropout) for the next update."""
        return int(np.random.SeedSequence([self.seed, self.update_count, process_index]).generate_state(1)[0])

    def _token_batches(self, dataset, lengths: np.ndarray, tokens: int, corpus: int | Sequence[int], purpose: int) -> list[dict]:
        rng = np.random.default_rng([self.seed, self.update_count, purpose, *np.atleast_1d(corpus).tolist()])
        chosen = draw_token_batch(lengths, tokens, rng)
        return [self.collate_fn(_rows(dataset, chunk)) for chunk in split_by_tokens(chosen, lengths, self.sub_batch_tokens)]

    def _training_precision(self):
        """The passes run in the precision the model trains in: under ``bf16``/``fp16`` the Trainer's forward is
        autocast, and measuring in float32 instead would make the K·N passes several times slower on a GPU."""
        return self.accelerator.autocast() if self.accelerator is not None else contextlib.nullcontext()

    def _shard(self) -> tuple[int, int]:
        if self.accelerator is None:
            return 0, 1
        return self.accelerator.process_index, self.accelerator.num_processes

    def _sum_over_ranks(self, value: np.ndarray) -> np.ndarray:
        if self.accelerator is None or self.accelerator.num_processes == 1:
            return np.asarray(value, dtype=np.float64)
        tensor = torch.as_tensor(np.asarray(value, dtype=np.float64), device=self.accelerator.device)
        return self.accelerator.reduce(tensor, reduction="sum").cpu().numpy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "update_count": self.update_count,
            "sampler": self.sampler.state_dict(),
            "scorer": self.scorer.state_dict() if self.scorer is not None else None,
        }

    def load_state_dict(self, state: Mapping) -> None:
        if state["strategy"] != self.strategy:
            raise ValueError(
                f"The checkpoint was trained with strategy {state['strategy']!r}, this run uses {self.strategy!r}; "
                "resume with the same strategy or start a new run."
            )
        self.update_count = int(state["update_count"])
        self.sampler.load_state_dict(state["sampler"])
        if self.scorer is not None:
            self.scorer.load_state_dict(state["scorer"])

    def save(self, path: str) -> None:
        write_json_atomically(path, self.state_dict())

    def load(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            self.load_state_dict(json.load(f))


def _truncate_history(path: str, last_step: int) -> None:
    """Drop records after the resumed step: the resumed run writes them again. A line torn by the kill that
    interrupted the run (it can only be a record after the checkpoint) is dropped too."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                logger.warning("%s line %d is torn (the run was killed while writing it); dropping it.", path, number)
                continue
            if record is not None and record["step"] <= last_step:
                kept.append(line if line.endswith("\n") else line + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(kept)


def _model_columns(dataset):
    columns = [c for c in ("input_ids", "attention_mask", "labels") if c in dataset.column_names]
    return dataset.select_columns(columns) if len(columns) < len(dataset.column_names) else dataset


def _rows(dataset, indices: Sequence[int]) -> list[dict]:
    batch = dataset[np.asarray(indices).tolist()]
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def _target_lengths(dataset) -> np.ndarray:
    return example_lengths(dataset, columns=("labels",))


def _check_same_corpora(names: Sequence[str], corpora: Mapping[str, Any], kind: str) -> None:
    missing = [n for n in names if n not in corpora]
    extra = [n for n in corpora if n not in names]
    if missing:
        raise ValueError(f"Training corpus {missing[0]!r} has no {kind} set; give one {kind} set per training corpus.")
    if extra:
        raise ValueError(f"{kind.capitalize()} set {extra[0]!r} has no training corpus of the same name.")
    for n in names:
        if len(corpora[n]) == 0:
            raise ValueError(f"The {kind} set of corpus {n!r} is empty.")
