"""Strategy ``multidds-s``: the scorer ψ learns p from the cosine of dev and train gradients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..registry import register_strategy
from ..scorer_strategy import ScorerStrategy

__all__ = ["MultiDDSS", "MultiDDSSettings"]


@dataclass(frozen=True)
class MultiDDSSettings:
    """The settings of strategy ``multidds-s`` (``--multidds-s.<name>``, ``strategy_settings`` in a recipe); its
    scorer's (``scorer_*``) are shared with ``multiuat``. See docs/multidds.md."""

    #: target tokens of the fresh train batch drawn per corpus at each update
    train_batch_tokens: int = 1024
    #: take the gradients with dropout on, as multiDDS does (default: eval mode, as MultiUAT's baseline)
    dropout: bool = False
    #: a fresh train batch for every (dev, train) corpus pair, as both reference codes (N + N² gradient passes per
    #: update instead of 2N)
    per_pair_train_batches: bool = False

    def __post_init__(self) -> None:
        if not int(self.train_batch_tokens) >= 1:
            raise ValueError(f"multidds-s.train_batch_tokens must be >= 1, got {self.train_batch_tokens}.")


class MultiDDSS(ScorerStrategy):
    """MultiDDS-S (Wang et al., 2020): each corpus's reward is its gradient's cosine with the dev gradients
    (:class:`~uat_hf.strategies.multidds_s.gradient_cosine.GradientCosineReward`)."""

    settings_class = MultiDDSSettings

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> Any:
        from ...data.language_codes import language_code_ids
        from .gradient_cosine import GradientCosineReward

        settings = cls.strategy_settings(config)
        reward = GradientCosineReward(dropout=settings.dropout, label_smoothing=config.label_smoothing_factor,
                                      per_pair_train_batches=settings.per_pair_train_batches,
                                      train_batch_tokens=settings.train_batch_tokens,
                                      language_code_ids=language_code_ids(tokenizer))
        reward.check_model(model, accelerator)
        return reward


register_strategy("multidds-s", MultiDDSS)
