"""``max_train_minutes``: a wall-clock budget for ``uat-train``, kept across resumes."""

from __future__ import annotations

import logging
import time

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

__all__ = ["TimeBudgetCallback", "budget_report"]

logger = logging.getLogger(__name__)


class TimeBudgetCallback(TrainerCallback, ExportableState):
    """Stops training once ``seconds`` of training time have passed, counted across resumes.

    It only stops: the learning rate follows ``max_steps`` whatever the clock says, so the steps a run
    trains are the same on every machine until the budget cuts it short. The time already spent is saved
    with each checkpoint (``TrainerState.stateful_callbacks``), so a resumed run gets the rest of the budget,
    not a new one.
    """

    def __init__(self, seconds: float, spent_seconds: float = 0.0) -> None:
        self.seconds = float(seconds)
        self.spent_seconds = float(spent_seconds)
        self.start: float | None = None
        #: The step at which the budget stopped this run's training (``None``: it did not).
        self.stopped_at: int | None = None

    def elapsed(self) -> float:
        """Seconds of the budget used so far, earlier runs of a resumed training included."""
        return self.spent_seconds + (0.0 if self.start is None else time.monotonic() - self.start)

    def state(self) -> dict:
        return {"args": {"seconds": self.seconds, "spent_seconds": self.elapsed()}, "attributes": {}}

    def on_train_begin(self, args, state, control, **kwargs):
        saved = state.stateful_callbacks.get(type(self).__name__) if state.global_step > 0 else None
        if isinstance(saved, list):
            saved = saved[0] if saved else None
        if saved:
            self.spent_seconds = float(saved["args"].get("spent_seconds", 0.0))
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        over = self.elapsed() >= self.seconds
        if args.world_size > 1:  # every rank must stop at the same step, or the next collective waits forever
            over = _on_any_rank(over)
        if over and not control.should_training_stop:
            control.should_training_stop = True
            self.stopped_at = state.global_step
            logger.info(f"time budget of {self.seconds / 60:g} min reached at step {state.global_step}; stopping "
                        "training")


def budget_report(trainer) -> dict:
    """What ``eval_results.json`` says about the time budget: ``{}`` without one, else ``stopped_early`` (whether
    it cut training short), ``steps_done``, ``steps_planned`` (``max_steps``) and ``max_train_minutes``."""
    budget = next((c for c in trainer.callback_handler.callbacks if isinstance(c, TimeBudgetCallback)), None)
    if budget is None:
        return {}
    planned, done = trainer.args.max_steps, trainer.state.global_step
    stopped = budget.stopped_at is not None and (planned <= 0 or done < planned)
    return {"stopped_early": stopped, "steps_done": done, "steps_planned": planned,
            "max_train_minutes": budget.seconds / 60}


def _on_any_rank(flag: bool) -> bool:
    import torch
    from accelerate import PartialState
    from accelerate.utils import reduce

    total = reduce(torch.tensor([float(flag)], device=PartialState().device), reduction="sum")
    return bool(total.item() > 0)
