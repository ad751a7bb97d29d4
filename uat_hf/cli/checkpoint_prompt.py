"""The translation prompt of a decoder-only run, written into every checkpoint beside the model."""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..data.causal_data import CausalPrompt

__all__ = ["PromptInCheckpoints"]


class PromptInCheckpoints(TrainerCallback):
    """Saves ``prompt`` (``translation_prompt.json``) into each checkpoint as it is written.

    ``uat-evaluate CHECKPOINT`` asks the model with the prompt found beside it, and the default prompt when
    there is none; without this, a checkpoint of a run with its own ``prompt_template`` would be evaluated with
    a prompt it was never trained on. The Trainer saves the tokenizer into checkpoints, but knows no prompt.
    """

    def __init__(self, prompt: CausalPrompt) -> None:
        self.prompt = prompt

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and checkpoint.is_dir():
            self.prompt.save_pretrained(checkpoint)
