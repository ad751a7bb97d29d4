"""MultiUAT's reward: how uncertain the model is about each corpus's dev set, under Monte Carlo dropout.

:class:`UncertaintyReward` runs K Monte Carlo dropout passes per corpus, teacher-forced on the reference
prefix, with no autograd, computing the output layer only at real target positions
(:func:`~uat_hf.rewards.target_logits`). What is different from the authors' code: no graph is built,
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
from typing import Any

import numpy as np
import torch
from torch import nn

from .measures import eos_positions, needs_entropy, needs_eos, position_statistics, sentence_uncertainty
from .rewards import BalancingReward, dropout_active, model_device, scored_mask, sharding, target_logits

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
    positions :func:`~uat_hf.rewards.scored_mask` keeps (a leading language code of ``language_code_ids`` is
    not scored)."""
    labels = batch["labels"]
    mask = scored_mask(labels, language_code_ids)
    flat_max, flat_entropy = position_statistics(target_logits(model, batch, mask))
    max_prob = torch.ones(labels.shape, dtype=flat_max.dtype, device=labels.device)
    max_prob[mask] = flat_max
    entropy = torch.zeros(labels.shape, dtype=flat_max.dtype, device=labels.device)
    if needs_entropy(measure):
        entropy[mask] = flat_entropy
    eos_index = eos_positions(labels, eos_token_id, mask) if needs_eos(measure) else None
    return sentence_uncertainty(measure, max_prob, entropy, mask, eos_index)


def _repeat(batch: Mapping[str, torch.Tensor], copies: int) -> dict[str, torch.Tensor]:
    return {k: v.repeat(copies, *([1] * (v.dim() - 1))) for k, v in batch.items()}


class UncertaintyReward(BalancingReward):
    """R(n) = mean over K MC-dropout passes of the dev batch's mean sentence uncertainty (MultiUAT).

    Args:
        measure: one of :data:`uat_hf.measures.MEASURES` (or a released-code variant).
        mc_samples: K.
        eos_token_id: needed by ``enteos``.
        language_code_ids: the tokenizer's language-code token ids (NLLB, M2M100, mBART-50; see
            :func:`uat_hf.language_codes.language_code_ids`): a code opening a row's labels is not scored
            (:func:`~uat_hf.rewards.scored_mask`). Empty (default): every real label position is scored.
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
            (default): ``padded`` when the model is sharded (:func:`~uat_hf.rewards.sharding`), else ``split``.
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
    ) -> None:
        if mc_samples < 1:
            raise ValueError(f"mc_samples (K) must be >= 1, got {mc_samples}.")
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

    def check_model(self, model: nn.Module, accelerator: Any = None) -> None:
        """MC dropout on a model without dropout measures nothing: refuse before training starts. (Sharding is
        fine: the schedule adapts to it in :meth:`compute`.)"""
        super().check_model(model, accelerator)
        if not dropout_rates(model):
            config = getattr(model, "config", None)
            fields = {k: v for k, v in (config.to_dict().items() if config is not None else ()) if "dropout" in k}
            checked = f" (config: {', '.join(f'{k}={v}' for k, v in fields.items())})" if fields else ""
            raise ValueError(
                "strategy 'multiuat' measures uncertainty with Monte Carlo dropout, but every dropout rate of the "
                f"model is 0{checked}. Set a dropout rate (e.g. config.dropout=0.1) or choose a static strategy."
            )

    def passes_for_rank(self, num_corpora: int, process_index: int, num_processes: int) -> np.ndarray:
        """How many of each corpus's K passes this rank runs (work item n·K + k goes to rank item mod P)."""
        items = np.arange(num_corpora * self.mc_samples)
        mine = items[items % num_processes == process_index]
        return np.bincount(mine // self.mc_samples, minlength=num_corpora)

    def forward_plan(
        self, dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]], process_index: int, num_processes: int,
        *, replicate: bool, padded: bool,
    ) -> tuple[np.ndarray, int]:
        """(passes of each corpus this rank runs, discarded forwards it adds after them).

        Depends only on the dev batches' shapes, which are the same on every rank, so each rank computes every
        rank's forward count locally; with ``padded`` it adds the difference to the busiest rank's.
        """
        def forwards(rank: int) -> int:
            counts = self.passes_for_rank(len(dev_batches), rank, num_processes)
            return sum(len(self._chunks(batch, int(passes), replicate))
                       for batches, passes in zip(dev_batches, counts) if passes for batch in batches)

        counts = self.passes_for_rank(len(dev_batches), process_index, num_processes)
        if not padded or num_processes == 1:
            return counts, 0
        return counts, max(forwards(rank) for rank in range(num_processes)) - forwards(process_index)

    def compute(self, model, dev_batches, train_batches=None, *, process_index=0, num_processes=1, seed=0):
        device = model_device(model)
        replicate = self.mode == "replicate" or (self.mode == "auto" and device.type != "cpu")
        padded = self.schedule == "padded" or (self.schedule == "auto" and sharding(model) is not None)
        counts, extra = self.forward_plan(dev_batches, process_index, num_processes, replicate=replicate,
                                          padded=padded)
        share = np.zeros(len(dev_batches), dtype=np.float64)
        with mc_dropout(model, seed):
            for corpus, (batches, passes) in enumerate(zip(dev_batches, counts)):
                if passes == 0:
                    continue
                batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
                sentences = sum(int(b["labels"].shape[0]) for b in batches)
                per_pass = torch.zeros(int(passes), dtype=torch.float64, device=device)
                for batch in batches:
                    per_pass += self._pass_sums(model, batch, int(passes), replicate)
                share[corpus] = float((per_pass / sentences).sum())
            if extra:  # after the real passes, so that their dropout masks are those of the split schedule
                smallest = min((b for batches in dev_batches for b in batches), key=lambda b: b["labels"].numel())
                dummy = {k: v[:1].to(device) for k, v in smallest.items()}
                for _ in range(extra):
                    self._sentences(model, dummy)
        return {"rewards": share}

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
        """Sum of sentence uncertainties of ``batch`` for each of ``passes`` independent dropout passes."""
        if not replicate:
            return torch.stack([
                self._sentences(model, batch).double().sum()
                for _ in range(passes)
            ])
        rows = batch["labels"].shape[0]
        sums = []
        for copies in self._chunks(batch, passes, replicate):
            values = self._sentences(model, _repeat(batch, copies))
            sums.append(values.double().view(copies, rows).sum(dim=1))
        return torch.cat(sums)

    def finalize(self, totals):
        return np.asarray(totals["rewards"], dtype=np.float64) / self.mc_samples, {}
