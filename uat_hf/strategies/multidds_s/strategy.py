"""Strategy ``multidds-s``: the scorer ψ learns p from the cosine of dev and train gradients."""

from __future__ import annotations

from typing import Any

from ..registry import register_strategy
from ..scorer_strategy import ScorerStrategy

__all__ = ["MultiDDSS"]


class MultiDDSS(ScorerStrategy):
    """MultiDDS-S (Wang et al., 2020): each corpus's reward is its gradient's cosine with the dev gradients
    (:class:`~uat_hf.strategies.multidds_s.gradient_cosine.GradientCosineReward`)."""

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> Any:
        from ...data.language_codes import language_code_ids
        from .gradient_cosine import GradientCosineReward

        reward = GradientCosineReward(dropout=config.dds_dropout, label_smoothing=config.label_smoothing_factor,
                                      per_pair_train_batches=config.dds_per_pair_train_batches,
                                      language_code_ids=language_code_ids(tokenizer))
        reward.check_model(model, accelerator)
        return reward


register_strategy("multidds-s", MultiDDSS)
