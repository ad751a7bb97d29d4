"""Corpus health: does a corpus's training data teach what its clean dev set asks?

The paper's premise is a small set of trusted dev data per corpus. When a corpus's training pairs are broken
(misaligned lines, another language, machine-translated noise), the model cannot fit them the way it fits
their clean dev set: its loss on the corpus's own *training* pairs stays far above its loss on the dev pairs,
while a healthy corpus shows a ratio near 1 (below 1 once the model starts to memorise). The ratio compares
each corpus with itself, so a corpus that is merely hard (short dictionary entries, a distant language) is
not flagged: its training and dev losses are high together.

Uncertainty sampling makes this matter: a model is most uncertain where it learned garbage, so MultiUAT
raises the share of exactly such a corpus. The check warns for every strategy, a static prior included.
Both samples are fixed for the whole run (drawn once from ``seed``), so consecutive checks differ only by
what the model learned, and the measurement uses no random state of the run: training is unchanged by it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..sampling.packing import draw_token_batch, example_lengths, split_by_tokens
from ..strategies.rewards import model_device, restored_modes, scored_mask, target_logits
from ..utils.columns import MODEL_COLUMNS

__all__ = ["CorpusHealth", "HealthSample", "SampleLoss", "corpus_loss", "draw_health_sample", "suspect_corpora"]

#: A corpus is suspect when its training pairs' loss exceeds its dev pairs' by at least this many standard
#: errors (sentences are the samples: the check must see more than the noise of ~50 sentences) ...
SUSPECT_Z = 3.0
#: ... and its training/dev loss ratio is at least this much above the median ratio of the corpora (a run-wide
#: gap between training and dev data moves every corpus alike and flags none).
SUSPECT_MARGIN = 0.05


@dataclass(frozen=True)
class SampleLoss:
    """The summed token cross-entropy and the scored tokens of each sentence of one sample."""

    sums: np.ndarray
    tokens: np.ndarray

    @property
    def mean(self) -> float:
        """Mean token loss (the sentences weighted by their tokens)."""
        return float(self.sums.sum() / max(self.tokens.sum(), 1))

    @property
    def standard_error(self) -> float:
        """Standard error of :attr:`mean` over sentences (the ratio estimator's linearisation)."""
        n = len(self.sums)
        if n < 2:
            return float("inf")
        residuals = self.sums - self.mean * self.tokens
        return float(np.sqrt(n / (n - 1) * np.sum(residuals**2)) / self.tokens.sum())


def suspect_corpora(ratios: Mapping[str, float], z: Mapping[str, float]) -> list[str]:
    """The corpora whose training loss exceeds their dev loss by :data:`SUSPECT_Z` standard errors and whose
    ratio is :data:`SUSPECT_MARGIN` above the median ratio."""
    median = float(np.median(list(ratios.values())))
    return [n for n, r in ratios.items() if z[n] >= SUSPECT_Z and r - median >= SUSPECT_MARGIN]


@dataclass
class CorpusHealth:
    """One check: every corpus's loss on a fixed sample of its training pairs and of its dev pairs."""

    step: int
    names: list[str]
    train: list[SampleLoss]
    dev: list[SampleLoss]

    @property
    def train_loss(self) -> list[float]:
        return [s.mean for s in self.train]

    @property
    def dev_loss(self) -> list[float]:
        return [s.mean for s in self.dev]

    @property
    def ratio(self) -> list[float]:
        return [t.mean / max(d.mean, 1e-8) for t, d in zip(self.train, self.dev)]

    @property
    def z(self) -> list[float]:
        """How many standard errors each corpus's training loss is above its dev loss."""
        return [(t.mean - d.mean) / max(np.hypot(t.standard_error, d.standard_error), 1e-8)
                for t, d in zip(self.train, self.dev)]

    def suspects(self) -> list[str]:
        """Corpora whose training pairs look broken at this check."""
        return suspect_corpora(dict(zip(self.names, self.ratio)), dict(zip(self.names, self.z)))

    def describe(self, name: str) -> str:
        """What the numbers say of corpus ``name``, and what to check."""
        i = self.names.index(name)
        others = [r for n, r in zip(self.names, self.ratio) if n != name]
        span = f"{min(others):.2f}-{max(others):.2f}" if others else "none"
        return (f"Corpus {name!r} looks broken: at step {self.step} the model's loss on its training pairs is "
                f"{self.train_loss[i]:.2f}, {self.ratio[i]:.2f}x its loss on its clean dev pairs "
                f"({self.dev_loss[i]:.2f}; {self.z[i]:.1f} standard errors above); the other corpora's ratios "
                f"are {span}. Its training pairs may be misaligned (source and target lines out of step), in "
                "another language, or noise: check a few of them, fix or drop the corpus, or give it a small fixed "
                "share (strategy 'fixed').")

    def as_dict(self) -> dict:
        return {"step": self.step, "suspects": self.suspects(),
                "corpora": {n: {"train_loss": round(t, 4), "dev_loss": round(d, 4), "ratio": round(r, 4),
                                "z": round(z, 2)}
                            for n, t, d, r, z in zip(self.names, self.train_loss, self.dev_loss, self.ratio, self.z)}}


@dataclass
class HealthSample:
    """The collated batches of one corpus's fixed training sample and dev sample."""

    train: list[dict]
    dev: list[dict]


def draw_health_sample(train: object, dev: object, collate_fn: Callable[[list[dict]], dict], *, tokens: int,
                       sub_batch_tokens: int, seed: int) -> HealthSample:
    """``tokens`` worth of random training and dev examples of one corpus, collated into sub-batches."""
    batches = []
    for purpose, dataset in enumerate((train, dev)):
        lengths = example_lengths(dataset)
        chosen = draw_token_batch(lengths, tokens, np.random.default_rng([seed, purpose]))
        columns = [c for c in MODEL_COLUMNS if c in dataset.column_names]
        batches.append([collate_fn(dataset.select_columns(columns).select(chunk.tolist()).to_list())
                        for chunk in split_by_tokens(chosen, lengths, sub_batch_tokens)])
    return HealthSample(*batches)


def corpus_loss(model: nn.Module, batches: Sequence[Mapping[str, torch.Tensor]],
                language_code_ids: Collection[int] = ()) -> SampleLoss:
    """Each sentence's summed token cross-entropy over ``batches``, teacher-forced, in eval mode; language-code
    positions (which a multilingual tokenizer puts in the labels and the decoder is forced to) are not scored."""
    sums, tokens = [], []
    device = model_device(model)
    with restored_modes(model), torch.no_grad():
        model.eval()
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            mask = scored_mask(batch["labels"], language_code_ids)
            logits = target_logits(model, batch, mask)
            losses = F.cross_entropy(logits.float(), batch["labels"][mask], reduction="none")
            rows = mask.nonzero()[:, 0]
            size = mask.shape[0]
            sums.append(torch.zeros(size, device=device).index_add_(0, rows, losses).cpu().numpy())
            tokens.append(mask.sum(dim=1).cpu().numpy())
    return SampleLoss(np.concatenate(sums).astype(np.float64), np.concatenate(tokens).astype(np.float64))
