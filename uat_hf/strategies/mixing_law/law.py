"""Online mixing-law balancing (after Aioli, Chen et al., ICLR 2025): the math, NumPy only (the strategy that runs it
is :class:`~uat_hf.strategies.mixing_law.strategy.MixingLaw`).

The law: training one step on the mix q lowers the dev loss of corpus i by ``Σ_j A_ij q_j``, so the average
dev loss falls fastest when p favours the corpora j with the largest column sum ``Σ_i A_ij``. Every
``update_every`` steps the strategy estimates A from the run itself: a few short *probe windows*, each
favouring one corpus j, with every corpus's dev loss measured before and after each window.

Where this differs from Aioli's ``trainer/aioli_trainer.py`` (the study found that moving p toward uniform
hurts at this scale, and that the proportional prior is the best static mix):

* **Probes centred on p, averaging to p.** Aioli's window j samples ``f`` from j and ``(1 - f)/(N - 1)`` from
  every other corpus: on average uniform. Here window j samples ``q_j = p + f·(e_j − r)``; with ``r`` uniform
  the windows of a sweep average exactly p, so probing does not shift the mix the model trains on. A corpus
  too small to give ``f/N`` (``p_l < f/N``) keeps what it has (``r`` is water-filled under ``f·r ≤ p``); the
  average then departs from p by ``f·(1/N − r)``, only on those corpora and their complement.
* **Palindromic sweeps.** The sweeps go through the corpora in a seeded random order, then in the reverse
  order, and so on: a dev loss that falls steadily over the probe phase (a linear trend) gives every corpus
  the same mean window position, so it adds the same amount to every column of A and leaves p unchanged.
* **A prior anchor.** ``log p ← (1 − λ)·(log p + η·Σ_i Â_i·) + λ·log prior``: with a constant law p settles at
  ``prior · exp(η (1 − λ)/λ · Σ_i Â_i·)`` (normalised), so it leaves the prior only as far as the law says it
  pays, and noise in A cannot walk it away.

A is fitted on the mix each window really drew (the realised shares, when the sampler reports them; the nominal
probe mixes otherwise: with one corpus per batch a 3-step window draws 3 batches, far from its nominal mix), then
optionally gated by its evidence (:func:`gate_law`: the column sums' differences shrunk by ``k`` standard errors,
estimated from the fit's residuals, :func:`column_sum_errors`), normalised (Aioli: shifted to a minimum of 0
when negative, then divided by its sum, which makes η scale-free) and smoothed (EMA, as Aioli's ``ema``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "UPDATES",
    "MixingLawSettings",
    "ProbePhase",
    "aioli_step",
    "column_sum_errors",
    "fit_law",
    "gate_law",
    "law_step",
    "normalise_law",
    "probe_base",
    "probe_mixes",
    "probe_order",
    "smooth_law",
]


#: How the smoothed law moves p: "anchored" (multiplicative from p, pulled toward the prior) or "aioli" (Aioli's
#: released scripts: p recomputed from uniform every round, ``p ∝ exp(η Σ_i Â_ij)``, no anchor).
UPDATES = ("anchored", "aioli")


@dataclass(frozen=True)
class MixingLawSettings:
    """The settings of strategy ``mixing-law`` (its ``settings_class``: ``strategy_settings`` in a recipe or
    ``UATConfig``, ``--mixing-law.<name>`` on the command line); see docs/mixing_law.md."""

    window_steps: int = 3  #: training steps per probe window (Aioli's lp_steps: 6)
    sweeps: int = 2  #: passes over the corpora per update, alternately forward and reversed (Aioli's lp_rounds: 4)
    factor: float = 0.5  #: f, the share a window moves to its corpus (Aioli's one_hot_factor: 0.5)
    eta: float = 1.0  #: η, the step of the exponentiated-gradient update (Aioli's full-scale scripts: 1)
    ema: float = 0.5  #: weight of the previous smoothed A (Aioli's ema: 0.5 / 0.1); 0 keeps only the newest
    anchor: float = 0.25  #: λ, pull of log p toward log prior per update (0: none, as Aioli); "anchored" only
    update: str = "anchored"  #: one of :data:`UPDATES`
    #: k of the evidence gate: each centred column sum of A shrinks toward 0 by k standard errors (0: no gate; it
    #: needs sweeps >= 2: one sweep leaves the fit no residual)
    evidence: float = 0.0

    def __post_init__(self) -> None:
        for name in ("window_steps", "sweeps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"mixing-law.{name} must be >= 1, got {getattr(self, name)}.")
        if not 0 < self.factor <= 1:
            raise ValueError(f"mixing-law.factor must be in (0, 1], got {self.factor}.")
        if not self.eta >= 0:
            raise ValueError(f"mixing-law.eta must be >= 0, got {self.eta}.")
        if self.update not in UPDATES:
            raise ValueError(f"mixing-law.update must be one of {list(UPDATES)}, got {self.update!r}.")
        if not self.evidence >= 0:
            raise ValueError(f"mixing-law.evidence must be >= 0, got {self.evidence}.")
        if self.evidence > 0 and int(self.sweeps) < 2:
            raise ValueError(f"mixing-law.evidence={self.evidence} needs mixing-law.sweeps >= 2 (its standard errors "
                             f"come from the fit's residuals), got {self.sweeps}.")
        for name in ("ema", "anchor"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"mixing-law.{name} must be in [0, 1), got {getattr(self, name)}.")

    def windows(self, num_corpora: int) -> int:
        return self.sweeps * num_corpora

    def probe_steps(self, num_corpora: int) -> int:
        """Training steps of one probe phase (they count in max_steps and train the model)."""
        return self.windows(num_corpora) * self.window_steps


def probe_base(p: np.ndarray, factor: float) -> np.ndarray:
    """r, the mix a probe window takes its share ``f`` from: as close to uniform as ``f·r ≤ p`` allows
    (water-filling), so that every probe mix is a distribution and the windows of a sweep average to p when
    every ``p_l ≥ f/N``."""
    p = np.asarray(p, dtype=np.float64)
    caps = p / factor
    r = np.zeros_like(p)
    free = np.ones(len(p), dtype=bool)
    left = 1.0
    while free.any():
        level = left / free.sum()
        capped = free & (caps <= level)
        if not capped.any():
            r[free] = level
            break
        r[capped] = caps[capped]
        left -= caps[capped].sum()
        free &= ~capped
    return r


def probe_mixes(p: np.ndarray, factor: float) -> np.ndarray:
    """Q, row j the mix of a window favouring corpus j: ``p + f·(e_j − r)``."""
    p = np.asarray(p, dtype=np.float64)
    mixes = p - factor * probe_base(p, factor) + factor * np.eye(len(p))
    mixes = np.clip(mixes, 0.0, None)  # round-off only: f·r ≤ p by construction
    return mixes / mixes.sum(axis=1, keepdims=True)


def probe_order(num_corpora: int, sweeps: int, rng: np.random.Generator) -> list[int]:
    """The corpus each window favours: a random permutation, then its reverse, alternately (palindromic)."""
    forward = rng.permutation(num_corpora).tolist()
    return [j for sweep in range(sweeps) for j in (forward if sweep % 2 == 0 else forward[::-1])]


def _window_falls(losses: np.ndarray, window_steps: int) -> np.ndarray:
    """[windows, dev corpora]: the fall of every dev loss per step of each window."""
    losses = np.asarray(losses, dtype=np.float64)
    return (losses[:-1] - losses[1:]) / window_steps


def fit_law(losses: np.ndarray, order: Sequence[int], mixes: np.ndarray, window_steps: int,
            realised: np.ndarray | None = None) -> np.ndarray:
    """A [dev corpus i, train corpus j]: the fall of dev loss i per step of training on corpus j.

    ``losses[m]`` are the dev losses before window m (row ``len(order)``: after the last). Without ``realised``
    the falls of the windows favouring j are averaged into ``D[:, j]``; the linear law says ``D = A Qᵀ`` (Q:
    ``mixes``, row j the nominal mix of the windows favouring j), so ``A = D Q⁻ᵀ`` (Aioli's per-row ``solve``).
    With ``realised`` ([windows, corpora]: the shares each window really drew) the law is fitted window by window,
    ``falls_m = A·realised_m``, by least squares: the nominal mix is what a window asked for, not what it trained
    on (with one corpus per batch, a 3-step window is 3 draws).
    """
    falls = _window_falls(losses, window_steps)
    order = np.asarray(order, dtype=np.int64)
    n = mixes.shape[0]
    counts = np.bincount(order, minlength=n)
    if (counts == 0).any():
        raise ValueError(f"Every corpus needs a probe window; windows per corpus: {counts.tolist()}.")
    if realised is not None:
        return np.linalg.lstsq(np.asarray(realised, dtype=np.float64), falls, rcond=None)[0].T
    means = np.zeros((n, falls.shape[1]))
    np.add.at(means, order, falls)
    means /= counts[:, None]  # [train j, dev i]
    return np.linalg.solve(mixes, means).T


def column_sum_errors(losses: np.ndarray, window_mixes: np.ndarray, window_steps: int) -> np.ndarray | None:
    """Standard error of each centred column sum ``Σ_i A_ij − mean_j Σ_i A_ij`` (what moves p), from the residuals.

    The windows (``window_mixes``: [windows, corpora], the mix each window drew) are more than the law's N unknowns
    per dev loss once there are two sweeps, so the least-squares residuals of each dev loss's falls measure its
    noise σ_i² (with a linear trend over the phase as one more regressor: the model learns as the phase goes on,
    and a steady trend is not noise). The covariance of row i of A is then ``σ_i² (XᵀX)⁻¹`` and, the dev losses'
    noises independent, the centred column sums' variance is their sum. With the nominal mixes this is the spread
    between the sweeps' replicate fits, pooled over the dev corpora (N·(W − N − 1) degrees of freedom instead of
    S − 1). ``None`` when the windows leave no residual (one sweep).
    """
    falls = _window_falls(losses, window_steps)
    windows, n = np.asarray(window_mixes).shape
    if windows < n + 2:
        return None
    position = np.arange(windows, dtype=np.float64) - (windows - 1) / 2
    x = np.column_stack([np.asarray(window_mixes, dtype=np.float64), position])
    coefs, *_ = np.linalg.lstsq(x, falls, rcond=None)
    residual_df = windows - np.linalg.matrix_rank(x)
    if residual_df < 1:
        return None
    sigma2 = ((falls - x @ coefs) ** 2).sum(axis=0) / residual_df  # [dev corpora]
    centre = np.eye(n) - 1.0 / n
    cov = centre @ np.linalg.pinv(x.T @ x)[:n, :n] @ centre.T
    return np.sqrt(np.maximum(np.diag(cov), 0.0) * sigma2.sum())


def gate_law(law: np.ndarray, errors: np.ndarray, k: float) -> np.ndarray:
    """The law with each centred column sum soft-thresholded by ``k·errors`` (sign kept, size cut by k·SE, never
    past 0): only the evidence beyond k standard errors reaches p. The cut is spread evenly over the column's
    rows, so a column sum changes and nothing else; their common level (which p ignores) stays."""
    law = np.asarray(law, dtype=np.float64)
    column = law.sum(axis=0)
    centred = column - column.mean()
    gated = np.sign(centred) * np.maximum(np.abs(centred) - k * np.asarray(errors, dtype=np.float64), 0.0)
    return law + (gated - centred)[None, :] / law.shape[0]


def normalise_law(law: np.ndarray) -> np.ndarray:
    """Aioli's normalisation: shifted up to a minimum of 0 when an entry is negative, then divided by the sum
    (all zeros stay zeros). A common shift moves every column sum equally, so only the scale matters to p."""
    law = np.asarray(law, dtype=np.float64)
    shifted = law - min(float(law.min()), 0.0)
    total = shifted.sum()
    return shifted / total if total > 0 else np.zeros_like(shifted)


def smooth_law(previous: np.ndarray | None, law: np.ndarray, ema: float) -> np.ndarray:
    """EMA of the normalised laws: ``ema·previous + (1 − ema)·law`` (the first law as it is)."""
    return law.copy() if previous is None else ema * previous + (1.0 - ema) * law


def law_step(p: np.ndarray, prior: np.ndarray, law: np.ndarray, eta: float, anchor: float) -> np.ndarray:
    """The update: ``log p ← (1 − λ)(log p + η Σ_i A_ij) + λ log prior``, normalised (p, prior > 0)."""
    logits = (1.0 - anchor) * (np.log(p) + eta * law.sum(axis=0)) + anchor * np.log(prior)
    logits -= logits.max()
    new = np.exp(logits)
    return new / new.sum()


def aioli_step(law: np.ndarray, eta: float) -> np.ndarray:
    """Aioli's released update: ``p ∝ exp(η Σ_i A_ij)`` from uniform every round (no memory of p, no anchor)."""
    logits = eta * np.asarray(law, dtype=np.float64).sum(axis=0)
    new = np.exp(logits - logits.max())
    return new / new.sum()


@dataclass
class ProbePhase:
    """One update's probe windows in progress: where they started, their order, the dev losses so far.

    Window m trains steps ``start + m·L + 1 … start + (m + 1)·L``; the dev losses are measured at the steps
    ``start + m·L``, m = 0 … windows. Saved in every checkpoint, so a run killed inside a window resumes it.
    """

    start: int
    order: list[int]
    losses: list[list[float]] = field(default_factory=list)

    def next_measurement(self, window_steps: int) -> int:
        return self.start + len(self.losses) * window_steps

    @property
    def window(self) -> int | None:
        """The window now training (None before the first measurement and after the last)."""
        m = len(self.losses) - 1
        return m if 0 <= m < len(self.order) else None
