"""Temperature priors over corpora and validation of probability vectors.

Pure math (numpy only): the sampler, the scorer and the configuration all agree on what a valid corpus
distribution is through :func:`validate_probabilities`, so a bad vector is rejected with the same message
wherever it comes from.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

#: Static strategies and the prior temperature each one means (paper, section 2).
STATIC_TEMPERATURES: dict[str, float] = {"proportional": 1.0, "temperature": 5.0, "uniform": math.inf}


def temperature_prior(sizes: Sequence[int] | Mapping[str, int], temperature: float) -> np.ndarray:
    """q_τ(n) ∝ (M_n / Σ M)^(1/τ): τ = 1 proportional to corpus size, τ = ∞ uniform.

    Large τ flattens the distribution so that small corpora are seen more often than their size alone
    would allow; this is the hand-tuned knob that MultiUAT replaces with a learned one.
    """
    if isinstance(sizes, Mapping):
        names, values = list(sizes), np.asarray(list(sizes.values()), dtype=np.float64)
    else:
        names, values = [str(i) for i in range(len(sizes))], np.asarray(sizes, dtype=np.float64)
    if values.size == 0:
        raise ValueError("temperature_prior needs at least one corpus, got none.")
    for name, size in zip(names, values):
        if not size > 0:
            raise ValueError(f"Corpus {name!r} has {int(size)} examples; every corpus needs at least one.")
    if not (temperature > 0):  # also rejects NaN
        raise ValueError(f"prior_temperature must be > 0 (1 = proportional, 5 = temperature, inf = uniform), got {temperature}.")
    if math.isinf(temperature):
        return np.full(values.size, 1.0 / values.size)
    # Work in log space so that a huge τ or huge corpora cannot underflow.
    logits = np.log(values / values.sum()) / temperature
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def validate_probabilities(probabilities: Sequence[float], names: Sequence[str], *, atol: float = 1e-6) -> np.ndarray:
    """Return ``probabilities`` as a float64 array after checking it is a distribution over ``names``."""
    p = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    if p.size != len(names):
        raise ValueError(f"Got {p.size} probabilities for {len(names)} corpora {list(names)}; give one per corpus.")
    for name, value in zip(names, p):
        if not np.isfinite(value):
            raise ValueError(f"Probability of corpus {name!r} is {value}; probabilities must be finite.")
        if value < 0:
            raise ValueError(f"Probability of corpus {name!r} is negative ({value}).")
    total = p.sum()
    if abs(total - 1.0) > atol:
        raise ValueError(f"Probabilities {dict(zip(names, p.tolist()))} sum to {total}, not 1.")
    return p / total
