"""Temperature priors over corpora and validation of probability vectors.

Pure math (numpy only): the sampler, the scorer and the configuration all agree on what a valid corpus
distribution is through :func:`validate_probabilities`, so a bad vector is rejected with the same message
wherever it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..utils.names import check_exact_names


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
        raise ValueError("prior_temperature must be > 0 (1 = proportional, 5 = temperature, inf = uniform), got "
                         f"{temperature}.")
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


def check_corpus_probabilities(
    probabilities: Mapping[str, float],
    *,
    positive: bool = False,
    reason: str = "",
    atol: float = 1e-6,
) -> dict[str, float]:
    """Check hand-given probabilities (``UATConfig.corpus_probabilities``) and return them as floats.

    Every message starts with ``corpus_probabilities`` and names the corpus and value at fault.
    ``positive=True`` also rejects an exact 0 (a scorer logit of -inf); ``reason`` says why. Whether they
    name exactly the training corpora is known only once the corpora are: :func:`corpus_probabilities_for`.
    """
    if not isinstance(probabilities, Mapping):
        raise ValueError(
            f"corpus_probabilities must be a mapping corpus -> probability (a dict, or a JSON object string such as "
            f"'{{\"a\": 0.5, \"b\": 0.5}}'), got {type(probabilities).__name__} {probabilities!r}."
        )
    if not probabilities:
        raise ValueError("corpus_probabilities is empty; give one probability per training corpus or leave it unset.")
    values: dict[str, float] = {}
    for name, value in probabilities.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str, np.number)):
            raise ValueError(f"corpus_probabilities: probability of corpus {name!r} must be a number, got {value!r}.")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"corpus_probabilities: probability of corpus {name!r} must be a number, got "
                             f"{value!r}.") from None
        if not math.isfinite(number):
            raise ValueError(f"corpus_probabilities: probability of corpus {name!r} is {number}; it must be finite.")
        if number < 0:
            raise ValueError(f"corpus_probabilities: probability of corpus {name!r} is negative ({number}).")
        values[str(name)] = number
    total = math.fsum(values.values())
    if abs(total - 1.0) > atol:
        raise ValueError(f"corpus_probabilities {values} sum to {total}, not 1 (tolerance {atol}).")
    if positive:
        for name, value in values.items():
            if value == 0:
                raise ValueError(
                    f"corpus_probabilities gives corpus {name!r} probability 0{reason}: the scorer's logits cannot "
                    "start from an exact 0 (log 0 = -inf). Give it a small positive probability, drop the corpus, "
                    "or use a static strategy."
                )
    return values


def corpus_probabilities_for(probabilities: Mapping[str, float], names: Sequence[str]) -> list[float]:
    """Checked hand-given probabilities (:func:`check_corpus_probabilities`) in the order of the training
    corpora ``names``, which they must name exactly."""
    names = list(names)
    check_exact_names(
        probabilities, names,
        missing="corpus_probabilities has no probability for training corpus {name!r}; give one for each of "
        "{expected}.",
        extra="corpus_probabilities names corpus {name!r}, which is not a training corpus (training corpora: "
        "{expected}).",
    )
    return [float(probabilities[n]) for n in names]
