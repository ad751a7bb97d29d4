"""MultiUAT's reward: how uncertain the model is about each corpus's dev set, under Monte Carlo dropout.

:class:`UncertaintyReward` runs K Monte Carlo dropout passes per corpus, teacher-forced on the reference
prefix, with no autograd, computing the output layer only at real target positions
(:func:`~uat_hf.models.targets.target_logits`). What is different from the authors' code: no graph is built,
padding is cut by sorting the dev sentences by length into sub-batches, the K·N passes are split across
ranks, and the dropout masks come from a forked, seeded RNG so that measuring never perturbs the training
RNG stream (and a resumed run measures the same).

Every dropout module of the model is sampled, a LoRA adapter's ``lora_dropout`` included (peft keeps it as
an ``nn.Dropout`` inside the adapted layer). On a model sharded across ranks (FSDP, DeepSpeed ZeRO-3) each
forward pass is a collective, so every rank must run as many forwards as the busiest one: the ``padded``
schedule adds discarded forwards after the real ones (see :meth:`UncertaintyReward.forward_plan`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from ...models.modes import dropout_active, model_device, sharding
from ...models.targets import scored_mask
from ..rewards import BalancingReward, target_statistics
from .measures import eos_positions, needs_entropy, needs_eos, sentence_uncertainty

__all__ = ["SCHEDULES", "UncertaintyReward", "batch_sentence_uncertainty", "dropout_rates", "mc_dropout"]

#: How the K·N passes are laid out over ranks (see :class:`UncertaintyReward`).
SCHEDULES = ("auto", "split", "padded")


@contextlib.contextmanager
def mc_dropout(model: nn.Module, seed: int) -> Iterator[None]:
    """:func:`dropout_active` without autograd: Monte Carlo dropout passes build no graph.

    ``inference_mode`` where the model is whole; ``no_grad`` on a sharded one, whose FSDP/ZeRO-3 wrappers
    gather parameters into buffers that later training passes write in place (inference tensors refuse that).
    """
    grad_off = torch.no_grad() if sharding(model) else torch.inference_mode()
    with dropout_active(model, seed), grad_off:
        yield


def dropout_rates(model: nn.Module) -> dict[str, float]:
    """Every non-zero dropout rate the model would apply in training mode (config fields and modules)."""
    rates: dict[str, float] = {}
    config = getattr(model, "config", None)
    if config is not None:
        for key, value in config.to_dict().items():
            if "dropout" in key and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                rates[f"config.{key}"] = float(value)
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            rates[name] = float(module.p)
    return rates


def batch_sentence_uncertainty(
    model: nn.Module, batch: Mapping[str, torch.Tensor], measure: str, eos_token_id: int | None,
    language_code_ids: Collection[int] = (),
) -> torch.Tensor:
    """Per-sentence uncertainty [B] of one forward pass (dropout as currently set on the model), over the
    positions :func:`~uat_hf.models.targets.scored_mask` keeps (a leading language code of ``language_code_ids`` is
    not scored)."""
    targets = _Targets.of(batch["labels"], measure, eos_token_id, language_code_ids)
    return _uncertainty(model, batch, measure, targets, validate=True)


class _Targets(NamedTuple):
    """What a dev batch's labels fix for all its K passes, computed once: the scored positions, and for
    ``enteos`` the one position per row whose entropy it reads (the output layer runs there only)."""

    mask: torch.Tensor
    eos_mask: torch.Tensor | None

    @classmethod
    def of(cls, labels: torch.Tensor, measure: str, eos_token_id: int | None,
           language_code_ids: Collection[int]) -> _Targets:
        mask = scored_mask(labels, language_code_ids)
        if not needs_eos(measure):
            return cls(mask, None)
        eos_mask = torch.zeros_like(mask)
        eos_mask[torch.arange(labels.shape[0], device=labels.device), eos_positions(labels, eos_token_id, mask)] = True
        return cls(mask, eos_mask)

    def repeat(self, copies: int) -> _Targets:
        return _Targets(*(None if t is None else t.repeat(copies, 1) for t in self))


def _uncertainty(model: nn.Module, batch: Mapping[str, torch.Tensor], measure: str, targets: _Targets, *,
                 validate: bool) -> torch.Tensor:
    """One pass's per-sentence uncertainty [B]; ``validate``: check the rows (host syncs), once per batch.

    ``enteos`` needs the entropy at each row's EOS and nothing else, so the output layer and the softmax run
    at B positions instead of every target position (:func:`~uat_hf.strategies.multiuat.measures.eos_positions`
    already refuses a
    row without a real position, so nothing is left to validate).
    """
    if targets.eos_mask is not None:
        return target_statistics(model, batch, targets.eos_mask)[1]  # one position per row, in row order
    flat_max, flat_entropy = target_statistics(model, batch, targets.mask)
    shape, device = targets.mask.shape, flat_max.device
    max_prob = torch.ones(shape, dtype=flat_max.dtype, device=device)
    max_prob[targets.mask] = flat_max
    entropy = torch.zeros(shape, dtype=flat_max.dtype, device=device)
    if needs_entropy(measure):
        entropy[targets.mask] = flat_entropy
    return sentence_uncertainty(measure, max_prob, entropy, targets.mask, validate=validate)


def _repeat(batch: Mapping[str, torch.Tensor], copies: int) -> dict[str, torch.Tensor]:
    return {k: v.repeat(copies, *([1] * (v.dim() - 1))) for k, v in batch.items()}


class UncertaintyReward(BalancingReward):
    """R(n) = mean over K MC-dropout passes of the dev batch's mean sentence uncertainty (MultiUAT).

    Args:
        measure: one of :data:`uat_hf.strategies.multiuat.measures.MEASURES` (or a released-code variant).
        mc_samples: K.
        eos_token_id: needed by ``enteos``.
        language_code_ids: the tokenizer's language-code token ids (NLLB, M2M100, mBART-50; see
            :func:`uat_hf.data.language_codes.language_code_ids`): a code opening a row's labels is not scored
            (:func:`~uat_hf.models.targets.scored_mask`). Empty (default): every real label position is scored.
        mode: ``loop`` runs K forward passes; ``replicate`` repeats each sub-batch along the batch axis (each
            row gets its own dropout mask, so this is K independent passes in one), in chunks of at most
            ``replicate_tokens`` padded tokens; ``auto`` replicates on GPU and loops on CPU, where separate
            passes measured faster (30 × 1: 5.1 s vs 1 × 30: 8.2 s, 1000 tokens, 7.7M-parameter Marian).
        schedule: how the K·N passes (work item n·K + k: pass k of corpus n) are shared among P ranks.
            ``split``: item i runs on rank i mod P, nothing else; the fastest, but ranks run different numbers
            of forwards when N·K is not a multiple of P (or corpora have different numbers of sub-batches),
            which is fine for DDP and hangs a sharded model. ``padded``: the same real passes, then each rank
            runs discarded forwards (one dev sentence each) until it has run as many forwards as the busiest
            rank; ranks can compute one another's plan, so this needs no communication. The real passes and
            their dropout masks are those of ``split``, so the rewards are bit-identical to it. ``auto``
            (default): ``padded`` when the model is sharded (:func:`~uat_hf.models.modes.sharding`), else
            ``split``.
        tolerance: adaptive K (``None``, the default: always K passes, as the paper). The passes run in blocks of
            ``min_samples``; after each block, with n passes done per corpus, R_n is the mean of corpus n's
            per-pass rewards and SE_n their sample standard deviation over sqrt(n). Corpus n is *known* once
            ``n >= min_samples`` and ``SE_n <= tolerance * (max_m R_m - min_m R_m)``: its reward is known to a
            fraction of the spread the scorer reacts to. The next block runs only the corpora not known yet (a
            known corpus rejoins if the spread shrinks below its error), so with many corpora the passes go where
            the noise is; the measuring stops when every corpus is known, never after more than K passes. The
            statistics are summed over the ranks before the rule is read, so every rank runs the same blocks.
        min_samples: the fewest passes adaptive K runs (and its block size); at least 2, for a standard error.
    """

    def __init__(
        self,
        measure: str,
        mc_samples: int = 30,
        *,
        eos_token_id: int | None = None,
        mode: str = "auto",
        replicate_tokens: int = 65536,
        schedule: str = "auto",
        language_code_ids: Collection[int] = (),
        tolerance: float | None = None,
        min_samples: int = 5,
    ) -> None:
        if mc_samples < 1:
            raise ValueError(f"mc_samples (K) must be >= 1, got {mc_samples}.")
        if tolerance is not None and not (tolerance > 0 and 2 <= min_samples <= mc_samples):
            raise ValueError(f"Adaptive K needs mc_tolerance > 0 and 2 <= mc_min_samples <= mc_samples, got "
                             f"mc_tolerance={tolerance}, mc_min_samples={min_samples}, mc_samples={mc_samples}.")
        if needs_eos(measure) and eos_token_id is None:
            raise ValueError(
                f"Measure {measure!r} needs the EOS token id, but the model/tokenizer defines none "
                "(model.config.eos_token_id and tokenizer.eos_token_id are both None); set one or choose another "
                "measure."
            )
        if mode not in ("auto", "loop", "replicate"):
            raise ValueError(f"mode must be 'auto', 'loop' or 'replicate', got {mode!r}.")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}.")
        self.measure = measure
        self.mc_samples = int(mc_samples)
        self.eos_token_id = eos_token_id
        self.mode = mode
        self.replicate_tokens = int(replicate_tokens)
        self.schedule = schedule
        self.language_code_ids = frozenset(int(i) for i in language_code_ids)
        self.tolerance = tolerance
        self.min_samples = int(min_samples)

    def check_model(self, model: nn.Module, accelerator: Any = None) -> None:
        """MC dropout on a model without dropout measures nothing: refuse before training starts. (Sharding is
        fine: the schedule adapts to it in :meth:`compute`.)"""
        super().check_model(model, accelerator)
        if not dropout_rates(model):
            config = getattr(model, "config", None)
            fields = {k: v for k, v in (config.to_dict().items() if config is not None else ()) if "dropout" in k}
            checked = f" (config: {', '.join(f'{k}={v}' for k, v in fields.items())})" if fields else ""
            rate = next((k for k in ("dropout", "attention_dropout", "hidden_dropout") if k in fields), None)
            rate = rate or next(iter(fields), None)
            how = (f"Set a dropout rate of its config before building it ({rate}=0.1; uat-train: model_overrides: "
                   f"{{{rate}: 0.1}}), train a LoRA adapter with lora_dropout > 0," if rate else
                   "Its config has no dropout field: train a LoRA adapter with lora_dropout > 0, use a model with "
                   "dropout,")
            raise ValueError(
                "strategy 'multiuat' measures uncertainty with Monte Carlo dropout, but every dropout rate of the "
                f"model is 0{checked}. {how} or choose a static strategy."
            )

    def passes_for_rank(self, num_corpora: int, process_index: int, num_processes: int,
                        passes: int | Sequence[int] | None = None) -> np.ndarray:
        """How many of each corpus's ``passes`` (default K; one count for all corpora or one per corpus) this rank
        runs: the passes are numbered corpus by corpus, and pass number i goes to rank i mod P."""
        passes = np.broadcast_to(np.asarray(self.mc_samples if passes is None else passes, dtype=np.int64),
                                 (num_corpora,))
        corpus_of_pass = np.repeat(np.arange(num_corpora), passes)
        mine = np.arange(len(corpus_of_pass)) % num_processes == process_index
        return np.bincount(corpus_of_pass[mine], minlength=num_corpora)

    def forward_plan(
        self, dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]], process_index: int, num_processes: int,
        *, replicate: bool, padded: bool, passes: int | Sequence[int] | None = None,
    ) -> tuple[np.ndarray, int]:
        """(passes of each corpus this rank runs, discarded forwards it adds after them).

        Depends only on the dev batches' shapes, which are the same on every rank, so each rank computes every
        rank's forward count locally; with ``padded`` it adds the difference to the busiest rank's.
        """
        def forwards(rank: int) -> int:
            counts = self.passes_for_rank(len(dev_batches), rank, num_processes, passes)
            return sum(len(self._chunks(batch, int(passes), replicate))
                       for batches, passes in zip(dev_batches, counts) if passes for batch in batches)

        counts = self.passes_for_rank(len(dev_batches), process_index, num_processes, passes)
        if not padded or num_processes == 1:
            return counts, 0
        return counts, max(forwards(rank) for rank in range(num_processes)) - forwards(process_index)

    def blocks(self) -> list[int]:
        """Passes per corpus of each measuring block: ``[K]``, or with adaptive K blocks of ``min_samples``."""
        if self.tolerance is None:
            return [self.mc_samples]
        full, rest = divmod(self.mc_samples, self.min_samples)
        return [self.min_samples] * full + ([rest] if rest else [])

    def rewards_over_ranks(self, model, dev_batches, train_batches=None, *, process_index, num_processes, seed,
                           reduce):
        """Adaptive K: blocks of passes over the corpora not :meth:`known` yet (block b's masks seeded by
        ``seed(b)``), until every corpus is known or the K passes are spent."""
        totals: dict[str, np.ndarray] = {}
        running = np.ones(len(dev_batches), dtype=bool)
        for block, passes in enumerate(self.blocks()):
            shares = self.compute(model, dev_batches, process_index=process_index, num_processes=num_processes,
                                  seed=seed(block), passes=passes * running)
            totals = {key: totals.get(key, 0) + value for key, value in reduce(shares).items()}
            running = ~self.known(totals)
            if not running.any():
                break
        return self.finalize(totals)

    def known(self, totals: Mapping[str, np.ndarray]) -> np.ndarray:
        """Which corpora's rewards adaptive K knows well enough (see the class docstring), from rank-summed
        shares; none without adaptive K."""
        n = np.asarray(totals["passes"], dtype=np.float64)
        if self.tolerance is None:
            return np.zeros(len(n), dtype=bool)
        mean = totals["rewards"] / n
        variance = np.maximum(totals["squares"] / n - mean * mean, 0.0) * n / np.maximum(n - 1, 1)
        return (n >= self.min_samples) & (np.sqrt(variance / n) <= self.tolerance * (mean.max() - mean.min()))

    def compute(self, model, dev_batches, train_batches=None, *, process_index=0, num_processes=1, seed=0,
                passes: int | Sequence[int] | None = None):
        """This rank's shares of ``passes`` (default K) passes per corpus: the sums of the per-pass rewards
        (``rewards``) and of their squares (``squares``, for adaptive K's standard errors), and the passes run
        (``passes``). The per-pass sums stay on the device until every corpus is measured: one host sync."""
        device = model_device(model)
        replicate = self.mode == "replicate" or (self.mode == "auto" and device.type != "cpu")
        padded = self.schedule == "padded" or (self.schedule == "auto" and sharding(model) is not None)
        counts, extra = self.forward_plan(dev_batches, process_index, num_processes, replicate=replicate,
                                          padded=padded, passes=passes)
        sums = torch.zeros(len(dev_batches), 2, dtype=torch.float64, device=device)
        with mc_dropout(model, seed):
            for corpus, (batches, count) in enumerate(zip(dev_batches, counts)):
                if count == 0:
                    continue
                batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
                sentences = sum(int(b["labels"].shape[0]) for b in batches)
                per_pass = torch.zeros(int(count), dtype=torch.float64, device=device)
                for batch in batches:
                    per_pass += self._pass_sums(model, batch, int(count), replicate)
                per_pass = per_pass / sentences
                sums[corpus, 0] = per_pass.sum()
                sums[corpus, 1] = (per_pass * per_pass).sum()
            if extra:  # after the real passes, so that their dropout masks are those of the split schedule
                smallest = min((b for batches in dev_batches for b in batches), key=lambda b: b["labels"].numel())
                dummy = {k: v[:1].to(device) for k, v in smallest.items()}
                for _ in range(extra):
                    self._sentences(model, dummy)
        sums = sums.cpu().numpy()
        return {"rewards": sums[:, 0], "squares": sums[:, 1], "passes": counts.astype(np.float64)}

    def _chunks(self, batch: Mapping[str, torch.Tensor], passes: int, replicate: bool) -> list[int]:
        """How many passes each forward over ``batch`` runs: one each in a loop, or replicated in chunks."""
        if not replicate:
            return [1] * passes
        rows, width = batch["labels"].shape[0], max(batch["input_ids"].shape[1], batch["labels"].shape[1])
        per_chunk = max(1, self.replicate_tokens // max(rows * width, 1))
        return [min(per_chunk, passes - start) for start in range(0, passes, per_chunk)]

    def _sentences(self, model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return batch_sentence_uncertainty(model, batch, self.measure, self.eos_token_id, self.language_code_ids)

    def _pass_sums(self, model, batch, passes: int, replicate: bool) -> torch.Tensor:
        """Sum of sentence uncertainties of ``batch`` for each of ``passes`` independent dropout passes. What the
        labels fix (scored positions, EOS) is computed and checked once, so the passes wait for no host sync."""
        targets = _Targets.of(batch["labels"], self.measure, self.eos_token_id, self.language_code_ids)
        if not replicate:
            return torch.stack([
                _uncertainty(model, batch, self.measure, targets, validate=k == 0).double().sum()
                for k in range(passes)
            ])
        rows = batch["labels"].shape[0]
        sums = []
        for chunk, copies in enumerate(self._chunks(batch, passes, replicate)):
            values = _uncertainty(model, _repeat(batch, copies), self.measure, targets.repeat(copies),
                                  validate=chunk == 0)
            sums.append(values.double().view(copies, rows).sum(dim=1))
        return torch.cat(sums)

    def finalize(self, totals):
        passes = np.asarray(totals["passes"], dtype=np.float64)
        extras = {} if self.tolerance is None else {"mc_samples_used": float(passes.mean()),
                                                     "mc_samples_per_corpus": passes.astype(int).tolist()}
        return np.asarray(totals["rewards"], dtype=np.float64) / passes, extras
