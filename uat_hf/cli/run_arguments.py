"""Run-level command-line settings of ``uat-train``: neither data nor model (see :mod:`uat_hf.cli.arguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .field_values import check_positive

__all__ = ["RunArguments"]


@dataclass
class RunArguments:
    """Run-level settings that are neither data nor model: a wall-clock budget and CPU threads (CPU demos)."""

    _argument_group_name = "run (uat_hf.cli.RunArguments)"

    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop training after this many minutes of training time, counted across resumes (max_steps still "
            "applies, whichever comes first). It only stops: the learning-rate schedule follows max_steps, so a run "
            "cut short by the budget ends on a rate that has not fully decayed."
        },
    )

    torch_num_threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads for PyTorch's intra-op parallelism (torch.set_num_threads). Default: PyTorch's "
            "choice (all cores). On a CPU shared with other jobs, 1 thread is often several times faster than "
            "competing for every core."
        },
    )

    def __post_init__(self) -> None:
        check_positive(self, "torch_num_threads")
        if self.max_train_minutes is not None and not self.max_train_minutes > 0:
            raise ValueError(f"max_train_minutes must be > 0 (or unset), got {self.max_train_minutes!r}.")

