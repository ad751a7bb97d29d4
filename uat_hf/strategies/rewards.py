"""What every balancing reward shares: the interface, and how it runs the model.

A reward is computed in *shares*: each rank does its part of the work and returns partial sums; the
callback sums them over ranks (one all-reduce) and calls :meth:`BalancingReward.finalize`, which is the
same on every rank. On one process the share is the whole.

How a reward reads the model (the scored label positions, the logits there, dropout from a private seeded RNG
with every module's mode restored) is in :mod:`uat_hf.models.targets` and :mod:`uat_hf.models.modes`, which the
corpus-health checks and the evaluation share; :func:`target_statistics` is MultiUAT's reading of those logits,
two numbers per position. The rewards themselves:
:class:`~uat_hf.strategies.multiuat.uncertainty.UncertaintyReward` (MultiUAT) and
:class:`~uat_hf.strategies.multidds_s.gradient_cosine.GradientCosineReward` (MultiDDS-S).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..models.targets import OutputLayer, require_supported_model, target_features
from .multiuat.measures import position_statistics

__all__ = ["BalancingReward", "target_statistics"]

#: Logits :func:`target_statistics` lets live at once (float32: 64 MiB, and log_softmax's few temporaries of it).
STATISTICS_ELEMENTS = 1 << 24


class BalancingReward:
    """Interface of a reward: per-rank partial sums, then one finishing step identical on every rank."""

    #: Whether the callback draws fresh train batches for :meth:`compute`, and their target tokens per corpus.
    needs_train_batches: bool = False
    train_batch_tokens: int = 1024

    def compute(
        self,
        model: nn.Module,
        dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]],
        train_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]] | None = None,
        *,
        process_index: int = 0,
        num_processes: int = 1,
        seed: int = 0,
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def rewards_over_ranks(
        self,
        model: nn.Module,
        dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]],
        train_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]] | None = None,
        *,
        process_index: int,
        num_processes: int,
        seed: Callable[[int], int],
        reduce: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
    ) -> tuple[np.ndarray, dict]:
        """The rewards and the record's extra fields: this rank's shares (:meth:`compute`, its randomness seeded by
        ``seed(0)``), summed over the ranks by ``reduce``, finished by :meth:`finalize`. A reward that measures in
        blocks (MultiUAT's adaptive K) overrides it and seeds block b with ``seed(b)``."""
        shares = self.compute(model, dev_batches, train_batches, process_index=process_index,
                              num_processes=num_processes, seed=seed(0))
        return self.finalize(reduce(shares))

    def check_model(self, model: nn.Module, accelerator: Any = None) -> None:
        """Refuse, before training starts, a model this reward cannot measure (``accelerator``: the Trainer's,
        which shows sharding the model will get at ``prepare``): here, one that is neither encoder-decoder nor a
        causal LM (:func:`~uat_hf.models.targets.require_supported_model`); subclasses add their own refusals."""
        require_supported_model(model)

    def finalize(self, totals: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """Rewards per corpus (and extra fields for the history record) from the rank-summed shares."""
        raise NotImplementedError


def target_statistics(model: nn.Module, batch: Mapping[str, torch.Tensor], mask: torch.Tensor,
                      max_elements: int = STATISTICS_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~uat_hf.strategies.multiuat.measures.position_statistics` (max probability, entropy) of
    :func:`target_logits`, [M] each,
    with the output layer and the softmax applied to at most ``max_elements`` logits at a time.

    Why: the statistics need two numbers per position, not the logits; log_softmax over a large vocabulary
    (256K for NLLB) at every target position of a replicated batch would hold several [M, V] float32 copies
    at once, more memory than the training step. Each row's numbers are those of the whole-batch computation.
    """
    features, head = target_features(model, batch, mask)
    width = head.vocabulary if isinstance(head, OutputLayer) else features.shape[-1]
    rows = max(1, max_elements // max(width, 1))
    parts = [position_statistics(head(features[start:start + rows]))
             for start in range(0, max(features.shape[0], 1), rows)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


