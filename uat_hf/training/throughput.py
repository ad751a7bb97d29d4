"""What training really processed: examples and tokens, for true throughput under token-budget batches.

The Trainer's ``train_samples_per_second`` is ``max_steps * per_device_train_batch_size * world size`` over the
runtime; with ``max_tokens`` (or any corpus sampler batch) the batch size setting says nothing about how many
examples a batch holds. :class:`TrainedCount` counts the batches the model is actually trained on (not those the
DataLoader prefetched), on each process, and sums them over processes when training ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..utils.columns import IGNORE_INDEX

__all__ = ["TrainedCount"]


class TrainedCount:
    """Examples and tokens (source + target, padding excluded) of the training batches of one ``train()`` call."""

    def __init__(self) -> None:
        self.examples = 0
        self.tokens: torch.Tensor | int = 0  # kept on the batch's device: no host sync per step

    def add(self, inputs: Mapping[str, Any]) -> None:
        """Count one training (micro-)batch of model inputs."""
        input_ids = inputs["input_ids"]
        self.examples += int(input_ids.shape[0])
        mask = inputs.get("attention_mask")
        source = mask.sum() if mask is not None else torch.tensor(input_ids.numel(), device=input_ids.device)
        labels = inputs.get("labels")
        target = (labels != IGNORE_INDEX).sum() if labels is not None else 0
        self.tokens = self.tokens + source + target

    def speed_metrics(self, runtime: float, accelerator: Any = None) -> dict[str, float]:
        """``train_samples_per_second`` and ``train_tokens_per_second`` over ``runtime`` seconds, summed over the
        processes of ``accelerator`` (a collective: every process must call it)."""
        device = accelerator.device if accelerator is not None else "cpu"
        totals = torch.tensor([self.examples, int(self.tokens)], dtype=torch.int64, device=device)
        if accelerator is not None and accelerator.num_processes > 1:
            totals = accelerator.reduce(totals, reduction="sum")
        examples, tokens = totals.tolist()
        if runtime <= 0:
            return {}
        return {"train_samples_per_second": round(examples / runtime, 3),
                "train_tokens_per_second": round(tokens / runtime, 3)}
