"""What a strategy receives after a measurement and what it gives back: the two values the distribution and a
strategy exchange (:meth:`~uat_hf.sampling.distribution.CorpusDistribution.measured`).

They live here, beside the distribution that owns p, because the distribution is below the strategies and must
not import them; strategies import these (through :mod:`uat_hf.strategies.base`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Measurement", "Proposal"]


@dataclass(frozen=True)
class Measurement:
    """One measurement of every corpus, as the strategy receives it.

    ``values`` and ``extras`` are what the strategy's reward returned (summed over the ranks and finished
    identically on each); ``p`` and ``prior`` are read from the distribution, which owns them; ``rng`` is
    seeded by (seed, update count), so it draws the same on every rank and in a resumed run.
    """

    step: int
    values: np.ndarray
    extras: Mapping[str, Any]
    p: np.ndarray
    prior: np.ndarray
    rng: np.random.Generator


@dataclass(frozen=True)
class Proposal:
    """What a strategy proposes after a measurement: a new p (``None``: p stays, e.g. a ``skipped`` update, whose
    reason is logged and recorded) and the strategy's own fields of the update's history record."""

    p: np.ndarray | None
    fields: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
