"""The learned mix as a picture in the run's tracker: at each balancing update, p over the steps so far.

The numbers (``balance/p_<corpus>``) reach every tracker through the Trainer's log already, one scalar per corpus;
a stacked area of p over the steps (:func:`~uat_hf.evaluation.plotting.mix_figure`) shows the mix at a glance. It
goes through the image API of the trackers that have one: TensorBoard (``SummaryWriter.add_figure``) and Weights &
Biases (``wandb.Image``), found among the trainer's own reporting callbacks, so ``report_to`` decides, as for the
scalars. Other trackers get the scalars only. Drawn on the main process only, and only when such a tracker runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import TensorBoardCallback, WandbCallback

from ..evaluation.plotting import mix_figure
from ..sampling.distribution import CorpusDistribution

__all__ = ["MIX_FIGURE_TAG", "MixFigureCallback"]

#: The tag (TensorBoard) or key (W&B) of the figure.
MIX_FIGURE_TAG = "balance/p"


class MixFigureCallback(TrainerCallback):
    """After each log entry that carries a balancing update's p, draw p so far and hand it to the image trackers.

    Args:
        distribution: the run's :class:`~uat_hf.sampling.distribution.CorpusDistribution` (its history).
        callbacks: the trainer's callback list (``trainer.callback_handler.callbacks``), where the reporting
            callbacks are; this callback goes after them, so that theirs have logged the same step first.
    """

    def __init__(self, distribution: CorpusDistribution, callbacks: Sequence[TrainerCallback]) -> None:
        self.distribution = distribution
        self.callbacks = callbacks

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or not any(key.startswith("balance/p_") for key in logs):
            return control
        writers = self._image_writers()
        if writers and self.distribution.history:
            figure = mix_figure(self.distribution.history)
            for write in writers:
                write(figure, state.global_step)
        return control

    def _image_writers(self) -> list[Callable[[Any, int], None]]:
        writers: list[Callable[[Any, int], None]] = []
        for callback in self.callbacks:
            if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                writer = callback.tb_writer
                writers.append(lambda figure, step, w=writer: w.add_figure(MIX_FIGURE_TAG, figure, step, close=False))
            elif isinstance(callback, WandbCallback) and getattr(callback, "_initialized", False):
                run = callback._wandb
                writers.append(lambda figure, step, r=run: r.log({MIX_FIGURE_TAG: r.Image(figure),
                                                                  "train/global_step": step}))
        return writers
