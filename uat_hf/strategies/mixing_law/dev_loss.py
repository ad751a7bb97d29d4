"""Strategy ``mixing-law``'s measurement: every corpus's dev loss, teacher-forced, in eval mode.

The probe windows of :mod:`uat_hf.strategies.mixing_law.law` need the plain mean token cross-entropy of each
corpus's dev
batch (no label smoothing, no dropout: the quantity the law predicts, measured without noise of its own).
It follows the reward interface (:class:`~uat_hf.strategies.rewards.BalancingReward`), so the callback runs it like the
other rewards: each rank sums the losses and token counts of its share of the sub-batches (sub-batch k goes
to rank k mod P), one all-reduce adds them up, and :meth:`DevLoss.finalize` divides, identically on every
rank. A sharded model (FSDP, ZeRO-3) gathers its parameters in every forward, so there every rank runs every
sub-batch and keeps only its own share.

A leading language code (NLLB, M2M100, mBART-50) is not scored (:func:`~uat_hf.models.targets.scored_mask`, as
the other rewards): it is fixed by the corpus, not translated, so in a one-to-many run training on corpus j teaches
the model to open with j's code, which lowers j's dev loss and raises every other's. Scored, that term made up
10–18 % of a measured effect on a tiny M2M100: a spurious "helps itself, hurts the others" pattern in the law.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...models.modes import model_device, restored_modes, sharding
from ...models.targets import scored_mask, target_logits
from ..rewards import BalancingReward

__all__ = ["DevLoss", "dev_loss_sums"]


def dev_loss_sums(model: nn.Module, batch: Mapping[str, torch.Tensor],
                  language_code_ids: Collection[int] = ()) -> tuple[float, int]:
    """(summed token cross-entropy, scored target tokens) of one collated batch, teacher-forced; a leading
    language code of ``language_code_ids`` is not scored."""
    device = model_device(model)
    batch = {k: v.to(device) for k, v in batch.items()}
    labels = batch["labels"]
    mask = scored_mask(labels, language_code_ids)
    logits = target_logits(model, batch, mask)
    loss = F.cross_entropy(logits.float(), labels[mask], reduction="sum")
    return float(loss), int(mask.sum())


class DevLoss(BalancingReward):
    """Mean token cross-entropy of each corpus's dev batch: what strategy ``mixing-law`` measures."""

    measure = "dev-loss"

    def __init__(self, language_code_ids: Collection[int] = ()) -> None:
        self.language_code_ids = frozenset(int(i) for i in language_code_ids)

    def compute(self, model, dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]], train_batches=None, *,
                process_index: int = 0, num_processes: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        everywhere = sharding(model) is not None
        sums = np.zeros(len(dev_batches))
        tokens = np.zeros(len(dev_batches))
        item = 0
        with restored_modes(model), torch.no_grad():
            model.eval()
            for corpus, batches in enumerate(dev_batches):
                for batch in batches:
                    mine = item % num_processes == process_index
                    item += 1
                    if mine or everywhere:
                        loss, count = dev_loss_sums(model, batch, self.language_code_ids)
                        if mine:
                            sums[corpus] += loss
                            tokens[corpus] += count
        return {"loss": sums, "tokens": tokens}

    def finalize(self, totals: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        return np.asarray(totals["loss"]) / np.maximum(np.asarray(totals["tokens"]), 1.0), {}
