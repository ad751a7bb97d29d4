"""An outside balancing strategy, as a user would write one (docs/strategies.md): p ∝ each corpus's dev loss.

It lives outside the package on purpose: tests/test_outside_strategy.py trains with it by its ``module:Class``
name, resumes it and runs it on two processes, through the same code paths as a built-in strategy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from uat_hf.strategies.base import BalancingStrategy, Measurement, Proposal
from uat_hf.strategies.mixing_law.dev_loss import DevLoss


class DevLossShare(BalancingStrategy):
    """Every ``update_every`` steps, p ∝ an EMA of each corpus's dev loss: the corpora fitted worst get more."""

    def __init__(self, names, prior, *, ema: float = 0.5) -> None:
        super().__init__(names, prior)
        self.ema = ema
        self.smoothed: np.ndarray | None = None  # its own state: saved in checkpoints, so a resume continues it

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> DevLoss:
        reward = DevLoss()  # mean token cross-entropy per corpus, split over the ranks by the callback
        reward.check_model(model, accelerator)
        return reward

    def propose(self, measurement: Measurement) -> Proposal:
        losses = measurement.values
        if not np.isfinite(losses).all():
            return Proposal(None, skipped=f"non-finite dev losses {losses.tolist()}")
        self.smoothed = losses if self.smoothed is None else self.ema * self.smoothed + (1 - self.ema) * losses
        return Proposal(self.smoothed / self.smoothed.sum(),
                        {"dev_loss": dict(zip(self.names, losses.tolist()))})

    def log_fields(self, fields):
        return {f"dev_loss/{name}": value for name, value in fields.get("dev_loss", {}).items()}

    def state_dict(self):
        return {"smoothed": None if self.smoothed is None else self.smoothed.tolist()}

    def load_state_dict(self, state, p, updated):
        self.smoothed = None if state["smoothed"] is None else np.asarray(state["smoothed"], dtype=np.float64)
