"""Training batches over streamed corpora, each batch's corpus drawn from the live p, resumable exactly.

The streamed counterpart of :class:`~uat_hf.sampling.sampler.CorpusBatchSampler`, with the same contract towards the
rest of the library: it reads p from the :class:`~uat_hf.sampling.distribution.CorpusDistribution` (its one owner)
before every batch, p is a share of training *examples* (a batch's corpus is drawn from ``q_n ∝ p_n / e_n``,
:mod:`uat_hf.sampling.batch_choice`), and its state goes into every checkpoint.

**Batches.** Each corpus fills a bounded buffer of ``buffer_examples`` examples from its stream, sorts them by length
and packs them greedily under the token budget (fairseq's ``--max_tokens``,
:func:`~uat_hf.sampling.packing.pack_by_tokens`; or ``batch_size`` examples of similar length), then hands the batches
out in a seeded random order; an exhausted stream starts over (another pass). Memory is bounded by the buffers,
whatever the corpus size. ``e_n``, the mean examples per batch that turns p into batch probabilities, is measured on
the first 2,000 examples (at most a buffer) of the *whole* stream, so that it is the same on every rank and in a
resumed run.

**Processes.** Every rank draws the same corpus for the same global batch position (the uniform of position g comes
from a generator seeded by ``(seed, g)``, and p moves identically on every rank), and accelerate's batch-sampler shard
keeps positions ``g ≡ rank (mod world)``. Each rank reads its own part of every stream
(``datasets.distributed.split_dataset_by_node``: whole files when their number divides by the processes, else every
``world``-th example), and builds only its own positions' batches; the others are empty placeholders, never read.

**Resume.** The DataLoader draws ahead of training, so the state kept is the one at the position training has
reached (``steps_done × batches_per_step``, set by the callback before a save): per corpus the stream's
``state_dict()`` where its current buffer began, the pass and buffer counts and the batches already taken from the
buffer, and the mixes of the positions drawn ahead (a p update made while they were prefetched must not reach them
on resume). Loading re-reads that buffer and packs it identically; as with map-style corpora the Trainer then skips
the batches already trained (``skip_first_batches``, before its RNG state is restored), which the sampler passes as
empty placeholders without reading anything, and training continues with the same next batch. The state is per rank
(each reads another shard), saved beside the checkpoint's other per-rank files.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np
import torch

from ..utils.columns import TOKEN_COLUMNS
from .batch_choice import batch_choice_probabilities, pick_corpus
from .distribution import CorpusDistribution
from .packing import pack_by_tokens

__all__ = ["StreamBatchSampler", "StreamedExamples"]

STATE_VERSION = 1
#: Examples of each stream packed to measure its mean examples per batch: enough for a mean, few to read at start.
_SIZING_EXAMPLES = 2_000
#: Positions whose state is remembered: far more than any DataLoader draws ahead of training.
_REMEMBERED_POSITIONS = 4096


class StreamedExamples(torch.utils.data.Dataset):
    """The DataLoader's dataset under a :class:`StreamBatchSampler`: the sampler yields the examples themselves
    (streams have no index to look up), which this hands to the collator unchanged."""

    def __getitem__(self, example: dict) -> dict:
        return example

    def __getitems__(self, examples: list[dict]) -> list[dict]:
        return list(examples)


class _CorpusBuffer:
    """One corpus's stream (this rank's shard), read a buffer at a time into length-sorted batches."""

    def __init__(
        self, name: str, index: int, stream: Any, batching: tuple[int | None, int | None], buffer: int, seed: int
    ) -> None:
        self.name, self.index, self.stream = name, index, stream
        self.max_tokens, self.batch_size = batching
        self.buffer, self.seed = buffer, seed
        self.initial = copy.deepcopy(stream.state_dict())
        self._start = self.initial  # where the next iterator starts
        self._iterator: Iterator[dict] | None = None
        self.cycle = 0  # passes through the stream begun
        self.fills = 0  # buffers filled so far
        self.buffer_start: tuple[int, dict] = (0, self.initial)  # (pass, stream state) where the current buffer began
        self.batches: list[list[dict]] = []
        self.taken = 0

    def next_batch(self) -> list[dict]:
        if self.taken == len(self.batches):
            self._fill()
        self.taken += 1
        return self.batches[self.taken - 1]

    def _fill(self) -> None:
        state = copy.deepcopy(self.stream.state_dict()) if self._iterator is not None else self._start
        self.buffer_start = (self.cycle, state)
        examples: list[dict] = []
        empty_pass = True
        while len(examples) < self.buffer:
            if self._iterator is None:
                self.stream.load_state_dict(self._start)
                self._iterator = iter(self.stream)
            example = next(self._iterator, None)
            if example is None:  # end of this pass: start the next one
                if empty_pass and not examples:
                    raise ValueError(
                        f"Streamed corpus {self.name!r} yields no training example (after cleaning); "
                        "check its files and filters."
                    )
                self.cycle, self._start, self._iterator, empty_pass = self.cycle + 1, self.initial, None, True
                continue
            empty_pass = False
            examples.append(example)
        self.fills += 1
        rng = np.random.default_rng([self.seed, 7, self.index, self.fills])
        self.batches = [
            [examples[i] for i in batch] for batch in pack_examples(examples, self.max_tokens, self.batch_size, rng)
        ]
        self.taken = 0

    def position(self) -> tuple:
        return (self.buffer_start, self.fills, self.taken)

    def restore(self, cycle: int, stream_state: dict, fills: int, taken: int) -> None:
        """Back to a :meth:`position`: the buffer that began there is read and packed again (none yet: fresh)."""
        self._start, self._iterator, self.cycle, self.fills = stream_state, None, int(cycle), int(fills) - 1
        self.buffer_start, self.batches, self.taken = (self.cycle, stream_state), [], 0
        if fills > 0:
            self._fill()
            self.taken = int(taken)


def pack_examples(
    examples: Sequence[Mapping], max_tokens: int | None, batch_size: int | None, rng: np.random.Generator
) -> list[np.ndarray]:
    """Batches (indices into ``examples``) of similar lengths, in random order: packed under ``max_tokens`` padded
    tokens (an example counting max(source, target) tokens), or ``batch_size`` examples each."""
    lengths = np.array([max(len(e["input_ids"]), len(e["labels"])) for e in examples], dtype=np.int64)
    if max_tokens is not None:
        packed = pack_by_tokens(lengths, max_tokens, rng)
        batches = [packed[b] for b in range(len(packed))]
    else:
        order = np.argsort(lengths, kind="stable")
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    return [batches[b] for b in rng.permutation(len(batches))]


class StreamBatchSampler(torch.utils.data.Sampler[list[dict]]):
    """Endless batches over named streamed corpora, each batch's corpus drawn from the live p.

    Args:
        streams: name → tokenized ``datasets.IterableDataset`` (the whole stream; this rank's shard is taken here).
        distribution: the :class:`~uat_hf.sampling.distribution.CorpusDistribution` over the same names.
        max_tokens: token budget per batch (padding counted); or ``batch_size`` examples per batch.
        buffer_examples: examples read into each corpus's buffer and packed together.
        seed: the same on every rank.
        process_index, num_processes: this rank and the number of processes.
    """

    batch_size = None
    drop_last = False
    #: Each rank keeps its own state (its shard's positions): saved per rank.
    per_rank_state = True

    def __init__(
        self,
        streams: Mapping[str, Any],
        distribution: CorpusDistribution,
        *,
        max_tokens: int | None = None,
        batch_size: int | None = None,
        buffer_examples: int = 10_000,
        seed: int = 0,
        process_index: int = 0,
        num_processes: int = 1,
    ) -> None:
        if (max_tokens is None) == (batch_size is None):
            raise ValueError("Give exactly one of max_tokens (token budget) or batch_size (examples per batch).")
        if buffer_examples < 1:
            raise ValueError(f"stream_buffer_examples must be >= 1, got {buffer_examples}.")
        self.names: list[str] = list(streams)
        if distribution.names != self.names:
            raise ValueError(f"The distribution is over corpora {distribution.names}, the streams are {self.names}.")
        self.distribution = distribution
        self.max_tokens, self.examples_per_batch = max_tokens, batch_size
        self.buffer_examples, self.seed = int(buffer_examples), int(seed)
        self.process_index, self.num_processes = int(process_index), int(num_processes)
        #: Mean examples per batch of each corpus, measured on the first examples of its whole stream.
        self.examples_per_corpus_batch = np.array([self._examples_per_batch(n, s) for n, s in streams.items()])
        if num_processes > 1:
            from datasets.distributed import split_dataset_by_node

            streams = {n: split_dataset_by_node(s, self.process_index, self.num_processes) for n, s in streams.items()}
        self._buffers = [
            _CorpusBuffer(n, i, s, (max_tokens, batch_size), self.buffer_examples, self.seed)
            for i, (n, s) in enumerate(streams.items())
        ]
        self.position = 0  # the next global batch position to draw
        self.batches_per_step = 1  # batches of one optimizer step over all ranks, set by the trainer's callback
        #: Optimizer steps training has done, set by the callback before a save (``None``: what was drawn).
        self.steps_done: int | None = None
        self._history: deque[tuple[int, tuple, np.ndarray]] = deque(maxlen=_REMEMBERED_POSITIONS)
        self._replay: dict[int, np.ndarray] = {}  # mixes of positions drawn ahead before a save, for a resume
        self._resumed = False

    def _examples_per_batch(self, name: str, stream: Any) -> float:
        count = min(self.buffer_examples, _SIZING_EXAMPLES)
        examples = list(islice(iter(stream.take(count)), count))
        if not examples:
            raise ValueError(
                f"Streamed corpus {name!r} yields no training example (after cleaning); check its files and filters."
            )
        missing = [c for c in TOKEN_COLUMNS if c not in examples[0]]
        if missing:
            raise ValueError(
                f"Streamed corpus {name!r} lacks the column(s) {missing} (has {list(examples[0])}); "
                "tokenize it first (uat_hf.data.streams.prepare_stream)."
            )
        rng = np.random.default_rng([self.seed, 8])
        return len(examples) / len(pack_examples(examples, self.max_tokens, self.examples_per_batch, rng))

    @property
    def probabilities(self) -> np.ndarray:
        return self.distribution.probabilities

    def set_epoch(self, epoch: int, first_step: int | None = None) -> None:
        """Streams have no epochs: a corpus starts over when it ends, and the batch sequence runs on."""

    def __iter__(self) -> Iterator[list[dict]]:
        if self._resumed:  # the Trainer skips the batches already trained (skip_first_batches): passed unread
            self._resumed = False
            yield from ([] for _ in range(self.position))
        while True:
            g = self.position
            mix = self._replay.pop(g, None)
            mix = self.distribution.probabilities if mix is None else mix
            self._history.append((g, tuple(b.position() for b in self._buffers), mix))
            q = batch_choice_probabilities(mix, self.examples_per_corpus_batch, mix_corpora=False)
            corpus = pick_corpus(np.cumsum(q), np.random.default_rng([self.seed, 0, g]).random())
            self.position = g + 1
            yield self._buffers[corpus].next_batch() if g % self.num_processes == self.process_index else []

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """This rank's state at the position training reached (JSON-serialisable)."""
        reached = self.position if self.steps_done is None else self.steps_done * self.batches_per_step
        drawn = {g: (positions, mix) for g, positions, mix in self._history}
        if reached < self.position and reached not in drawn:
            raise RuntimeError(
                f"The stream sampler no longer remembers batch position {reached} (it drew up to "
                f"{self.position}); save more often than every {_REMEMBERED_POSITIONS} batches."
            )
        positions = drawn[reached][0] if reached < self.position else tuple(b.position() for b in self._buffers)
        return {
            "version": STATE_VERSION,
            "corpora": self.names,
            "max_tokens": self.max_tokens,
            "batch_size": self.examples_per_batch,
            "buffer_examples": self.buffer_examples,
            "seed": self.seed,
            "process_index": self.process_index,
            "num_processes": self.num_processes,
            "examples_per_corpus_batch": self.examples_per_corpus_batch.tolist(),
            "position": reached,
            "streams": {
                b.name: {"pass": start[0], "state": start[1], "fills": fills, "taken": taken}
                for b, (start, fills, taken) in zip(self._buffers, positions)
            },
            "drawn_ahead": [drawn[g][1].tolist() for g in range(reached, self.position)],
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore this rank's :meth:`state_dict`: the same corpora, batching, seed and processes are required."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"Unsupported stream sampler state version {state.get('version')!r} (expected {STATE_VERSION})."
            )
        for key, mine in (
            ("corpora", self.names),
            ("max_tokens", self.max_tokens),
            ("batch_size", self.examples_per_batch),
            ("buffer_examples", self.buffer_examples),
            ("seed", self.seed),
            ("num_processes", self.num_processes),
            ("process_index", self.process_index),
        ):
            if state[key] != mine:
                raise ValueError(
                    f"The saved stream sampler state has {key}={state[key]!r} but this run has {mine!r}; "
                    "resume streamed corpora with the same corpora, batching, seed and processes."
                )
        saved = np.asarray(state["examples_per_corpus_batch"], dtype=np.float64)
        if not np.array_equal(saved, self.examples_per_corpus_batch):
            raise ValueError(
                f"The streams' first batches hold {self.examples_per_corpus_batch.tolist()} examples on "
                f"average, the checkpoint's {saved.tolist()}: the corpus files, filters or tokenizer "
                "changed; resume with the same ones."
            )
        for buffer in self._buffers:
            saved_stream = state["streams"][buffer.name]
            buffer.restore(saved_stream["pass"], saved_stream["state"], saved_stream["fills"], saved_stream["taken"])
        self.position = int(state["position"])
        self._replay = {
            self.position + k: np.asarray(mix, dtype=np.float64) for k, mix in enumerate(state["drawn_ahead"])
        }
        self._history.clear()
        self.steps_done = None
        self._resumed = True
