"""MultiUAT's reward: how uncertain the model is about each corpus's dev set, under Monte Carlo dropout.

:class:`UncertaintyReward` runs K Monte Carlo dropout passes per corpus, teacher-forced on the reference
prefix, with no autograd, computing the output layer only at real target positions
(:func:`~uat_hf.rewards.target_logits`). What is different from the authors' code: no graph is built,
padding is cut by sorting the dev sentences by length into sub-batches, the K·N passes are split across
ranks, and the dropout masks come from a forked, seeded RNG so that measuring never perturbs the training
RNG stream (and a resumed run measures the same).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import numpy as np
import torch
from torch import nn

from .measures import IGNORE_INDEX, eos_positions, needs_entropy, needs_eos, position_statistics, sentence_uncertainty
from .rewards import BalancingReward, dropout_active, model_device, target_logits

__all__ = ["UncertaintyReward", "batch_sentence_uncertainty", "dropout_rates", "mc_dropout"]


@contextlib.contextmanager
def mc_dropout(model: nn.Module, seed: int) -> Iterator[None]:
    """:func:`dropout_active` without autograd: Monte Carlo dropout passes build no graph."""
    with dropout_active(model, seed), torch.inference_mode():
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
    model: nn.Module, batch: Mapping[str, torch.Tensor], measure: str, eos_token_id: int | None
) -> torch.Tensor:
    """Per-sentence uncertainty [B] of one forward pass (dropout as currently set on the model)."""
    labels = batch["labels"]
    mask = labels != IGNORE_INDEX
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
        mode: ``loop`` runs K forward passes; ``replicate`` repeats each sub-batch along the batch axis (each
            row gets its own dropout mask, so this is K independent passes in one), in chunks of at most
            ``replicate_tokens`` padded tokens; ``auto`` replicates on GPU and loops on CPU, where separate
            passes measured faster (30 × 1: 5.1 s vs 1 × 30: 8.2 s, 1000 tokens, 7.7M-parameter Marian).
    """

    def __init__(
        self,
        measure: str,
        mc_samples: int = 30,
        *,
        eos_token_id: int | None = None,
        mode: str = "auto",
        replicate_tokens: int = 65536,
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
        self.measure = measure
        self.mc_samples = int(mc_samples)
        self.eos_token_id = eos_token_id
        self.mode = mode
        self.replicate_tokens = int(replicate_tokens)

    def check_model(self, model: nn.Module) -> None:
        """MC dropout on a model without dropout measures nothing: refuse before training starts."""
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

    def compute(self, model, dev_batches, train_batches=None, *, process_index=0, num_processes=1, seed=0):
        device = model_device(model)
        counts = self.passes_for_rank(len(dev_batches), process_index, num_processes)
        replicate = self.mode == "replicate" or (self.mode == "auto" and device.type != "cpu")
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
        return {"rewards": share}

    def _pass_sums(self, model, batch, passes: int, replicate: bool) -> torch.Tensor:
        """Sum of sentence uncertainties of ``batch`` for each of ``passes`` independent dropout passes."""
        rows, width = batch["labels"].shape[0], max(batch["input_ids"].shape[1], batch["labels"].shape[1])
        if not replicate:
            return torch.stack([
                batch_sentence_uncertainty(model, batch, self.measure, self.eos_token_id).double().sum()
                for _ in range(passes)
            ])
        copies_per_chunk = max(1, self.replicate_tokens // max(rows * width, 1))
        sums = []
        for start in range(0, passes, copies_per_chunk):
            copies = min(copies_per_chunk, passes - start)
            values = batch_sentence_uncertainty(model, _repeat(batch, copies), self.measure, self.eos_token_id)
            sums.append(values.double().view(copies, rows).sum(dim=1))
        return torch.cat(sums)

    def finalize(self, totals):
        return np.asarray(totals["rewards"], dtype=np.float64) / self.mc_samples, {}
