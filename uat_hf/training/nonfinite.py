"""Stop training at the first non-finite loss or gradient norm, rather than train on (and save) NaN weights.

With a learning rate far too high, the loss becomes ``nan`` within a few steps. The Trainer then logs the
average of the earlier losses in its place (``logging_nan_inf_filter``), the weights turn to NaN, and the run
ends as if nothing happened: it saves the NaN model and exits 0. :class:`NonFiniteLossCallback` (which
:class:`~uat_hf.training.uat_trainer.UATTrainer` adds unless ``allow_nonfinite_loss=True``) raises
:class:`NonFiniteLossError`, naming the step, as soon as

* a training step's loss is ``nan`` or ``inf`` -- checked before the optimizer applies that step's update, so
  the step's gradients never reach the weights, and no checkpoint of the step is written; or
* the gradient norm the Trainer logs is not finite (checked when it logs, before that step's checkpoint).

The check costs one device sync per optimizer step, as the Trainer's own ``logging_nan_inf_filter`` does. On
several processes the ranks agree (an all-reduce), so that they all stop at the same step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import TrainerCallback

__all__ = ["NonFiniteLossCallback", "NonFiniteLossError", "watch_nonfinite_loss"]


class NonFiniteLossError(FloatingPointError):
    """Training met a non-finite loss or gradient norm; the message names the step and what to change."""


def _message(what: str, value: float, step: int, args: Any) -> str:
    return (
        f"Training stopped at step {step} of {args.max_steps if args.max_steps > 0 else '?'}: the {what} is {value} "
        f"(learning_rate {args.learning_rate:g}, max_grad_norm {args.max_grad_norm:g}); training on would only "
        "give non-finite weights, so no final model was saved. Lower learning_rate, or clip gradients with "
        "max_grad_norm > 0, and train again (or resume from an earlier checkpoint); allow_nonfinite_loss=True trains "
        "on regardless."
    )


class NonFiniteLossCallback(TrainerCallback):
    """Raises :class:`NonFiniteLossError` at the first step whose training loss or gradient norm is not finite.

    ``trainer`` (optional): the Trainer whose ``training_step`` losses to check at every step. Without it only
    the logged ``loss`` and ``grad_norm`` are checked (every ``logging_steps``; the logged loss skips non-finite
    steps while ``logging_nan_inf_filter`` is on, so the gradient norm is then what tells).
    """

    def __init__(self, trainer: Any = None) -> None:
        self._losses: list[torch.Tensor] = []
        if trainer is not None:
            self.watch(trainer)

    def watch(self, trainer: Any) -> None:
        """Record the loss of each of ``trainer``'s training steps (micro-batches included)."""
        step = trainer.training_step

        def training_step(*args: Any, **kwargs: Any) -> torch.Tensor:
            loss = step(*args, **kwargs)
            self._losses.append(loss.detach().reshape(-1)[:1].float())
            return loss

        trainer.training_step = training_step

    def on_train_begin(self, args, state, control, **kwargs):
        self._losses = []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if not self._losses:
            return
        losses, self._losses = torch.cat(self._losses), []
        bad = ~torch.isfinite(losses)
        if args.world_size > 1:
            from accelerate.utils import reduce

            bad_anywhere = reduce(bad.any().float().reshape(1), reduction="sum").item() > 0
        else:
            bad_anywhere = bool(bad.any().item())
        if bad_anywhere:
            value = float(losses[bad][0]) if bool(bad.any()) else float("nan")
            raise NonFiniteLossError(_message("training loss", value, state.global_step + 1, args))

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key, what in (("grad_norm", "gradient norm"), ("loss", "training loss")):
            value = (logs or {}).get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise NonFiniteLossError(_message(what, value, state.global_step, args))


def watch_nonfinite_loss(trainer: Any) -> NonFiniteLossCallback | None:
    """Add a :class:`NonFiniteLossCallback` watching ``trainer`` unless its args allow non-finite losses
    (``allow_nonfinite_loss=True``); returns it (``None`` when allowed)."""
    if getattr(trainer.args, "allow_nonfinite_loss", False):
        return None
    callback = NonFiniteLossCallback(trainer)
    trainer.add_callback(callback)
    return callback
