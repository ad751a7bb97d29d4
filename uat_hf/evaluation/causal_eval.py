"""Translating with a decoder-only (causal) LM: generate after the prompt, keep the first line of the answer.

:meth:`uat_hf.training.uat_trainer.UATTrainer.translate` is the one evaluation path for both kinds of model; for a
causal LM it uses these pieces so that the Trainer's own distributed generation loop still runs it:

* :func:`prompt_only` — each example cut to its prompt (the prefix whose labels are -100,
  :func:`prompt_lengths`): the model must not see the reference it is to produce.
* :func:`left_padding` — prompts padded on the left while generating, so that every row's continuation
  starts in the same column (right padding would put pad tokens between a short prompt and its answer).
* :func:`continuation` — the generated ids after that column.
* :func:`first_line` — the answer cut at the first newline (EOS has already ended the text when it came): a
  base LM asked with a plain template goes on after the translation with whatever text it finds likely.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import datasets
import torch
from transformers import PreTrainedTokenizerBase

from ..utils.columns import IGNORE_INDEX

__all__ = ["continuation", "first_line", "left_padding", "prompt_only"]


def prompt_lengths(labels: list[list[int]], ignore_index: int = IGNORE_INDEX) -> list[int]:
    """Length of each example's prompt: the leading positions whose label is ``ignore_index``."""
    lengths = []
    for row in labels:
        length = next((i for i, label in enumerate(row) if label != ignore_index), len(row))
        lengths.append(length)
    return lengths


def prompt_only(dataset: datasets.Dataset) -> datasets.Dataset:
    """``input_ids``/``attention_mask`` of each example's prompt only (``labels`` and the rest dropped)."""
    if "labels" not in dataset.column_names:
        raise ValueError(f"A causal-LM evaluation corpus needs its 'labels' column to find where each prompt ends "
                         f"(has {dataset.column_names}); tokenize it with "
                         "uat_hf.data.causal_data.tokenize_causal_corpus.")
    return dataset.map(_prompt_batch, batched=True, remove_columns=dataset.column_names, desc="prompts")


@contextlib.contextmanager
def left_padding(tokenizer: PreTrainedTokenizerBase) -> Iterator[None]:
    """The tokenizer pads on the left inside the block, as it did before afterwards."""
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        yield
    finally:
        tokenizer.padding_side = side


def continuation(generated: torch.Tensor, prompt_width: int) -> torch.Tensor:
    """The tokens ``generate`` added after a left-padded prompt batch ``prompt_width`` columns wide."""
    return generated[:, prompt_width:]


def first_line(text: str) -> str:
    """``text`` up to its first newline, stripped (the translation a one-line prompt asks for)."""
    return text.strip().split("\n", 1)[0].strip()


def _prompt_batch(batch: dict) -> dict[str, list]:
    lengths = prompt_lengths(batch["labels"])
    return {
        "input_ids": [ids[:length] for ids, length in zip(batch["input_ids"], lengths)],
        "attention_mask": [[1] * length for length in lengths],
    }
