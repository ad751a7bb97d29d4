"""The static strategies: p is a prior, fixed for the whole run (paper, section 2).

``proportional`` (τ = 1: p ∝ corpus size), ``temperature`` (τ = 5, or ``sampling_temperature``), ``uniform``
(τ = ∞) and ``fixed`` (hand-given ``corpus_probabilities``). They measure nothing and propose nothing; the
distribution records their p once, at the start, so that a static baseline leaves a p trace like a learned
run.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from .base import BalancingStrategy
from .registry import register_strategy

__all__ = ["Fixed", "Proportional", "StaticPrior", "Temperature", "Uniform"]


class StaticPrior(BalancingStrategy):
    """p = the τ prior over the corpus sizes, for the whole run."""

    learns = False

    @classmethod
    def check_config(cls, config: Any) -> None:
        if config.corpus_probabilities is not None:
            raise ValueError(
                f"corpus_probabilities fixes the mix by hand, but strategy {config.strategy!r} samples with its own "
                "prior. Use strategy 'fixed' to sample with the given probabilities (or multiuat / multidds-s to "
                "start the scorer from them), or remove corpus_probabilities."
            )


class Proportional(StaticPrior):
    """p ∝ corpus size (τ = 1)."""

    prior_temperature = 1.0


class Uniform(StaticPrior):
    """Every corpus equally often (τ = ∞)."""

    prior_temperature = math.inf


class Temperature(StaticPrior):
    """p ∝ size^(1/τ), τ = ``sampling_temperature`` (default 5, as in the paper)."""

    prior_temperature = 5.0
    config_fields: ClassVar[tuple[str, ...]] = ("sampling_temperature",)

    @classmethod
    def prior_temperature_of(cls, config: Any) -> float | None:
        given = config.sampling_temperature
        return float(given) if given is not None else cls.prior_temperature

    @classmethod
    def foreign_use(cls, config: Any, chosen: type[BalancingStrategy], given: dict[str, Any]) -> str:
        """Why ``sampling_temperature`` cannot be used with strategy ``chosen``, with what its prior is instead."""
        if chosen.learns:
            instead = "; a dynamic strategy's starting prior is scorer_prior_temperature"
        elif chosen.prior_temperature is not None:
            instead = f", whose τ is fixed ({chosen.prior_temperature})"
        else:
            instead = ""
        return (f"sampling_temperature={config.sampling_temperature} is the τ of strategy 'temperature', but strategy "
                f"is {config.strategy!r}{instead}. Remove it or use strategy 'temperature'.")


class Fixed(BalancingStrategy):
    """p = the hand-given ``corpus_probabilities``, for the whole run (or set by hand during it)."""

    learns = False
    prior_temperature = None

    @classmethod
    def check_config(cls, config: Any) -> None:
        if config.corpus_probabilities is None:
            raise ValueError(
                "strategy 'fixed' samples with corpus_probabilities, which is not set; give one probability per "
                "training corpus, e.g. --corpus_probabilities '{\"news\": 0.7, \"law\": 0.3}'."
            )


register_strategy("proportional", Proportional)
register_strategy("temperature", Temperature)
register_strategy("uniform", Uniform)
register_strategy("fixed", Fixed)
