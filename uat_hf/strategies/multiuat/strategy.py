"""Strategy ``multiuat``: the scorer ψ learns p from each corpus's uncertainty under Monte Carlo dropout.

Spelled ``multiuat-<measure>`` it is MultiUAT with that measure (``variant_field``), so that a study names
each variant with one word. ``mc_tolerance`` (adaptive K) is its own knob: other strategies refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..registry import register_strategy
from ..scorer_strategy import ScorerStrategy

__all__ = ["MultiUAT", "eos_token_id"]


class MultiUAT(ScorerStrategy):
    """MultiUAT (Wu et al., EMNLP 2021): rewards are the dev sets' uncertainty (:class:`UncertaintyReward`)."""

    config_fields: ClassVar[tuple[str, ...]] = ("mc_tolerance",)
    #: ``multiuat-<measure>`` sets ``measure``.
    variant_field: ClassVar[str | None] = "measure"

    @classmethod
    def check_config(cls, config: Any) -> None:
        super().check_config(config)
        if config.mc_tolerance is not None and config.mc_min_samples > config.mc_samples:
            raise ValueError(
                f"mc_min_samples={config.mc_min_samples} > mc_samples={config.mc_samples}: adaptive K runs at least "
                "mc_min_samples and at most mc_samples passes. Lower mc_min_samples or raise mc_samples."
            )

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> Any:
        from ...data.language_codes import language_code_ids
        from .uncertainty import UncertaintyReward

        reward = UncertaintyReward(config.measure, config.mc_samples, eos_token_id=eos_token_id(model, tokenizer),
                                   mode=config.mc_batch_mode, language_code_ids=language_code_ids(tokenizer),
                                   tolerance=config.mc_tolerance, min_samples=config.mc_min_samples)
        reward.check_model(model, accelerator)
        return reward

    @classmethod
    def describe(cls, fields: Mapping[str, Any]) -> str:
        get = fields.get
        return (f"{get('strategy')} (measure {get('measure', 'enteos')}, K={get('mc_samples', 30)}, "
                f"S={get('update_every', 1000)})")

    def log_fields(self, fields: Mapping[str, Any]) -> dict[str, float]:
        logged = super().log_fields(fields)
        if "mc_samples_used" in fields:
            logged["mc_samples_used"] = fields["mc_samples_used"]
        return logged


def eos_token_id(model: Any, tokenizer: Any) -> int | None:
    """The end-of-sentence id the eos-based measures read: the model config's (the first of a list), else the
    tokenizer's."""
    eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return eos if eos is not None else getattr(tokenizer, "eos_token_id", None)


register_strategy("multiuat", MultiUAT)
