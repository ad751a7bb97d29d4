"""Token sizes of examples, and packing them into batches under a padded token budget.

A batch of examples padded to its longest costs ``len(batch) * max(size)`` tokens. Every token budget in
the library follows one greedy rule, :func:`fits`: an example joins the open batch while the padded batch
stays within the budget (an example alone always fits, however long). Packing examples sorted by length
with that rule is :func:`token_batch_bounds`; the training batches of a corpus (:func:`pack_by_tokens`,
fairseq style) and the re-batched pools of instance-level mixing use it; the measured dev sub-batches
(:func:`split_by_tokens`) also cap their padding, and the mixed batches, filled in drawn order, call :func:`fits`
example by example. An example counts at least one token.

Pure NumPy (``pyarrow`` only to read list lengths from a ``datasets.Dataset``); no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..utils.columns import TOKEN_COLUMNS

__all__ = [
    "PackedBatches",
    "draw_token_batch",
    "example_lengths",
    "fits",
    "longest_first",
    "pack_by_tokens",
    "split_by_tokens",
    "token_batch_bounds",
]


def longest_first(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Indices ordering examples by length, longest first (stable): generation batches of similar lengths
    pad and wait little, and a batch too large for the device fails at once."""
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")


def example_lengths(dataset, columns: Sequence[str] = TOKEN_COLUMNS) -> np.ndarray:
    """Per-example size in tokens, max over ``columns`` (fairseq counts max(source, target) length).

    Reads the list lengths from the Arrow columns directly, so it is fast on memory-mapped corpora with
    millions of rows (no Python loop, no decoding of the token ids).
    """
    import pyarrow.compute as pc

    table = dataset.with_format("arrow")[:] if dataset._indices is not None else dataset.data
    present = [c for c in columns if c in table.column_names]
    if not present:
        raise ValueError(
            f"Cannot size examples: none of the columns {list(columns)} is present (found {table.column_names}). "
            "Tokenize the corpus first."
        )
    sizes = [np.asarray(pc.list_value_length(table.column(c)).to_numpy(zero_copy_only=False)) for c in present]
    return np.maximum.reduce(sizes).astype(np.int64)


def fits(count: int, longest: int, size: int, budget: int) -> bool:
    """The packing rule: whether an example of ``size`` tokens joins a batch of ``count`` examples whose
    longest has ``longest`` tokens under a padded ``budget`` (an empty batch takes any example)."""
    return count == 0 or (count + 1) * max(longest, size) <= budget


def token_batch_bounds(sizes: np.ndarray, budget: int) -> np.ndarray:
    """Batch boundaries of the greedy packing (:func:`fits`) of ``sizes``, sorted ascending and each >= 1.

    Batch b holds sorted positions ``bounds[b]:bounds[b + 1]``. Works run by run over the distinct lengths
    (a few hundred at most) rather than example by example, so packing 10 M examples takes a fraction of a
    second; the result is the same greedy packing. An example longer than ``budget`` gets a batch of its own.
    """
    values, run_lengths = np.unique(sizes, return_counts=True)
    ends: list[np.ndarray] = []
    position, open_count = 0, 0  # examples placed so far; size of the batch still open
    for value, run in zip(values.tolist(), run_lengths.tolist()):
        capacity = max(budget // value, 1)
        if open_count > capacity:  # the open batch cannot take a longer example: close it
            ends.append(np.array([position]))
            open_count = 0
        take = min(capacity - open_count, run)
        position, open_count, run = position + take, open_count + take, run - take
        if open_count == capacity:
            ends.append(np.array([position]))
            open_count = 0
        full, rest = divmod(run, capacity)
        if full:
            ends.append(position + capacity * np.arange(1, full + 1))
            position += capacity * full
        position, open_count = position + rest, open_count + rest
    if open_count:
        ends.append(np.array([position]))
    return np.concatenate([[0]] + ends).astype(np.int64)


@dataclass(frozen=True)
class PackedBatches:
    """Token batches of one corpus: batch b is ``order[bounds[b]:bounds[b + 1]]`` (local indices)."""

    order: np.ndarray
    bounds: np.ndarray

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, b: int) -> np.ndarray:
        return self.order[self.bounds[b] : self.bounds[b + 1]]


def pack_by_tokens(lengths: np.ndarray, budget: int, rng: np.random.Generator) -> PackedBatches:
    """Greedy fairseq-style packing of one corpus: sort by length, fill up to the padded budget. Examples of
    equal length are shuffled with ``rng``, so that batches do not follow the corpus's file order."""
    sizes = np.maximum(lengths, 1)
    # A stable sort of small integers is a radix sort in numpy: linear time.
    order = np.argsort(sizes.astype(np.uint16) if sizes.max() < 2**16 else sizes, kind="stable")
    _, run_lengths = np.unique(sizes, return_counts=True)
    for start, end in zip(np.cumsum(run_lengths) - run_lengths, np.cumsum(run_lengths)):
        if end - start > 1:
            order[start:end] = order[start:end][rng.permutation(end - start)]
    return PackedBatches(order, token_batch_bounds(sizes, budget))


def draw_token_batch(lengths: np.ndarray, target_tokens: int, rng: np.random.Generator) -> np.ndarray:
    """Random examples (without replacement) until their lengths add up to ``target_tokens``.

    The draw is random, so the reward estimates the whole dev set; the drawn examples are then sorted by
    length, so that splitting them into sub-batches cuts padding without changing which are measured.
    """
    order = rng.permutation(len(lengths))
    count = int(np.searchsorted(np.cumsum(lengths[order]), target_tokens, side="left")) + 1
    chosen = order[: min(count, len(order))]
    return chosen[np.argsort(lengths[chosen], kind="stable")]


def split_by_tokens(indices: np.ndarray, lengths: np.ndarray, max_tokens: int,
                    max_padding: float = 0.25) -> list[np.ndarray]:
    """Split length-sorted ``indices`` into consecutive sub-batches of at most ``max_tokens`` padded tokens, a
    longer example also starting a new one when it would make more than ``max_padding`` of the sub-batch's
    tokens padding.

    A forward pass costs its padded tokens. A dev batch of ~1,000 tokens fits one 4,096-token sub-batch, and
    one long sentence then pads all the others (the small preset's dev batches were 23–56 % real tokens, so a
    Monte Carlo pass cost ~0.4 of a training step). The measures are per sentence and the losses are weighted
    by tokens, so how the examples are grouped changes only which dropout masks they get, as in the authors'
    fairseq batches, which are also sorted by length. An example longer than ``max_tokens`` is a sub-batch of
    its own.
    """
    if len(indices) == 0:
        return [indices]
    sizes = np.maximum(np.asarray(lengths)[indices], 1).tolist()
    chunks, start, real = [], 0, 0
    for i, size in enumerate(sizes):
        padded = (i - start + 1) * size  # sorted: the new example is the longest
        if i > start and (padded > max_tokens or real + size < (1.0 - max_padding) * padded):
            chunks.append(indices[start:i])
            start, real = i, 0
        real += size
    chunks.append(indices[start:])
    return chunks
