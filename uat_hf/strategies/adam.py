"""``torch.optim.Adam``'s update rule and a softmax on float64 NumPy vectors (the corpus scorer's arithmetic).

The scorer steps an N-vector tens of thousands of times (the released prior fit); in NumPy with closed-form
gradients that is ~20x cheaper than autograd and a torch optimizer, touches no global random state, and gives
bit-identical results for equal inputs.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Adam", "softmax"]


def softmax(logits: np.ndarray) -> np.ndarray:
    """softmax of a logit vector (shifted by its maximum, so no logit overflows)."""
    z = np.exp(logits - logits.max())
    return z / z.sum()


class Adam:
    """``torch.optim.Adam``'s update (no weight decay, no AMSGrad, eps 1e-8) on a float64 vector, in place."""

    def __init__(self, lr: float, betas: tuple[float, float], eps: float = 1e-8) -> None:
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.exp_avg: np.ndarray | None = None
        self.exp_avg_sq: np.ndarray | None = None

    def step(self, param: np.ndarray, grad: np.ndarray) -> None:
        beta1, beta2 = self.betas
        if self.exp_avg is None:
            self.exp_avg, self.exp_avg_sq = np.zeros_like(param), np.zeros_like(param)
        self.step_count += 1
        self.exp_avg += (grad - self.exp_avg) * (1 - beta1)
        self.exp_avg_sq *= beta2
        self.exp_avg_sq += (1 - beta2) * grad * grad
        step_size = self.lr / (1 - beta1 ** self.step_count)
        denom = np.sqrt(self.exp_avg_sq) / math.sqrt(1 - beta2 ** self.step_count) + self.eps
        param -= step_size * self.exp_avg / denom
