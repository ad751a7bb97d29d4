"""The columns of a tokenized corpus, named once (what :func:`uat_hf.data.preprocessing.tokenize_corpus` writes).

A leaf: it imports nothing, so every layer may use it.
"""

from __future__ import annotations

__all__ = ["IGNORE_INDEX", "MODEL_COLUMNS", "REFERENCE_COLUMN", "TOKEN_COLUMNS", "model_columns"]

#: Source and target token ids: what every tokenized corpus has, and what an example's size is counted over.
TOKEN_COLUMNS = ("input_ids", "labels")
#: What a seq2seq model reads of a tokenized corpus.
MODEL_COLUMNS = ("input_ids", "attention_mask", "labels")
#: The raw reference translation kept beside the ids, for BLEU and chrF on detokenized text.
REFERENCE_COLUMN = "target_text"
#: The label of a position nobody scores (padding, prompts): the value PyTorch's cross-entropy ignores.
IGNORE_INDEX = -100


def model_columns(dataset):
    """``dataset`` with only its :data:`MODEL_COLUMNS` (the same object when it has no other column)."""
    columns = [c for c in MODEL_COLUMNS if c in dataset.column_names]
    return dataset.select_columns(columns) if len(columns) < len(dataset.column_names) else dataset
