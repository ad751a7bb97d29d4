"""Strategy ``mixing-law``: short probe windows measure how each corpus lowers the dev losses; a fitted law moves p.

The maths is in :mod:`uat_hf.strategies.mixing_law.law`; this class holds the strategy's own state (the smoothed
law and the probe phase in progress) and turns each dev-loss measurement into a proposal. p itself is the
distribution's: a probe window's mix is derived from it (:meth:`MixingLaw.sampling_mix`), so a checkpoint inside
a window holds the learned p, as the history's last record does, and resumes exactly.

**Pure windows.** The probe schedule is known in advance: phase k starts after step ``k·update_every``, its window
m trains the next ``window_steps`` steps, and its window order is seeded by the seed and that step. So the sampler,
which draws a batch one or two steps before the trainer uses it (the prefetch lag), asks
:meth:`MixingLaw.planned_mix` for the mix of the step the batch is *for*, and every batch of a window comes from that
window's mix; and it reports the examples each step drew per corpus (:meth:`MixingLaw.drawn`), so the law is fitted
on the shares each window really trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from ..base import BalancingStrategy, Measurement, Proposal
from ..registry import register_strategy
from .law import (
    MixingLawSettings,
    ProbePhase,
    aioli_step,
    column_sum_errors,
    fit_law,
    gate_law,
    law_step,
    normalise_law,
    probe_mixes,
    probe_order,
    smooth_law,
)

__all__ = ["MixingLaw"]

class MixingLaw(BalancingStrategy):
    """The state of strategy ``mixing-law``: its settings, the smoothed law A and the probe phase in progress.

    Args:
        names, prior: as :class:`~uat_hf.strategies.base.BalancingStrategy`; every prior value must be > 0 (the
            update works on log p).
        settings: its :class:`MixingLawSettings` (defaults when ``None``).
    """

    learned_by = "its mixing law"
    step_setting = "mixing-law.eta"
    plans_step_mixes = True
    settings_class = MixingLawSettings

    def __init__(self, names: Sequence[str], prior: Sequence[float], *,
                 settings: MixingLawSettings | None = None, seed: int = 0) -> None:
        super().__init__(names, prior)
        if (np.asarray(prior, dtype=np.float64) <= 0).any():
            raise ValueError(f"Strategy 'mixing-law' needs a prior > 0 for every corpus, got {list(prior)}.")
        self.settings = settings or MixingLawSettings()
        self.smoothed: np.ndarray | None = None
        self.phase: ProbePhase | None = None
        self.seed = int(seed)
        self.update_every: int | None = None  # known once the callback checks the schedule (check_training)
        #: Examples drawn per corpus by the steps of the current or next probe phase (step -> counts), as the
        #: sampler reports them (:meth:`drawn`); what the windows really trained on.
        self.realised: dict[int, list[float]] = {}
        self.fitted_through = 0  # the step of the last fitted phase's end: a replay's older steps are not kept

    @classmethod
    def knobs(cls, config: Any) -> dict[str, Any]:
        return {"settings": cls.strategy_settings(config), "seed": int(getattr(config, "seed", 0) or 0)}

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> Any:
        from ...data.language_codes import language_code_ids
        from .dev_loss import DevLoss

        reward = DevLoss(language_code_ids(tokenizer))
        reward.check_model(model, accelerator)
        return reward

    def check_training(self, update_every: int) -> None:
        self.update_every = int(update_every)
        steps = self.settings.probe_steps(len(self.names))
        if steps >= update_every:
            raise ValueError(
                f"The mixing-law probe windows take {steps} steps per update (mixing-law.sweeps={self.settings.sweeps}"
                f" × {len(self.names)} corpora × mixing-law.window_steps={self.settings.window_steps}), not fewer "
                f"than update_every={update_every}. Raise update_every or lower mixing-law.sweeps / "
                "mixing-law.window_steps."
            )

    # ------------------------------------------------------------------ updates
    def measures_at(self, step: int, update_every: int) -> bool:
        """At every ``update_every``-th step a probe phase starts; inside one, at the end of each window."""
        if self.phase is not None:
            return step == self.phase.next_measurement(self.settings.window_steps)
        return step > 0 and step % update_every == 0

    def sampling_mix(self, p: np.ndarray) -> np.ndarray | None:
        """The probe mix of the window now training (derived from p), else ``None`` (p itself)."""
        window = self.phase.window if self.phase is not None else None
        if window is None:
            return None
        return probe_mixes(p, self.settings.factor)[self.phase.order[window]]

    def planned_order(self, start: int) -> list[int]:
        """The window order of the phase starting after step ``start``: seeded by the seed and ``start`` only, so
        the sampler knows it before the phase's first measurement, on every rank and after a resume."""
        return probe_order(len(self.names), self.settings.sweeps, np.random.default_rng([self.seed, int(start), 3]))

    def _window_of(self, step: int) -> tuple[int, int] | None:
        """(phase start, window) of optimizer step ``step``, or ``None`` outside the probe windows."""
        if self.update_every is None or step <= self.update_every:
            return None
        start = (step - 1) // self.update_every * self.update_every
        window = (step - start - 1) // self.settings.window_steps
        return (start, window) if window < self.settings.windows(len(self.names)) else None

    def planned_mix(self, p: np.ndarray, step: int) -> np.ndarray | None:
        """The mix the batches of optimizer step ``step`` are drawn with: its window's probe mix inside a probe
        window, p outside (``None`` before :meth:`check_training` told the schedule). A phase cut short by
        non-finite losses keeps its planned mixes (they average to p), unmeasured."""
        if self.update_every is None:
            return None
        where = self._window_of(step)
        if where is None:
            return np.asarray(p, dtype=np.float64)
        start, window = where
        order = self.phase.order if self.phase is not None and self.phase.start == start else self.planned_order(start)
        return probe_mixes(p, self.settings.factor)[order[window]]

    def drawn(self, step: int, counts: np.ndarray) -> None:
        """The sampler drew ``counts`` examples per corpus for optimizer step ``step`` (every rank the same);
        kept for the steps of probe windows, keyed by step, so a replay after a resume rewrites the same values."""
        if step > self.fitted_through and self._window_of(step) is not None:
            self.realised[int(step)] = np.asarray(counts, dtype=np.float64).tolist()

    def _realised_mixes(self, phase: ProbePhase) -> np.ndarray | None:
        """[windows, corpora]: the share of each corpus in the examples each window drew (``None`` unless every step
        of the phase was reported: a strategy driven without the sampler fits the nominal mixes)."""
        window_steps = self.settings.window_steps
        shares = []
        for m in range(len(phase.order)):
            steps = range(phase.start + m * window_steps + 1, phase.start + (m + 1) * window_steps + 1)
            if any(s not in self.realised for s in steps):
                return None
            counts = np.sum([self.realised[s] for s in steps], axis=0)
            if counts.sum() <= 0:
                return None
            shares.append(counts / counts.sum())
        return np.asarray(shares)

    def propose(self, measurement: Measurement) -> Proposal | None:
        """Take the dev losses measured at a window boundary: the first starts a probe phase (its window order drawn
        from the measurement's rng), the last ends it with the fitted law and a new p; ``None`` in between.
        Non-finite losses end the phase at once (p stays)."""
        losses = np.asarray(measurement.values, dtype=np.float64)
        if not np.isfinite(losses).all():
            self.phase = None
            return Proposal(None, dict(measurement.extras), skipped=f"non-finite dev losses {losses.tolist()}")
        if self.phase is None:
            self.phase = ProbePhase(int(measurement.step), self.planned_order(int(measurement.step)))
        self.phase.losses.append(losses.tolist())
        if len(self.phase.losses) <= len(self.phase.order):
            return None
        phase, self.phase = self.phase, None
        mixes = probe_mixes(measurement.p, self.settings.factor)
        realised = self._realised_mixes(phase)
        self.fitted_through = int(measurement.step)
        self.realised = {s: c for s, c in self.realised.items() if s > self.fitted_through}  # later phases' only
        losses = np.asarray(phase.losses)
        window_steps = self.settings.window_steps
        law = fit_law(losses, phase.order, mixes, window_steps, realised)
        errors = column_sum_errors(losses, mixes[phase.order] if realised is None else realised, window_steps)
        gated = law if errors is None or self.settings.evidence == 0 else gate_law(law, errors, self.settings.evidence)
        self.smoothed = smooth_law(self.smoothed, normalise_law(gated), self.settings.ema)
        if self.settings.update == "aioli":
            p = aioli_step(self.smoothed, self.settings.eta)
        else:
            p = law_step(measurement.p, measurement.prior, self.smoothed, self.settings.eta, self.settings.anchor)
        gains = dict(zip(self.names, self.smoothed.sum(axis=0).tolist()))  # Σ_i Â_ij: what corpus j gains
        column = law.sum(axis=0)
        return Proposal(p, {**measurement.extras, "gains": gains, "law": law.tolist(),
                            "law_smoothed": self.smoothed.tolist(), "probe_order": phase.order,
                            "probe_mixes": mixes.tolist(),
                            "realised_mixes": None if realised is None else realised.tolist(),
                            "column_sums": dict(zip(self.names, (column - column.mean()).tolist())),
                            "column_sum_se": None if errors is None else dict(zip(self.names, errors.tolist())),
                            "probe_losses": phase.losses, "probe_start": phase.start})

    def log_fields(self, fields: Mapping[str, Any]) -> dict[str, float]:
        return {f"mixing_law/gain_{name}": value for name, value in fields.get("gains", {}).items()}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"settings": asdict(self.settings),
                "smoothed": None if self.smoothed is None else self.smoothed.tolist(),
                "phase": None if self.phase is None else asdict(self.phase),
                "realised": [[step, counts] for step, counts in sorted(self.realised.items())],
                "fitted_through": self.fitted_through}

    def load_state_dict(self, state: Mapping[str, Any] | None, p: np.ndarray, updated: bool) -> None:
        if MixingLawSettings(**state["settings"]) != self.settings:
            raise ValueError(f"The checkpoint's mixing-law settings are {state['settings']}, this run's "
                             f"{asdict(self.settings)}; resume with the same mixing-law settings.")
        phase = None if state["phase"] is None else ProbePhase(**state["phase"])
        windows = sorted(list(range(len(self.names))) * self.settings.sweeps)
        if phase is not None and (sorted(phase.order) != windows or not 1 <= len(phase.losses) <= len(windows)):
            raise ValueError(f"Inconsistent mixing-law state: the probe phase {asdict(phase)} is not one of "
                             f"{self.settings.sweeps} sweep(s) over {len(self.names)} corpora; the checkpoint is "
                             "corrupt.")
        self.smoothed = None if state["smoothed"] is None else np.asarray(state["smoothed"], dtype=np.float64)
        self.phase = phase
        self.realised = {int(step): list(counts) for step, counts in state.get("realised", [])}
        self.fitted_through = int(state.get("fitted_through", 0))


register_strategy("mixing-law", MixingLaw)
