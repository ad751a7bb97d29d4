"""What MultiUAT and MultiDDS-S share: one reward per corpus moves the scorer ψ, and p = softmax(ψ).

The two differ only in their reward (:mod:`uat_hf.strategies.multiuat`, :mod:`uat_hf.strategies.multidds_s`);
the scorer (:class:`~uat_hf.strategies.scorer.CorpusScorer`), its settings (``scorer_lr``, ``scorer_steps``,
``scorer_prior_fit``) and how an update is proposed, recorded and checkpointed are this one class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .base import BalancingStrategy, Measurement, Proposal
from .scorer import CorpusScorer, NonFiniteRewardError

__all__ = ["ScorerStrategy"]


class ScorerStrategy(BalancingStrategy):
    """p = softmax(ψ), ψ trained on one reward per corpus at every update (the scorer's own state is ψ and Adam's).

    Args:
        names, prior: as :class:`~uat_hf.strategies.base.BalancingStrategy` (ψ starts at the prior).
        lr, steps, prior_fit: the scorer's Adam learning rate, steps per update, and how ψ starts.
    """

    learned_by = "its scorer"
    step_setting = "scorer_lr"

    def __init__(self, names: Sequence[str], prior: Sequence[float], *, lr: float = 1e-4, steps: int = 200,
                 prior_fit: str = "released") -> None:
        super().__init__(names, prior)
        self.scorer = CorpusScorer(self.names, prior, lr=lr, steps=steps, prior_fit=prior_fit)

    @classmethod
    def knobs(cls, config: Any) -> dict[str, Any]:
        return {"lr": config.scorer_lr, "steps": config.scorer_steps, "prior_fit": config.scorer_prior_fit}

    @classmethod
    def check_config(cls, config: Any) -> None:
        if config.scorer_lr == 0 and config.scorer_prior_fit == "released":
            raise ValueError(
                "scorer_lr=0 cannot fit the scorer to its prior (scorer_prior_fit='released' uses the scorer's Adam); "
                "use scorer_prior_fit='exact' for a scorer that stays at its prior, or a static strategy."
            )

    def propose(self, measurement: Measurement) -> Proposal:
        """ψ moves on the rewards; non-finite rewards skip the update (p stays, the record says why)."""
        fields = {"rewards": dict(zip(self.names, map(float, measurement.values))), **measurement.extras}
        try:
            return Proposal(self.scorer.update(measurement.values), fields)
        except NonFiniteRewardError as error:
            return Proposal(None, fields, skipped=str(error))

    def log_fields(self, fields: Mapping[str, Any]) -> dict[str, float]:
        return {f"reward_{name}": value for name, value in fields["rewards"].items()}

    def state_dict(self) -> dict[str, Any]:
        return self.scorer.state_dict()

    def load_state_dict(self, state: Mapping[str, Any] | None, p: np.ndarray, updated: bool) -> None:
        """ψ and Adam's state; once an update went through, p must be softmax(ψ): anything else is a corrupt state."""
        self.scorer.load_state_dict(state)
        if updated and not np.array_equal(p, self.scorer.probabilities):
            raise ValueError(f"Inconsistent corpus distribution state: p = {p.tolist()} but softmax(ψ) = "
                             f"{self.scorer.probabilities.tolist()}; the checkpoint is corrupt.")
