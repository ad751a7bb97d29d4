"""Which corpus, and which of its examples, each training batch holds.

``datasets.interleave_datasets`` fixes the mixing probabilities when called, so a balancer that re-learns them
owns the sampling: :class:`CorpusBatchSampler`, over N concatenated corpora, draws each batch's corpus *lazily* from
the live p (paper, Algorithm 1), read from a :class:`~uat_hf.sampling.distribution.CorpusDistribution` (its owner)
before every batch.

**Prefetch lag.** The DataLoader asks for batches ahead of the training step (``num_workers * prefetch_factor``
with workers, and accelerate's ``DataLoaderShard`` one more), so a new p reaches training after at most that many
batches (1–2 with ``dataloader_num_workers=0``); where it took effect is recorded, so a replay is exact. With
instance-level mixing, a new vector takes effect from the next pool of ``mix_pool_batches`` batches.

**Planned mixes** escape the lag: told the steps done when the epoch began (``set_epoch(epoch, first_step)``) and
the batches per optimizer step (``batches_per_step``: accumulation × processes), batch k is drawn with the
distribution's ``planned_mix`` for step ``first_step + k // batches_per_step + 1`` (mixing-law's probe windows; p
for others), and each step's examples per corpus are reported (``drawn``). The schedule then records p, not the mix.

**What p is a share of: training examples**, in both batching modes. With one corpus per batch the
sampler draws a batch's corpus from ``q_n ∝ p_n / e_n`` (e_n: corpus n's mean examples per batch) so that
the expected share of examples is p; :mod:`uat_hf.sampling.batch_choice` holds that conversion and says why.

**What an epoch is.** ``len(sampler)`` batches: as many as one pass over every corpus makes (the sum of
the corpora's batch counts). Which corpora fill them follows p, so within an epoch a corpus may be seen
more than once (its examples are reshuffled each time it is exhausted) or only in part. Each corpus keeps
its own shuffled stream of batches; the batches are built once (token budget: examples sorted by length and
packed greedily, fairseq style, :mod:`uat_hf.sampling.packing`) and their order is reshuffled per epoch and per pass
through the corpus.

**Determinism.** An epoch's batch sequence is a pure function of (seed, epoch, probability schedule):
the uniform draws that pick corpora and the per-corpus shuffles come from generators seeded by
``(seed, epoch, ...)`` and do not depend on p. Every rank under ``accelerate`` therefore draws the same
sequence as long as it receives the same probabilities at the same point, and keeps its own slice.

**Resume.** :meth:`state_dict` holds the epoch, the probabilities it started with and every change with
the batch position where it took effect. After :meth:`load_state_dict`, iterating replays the saved epoch
from its start with the same changes at the same positions, so skipping the batches already trained (what
the Trainer does with ``skip_first_batches``) continues the exact sequence; new changes apply from there.
As with ``DistributedSampler``, ``set_epoch`` selects the epoch; without it, each completed pass moves on
to the next epoch by itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch_choice import batch_choice_probabilities, mean_examples_per_batch, pick_corpus
from .distribution import CorpusDistribution
from .packing import PackedBatches, example_lengths, fits, pack_by_tokens, token_batch_bounds
from .priors import temperature_prior, validate_probabilities

# 2: records mix_pool_batches; 3: p belongs to the distribution (the sampler records what it saw); 4: p is a share
# of examples (one corpus per batch: batch corpora drawn from p / examples per batch), so a version-3 epoch replays
# differently.
STATE_VERSION = 4


@dataclass(frozen=True)
class _Change:
    position: int
    probabilities: np.ndarray


class CorpusBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches over N concatenated corpora, each batch's corpus drawn from live probabilities.

    Batches vary in size, so ``batch_size`` is ``None``: that is how accelerate's ``BatchSamplerShard``
    learns not to treat a short batch as the incomplete last one.

    Args:
        lengths: per corpus (in concatenation order), the token size of every example. Yielded indices are
            global: ``offsets[name] + local index``, matching ``datasets.concatenate_datasets`` in this order.
        distribution: where p, each corpus's share of the training examples, is read from before every batch:
            a :class:`~uat_hf.sampling.distribution.CorpusDistribution` over the same corpora, or fixed probabilities
            (default: proportional to size, so every example is seen equally often).
        max_tokens: token budget per batch, padding counted (``len(batch) * max(size)``); examples of similar
            length are grouped. Mutually exclusive with ``batch_size``.
        batch_size: examples per batch, when no token budget is given.
        mix_corpora: instance-level mixing: the corpus is drawn per example, so a batch mixes corpora.
        mix_pool_batches: with ``mix_corpora``, batches are drawn this many at a time and their examples
            re-batched sorted by length (1: no grouping). A probability change takes effect from the next pool.
        seed: base seed; every rank must use the same one.
    """

    batch_size = None
    drop_last = False

    def __init__(
        self,
        lengths: Mapping[str, Sequence[int] | np.ndarray],
        distribution: CorpusDistribution | Sequence[float] | None = None,
        *,
        max_tokens: int | None = None,
        batch_size: int | None = None,
        mix_corpora: bool = False,
        mix_pool_batches: int = 1,
        seed: int = 0,
    ) -> None:
        if not lengths:
            raise ValueError("CorpusBatchSampler needs at least one corpus, got none.")
        if (max_tokens is None) == (batch_size is None):
            raise ValueError("Give exactly one of max_tokens (token budget) or batch_size (examples per batch).")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if mix_pool_batches < 1:
            raise ValueError(f"mix_pool_batches must be >= 1, got {mix_pool_batches}.")
        self.names: list[str] = list(lengths)
        self.lengths = [np.asarray(lengths[name], dtype=np.int64) for name in self.names]
        self.sizes = np.array([len(x) for x in self.lengths], dtype=np.int64)
        for name, size in zip(self.names, self.sizes):
            if size == 0:
                raise ValueError(f"Corpus {name!r} is empty; remove it or check its data files and filters.")
        if max_tokens is not None:
            if max_tokens < 1:
                raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
            for name, sizes in zip(self.names, self.lengths):
                longest = int(sizes.max())
                if longest > max_tokens:
                    raise ValueError(
                        f"max_tokens={max_tokens} is smaller than the longest example of corpus {name!r} "
                        f"({longest} tokens at index {int(sizes.argmax())}); raise max_tokens or lower the maximum "
                        "sequence length."
                    )
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.max_tokens = max_tokens
        self.examples_per_batch = batch_size
        self.mix_corpora = mix_corpora
        self.mix_pool_batches = int(mix_pool_batches)
        self.seed = int(seed)
        # Token-budget batches are built once (local indices); example-count batches per pass (cheap).
        self._token_batches = (
            [self._pack_by_tokens(i) for i in range(len(self.names))] if max_tokens is not None else None
        )
        self._epoch_length = int(sum(self._num_corpus_batches(i) for i in range(len(self.names))))
        #: Mean examples per batch of each corpus: converts p into batch probabilities (:mod:`.batch_choice`).
        self.examples_per_corpus_batch = mean_examples_per_batch(
            self.sizes, [self._num_corpus_batches(i) for i in range(len(self.names))])

        if not isinstance(distribution, CorpusDistribution):
            p = temperature_prior(self.sizes, 1.0) if distribution is None else distribution
            distribution = CorpusDistribution(self.names, p)
        elif distribution.names != self.names:
            raise ValueError(f"The distribution is over corpora {distribution.names}, the sampler's are {self.names}.")
        self.distribution = distribution
        self.epoch = 0
        self._epoch_start_probabilities = distribution.probabilities
        self._seen_version = distribution.version
        self._schedule: list[_Change] = []
        self._started = False
        self._complete = False
        self._drawn = 0
        self._first_step: int | None = None  # optimizer steps done when this epoch began (None: not told)
        self.batches_per_step = 1  # batches of one optimizer step over all ranks, set by the trainer

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_datasets(cls, corpora: Mapping[str, object],
                      distribution: CorpusDistribution | Sequence[float] | None = None, **kwargs,
                      ) -> CorpusBatchSampler:
        """Build from tokenized ``datasets.Dataset``s (default p: proportional to size)."""
        return cls({name: example_lengths(dataset) for name, dataset in corpora.items()}, distribution, **kwargs)

    def _pack_by_tokens(self, corpus: int) -> PackedBatches:
        """Greedy fairseq-style packing of one corpus (:func:`~uat_hf.sampling.packing.pack_by_tokens`)."""
        return pack_by_tokens(self.lengths[corpus], self.max_tokens, np.random.default_rng([self.seed, 7, corpus]))

    def _num_corpus_batches(self, corpus: int) -> int:
        if self._token_batches is not None:
            return len(self._token_batches[corpus])
        return math.ceil(int(self.sizes[corpus]) / self.examples_per_batch)

    # ------------------------------------------------------------------ probabilities
    @property
    def probabilities(self) -> np.ndarray:
        """The live distribution over corpora (a copy of the distribution's p)."""
        return self.distribution.probabilities

    def batch_probabilities(self, p: np.ndarray | None = None) -> np.ndarray:
        """The probability that a batch is drawn from each corpus, for example shares ``p`` (default: live p):
        :func:`~uat_hf.sampling.batch_choice.batch_choice_probabilities` with this sampler's examples per batch."""
        p = self.probabilities if p is None else p
        return batch_choice_probabilities(p, self.examples_per_corpus_batch, mix_corpora=self.mix_corpora)

    def _live(self) -> np.ndarray:
        """What the schedule records: the sampled mix, or with planned mixes p itself (each step's mix is derived)."""
        return self.distribution.probabilities if self._first_step is None else self.distribution.p

    def _sync(self) -> None:
        """Take a change of p made since the last batch: from the next batch on (position ``_drawn``)."""
        if self.distribution.version == self._seen_version:
            return
        if self.distribution.version < self._seen_version:
            raise RuntimeError(
                f"The sampler has seen version {self._seen_version} of p but its distribution is at version "
                f"{self.distribution.version}: restore the distribution from the same checkpoint as the sampler."
            )
        self._seen_version = self.distribution.version
        p = self._live()
        if not self._started:
            self._epoch_start_probabilities = p
        elif not self._complete:
            # A change behind the current position would rewrite history: drop the abandoned future.
            self._schedule = [c for c in self._schedule if c.position < self._drawn]
            self._schedule.append(_Change(self._drawn, p))

    def set_epoch(self, epoch: int, first_step: int | None = None) -> None:
        """Select the epoch the next iteration draws; the same epoch again means an exact replay. ``first_step``:
        the optimizer steps done when the epoch begins (planned mixes); kept from the checkpoint once it started."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self._begin_epoch(epoch)
        else:
            self._complete = False
        if first_step is not None and not self._started:
            self._first_step = int(first_step)
            self._epoch_start_probabilities = self._live()

    def _begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._epoch_start_probabilities = self.distribution.probabilities
        self._seen_version = self.distribution.version
        self._schedule = []
        self._started = False
        self._complete = False
        self._drawn = 0
        self._first_step = None

    # ------------------------------------------------------------------ iteration
    def __len__(self) -> int:
        return self._epoch_length

    def _corpus_stream(self, corpus: int) -> Iterator[np.ndarray]:
        """Endless shuffled batches (local indices) of one corpus; reshuffled on every pass."""
        for cycle in range(2**62):
            rng = np.random.default_rng([self.seed, self.epoch, 1, corpus, cycle])
            if self._token_batches is not None:
                batches = self._token_batches[corpus]
                for b in rng.permutation(len(batches)):
                    yield batches[b]
            else:
                order = rng.permutation(int(self.sizes[corpus]))
                for start in range(0, len(order), self.examples_per_batch):
                    yield order[start : start + self.examples_per_batch]

    def _example_stream(self, corpus: int) -> Iterator[int]:
        """Endless shuffled examples of one corpus (instance-level mixing)."""
        for cycle in range(2**62):
            rng = np.random.default_rng([self.seed, self.epoch, 2, corpus, cycle])
            yield from rng.permutation(int(self.sizes[corpus])).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        if self._complete:
            self._begin_epoch(self.epoch + 1)
        self._sync()
        self._started = True
        self._drawn = 0  # batches yielded so far in this pass: where a new probability vector takes effect
        uniforms = np.random.default_rng([self.seed, self.epoch, 0])
        p = self._epoch_start_probabilities
        next_change = 0
        if self.mix_corpora:
            streams = [self._example_stream(i) for i in range(len(self.names))]
            pool: list[list[int]] = []  # mixed batches not yet yielded, next one last
            pending: tuple[int, int] | None = None  # (index, size) of an example that did not fit its batch
        else:
            streams = [self._corpus_stream(i) for i in range(len(self.names))]
        counts, step = np.zeros(len(self.names)), None  # examples drawn per corpus for the step (planned mixes)
        for position in range(self._epoch_length):
            self._sync()
            while next_change < len(self._schedule) and self._schedule[next_change].position <= position:
                p = self._schedule[next_change].probabilities
                next_change += 1
            if self._first_step is not None:
                step = self._first_step + position // self.batches_per_step + 1
            mix = p if step is None else self.distribution.planned_mix(p, step)
            cumulative = np.cumsum(self.batch_probabilities(mix))
            if not self.mix_corpora:
                corpus = pick_corpus(cumulative, uniforms.random())
                batch = (next(streams[corpus]) + self.offsets[corpus]).tolist()
            else:
                if not pool:
                    pool, pending = self._mixed_pool(cumulative, streams, uniforms, pending)
                batch = pool.pop()
            self._drawn = position + 1
            if step is not None:
                np.add.at(counts, np.searchsorted(self.offsets, batch, side="right") - 1, 1)
                if (position + 1) % self.batches_per_step == 0:
                    self.distribution.drawn(step, counts)
                    counts[:] = 0
            yield batch
        if step is not None and counts.any():  # the epoch's last step, short of batches
            self.distribution.drawn(step, counts)
        self._complete = True

    def _mixed_pool(self, cumulative: np.ndarray, streams: list[Iterator[int]], uniforms: np.random.Generator,
                    pending: tuple[int, int] | None) -> tuple[list[list[int]], tuple[int, int] | None]:
        """The next ``mix_pool_batches`` mixed batches, to be popped from the end, and the example left over.

        Examples, each from a corpus drawn from p, fill a batch until the next does not fit. A random set pads to its
        longest (57 % padding of a 2,000-token budget on the demo data), so a pool of several batches is re-batched
        by length (HF's ``group_by_length``): 12 % with 16 batches, but each batch's corpora are more alike.
        """
        batches: list[list[int]] = []
        sizes: list[int] = []  # of the drawn examples, in drawn order
        for _ in range(self.mix_pool_batches):
            batch: list[int] = []
            longest = 0
            while True:
                if pending is None:
                    corpus = pick_corpus(cumulative, uniforms.random())
                    local = next(streams[corpus])
                    pending = (int(local + self.offsets[corpus]), max(int(self.lengths[corpus][local]), 1))
                index, size = pending
                if self.max_tokens is not None:
                    if not fits(len(batch), longest, size, self.max_tokens):
                        break
                elif len(batch) == self.examples_per_batch:
                    break
                batch.append(index)
                sizes.append(size)
                longest = max(longest, size)
                pending = None
            batches.append(batch)
        if self.mix_pool_batches > 1:
            batches = self._regroup_by_length([i for batch in batches for i in batch], sizes, uniforms)
        return batches[::-1], pending

    def _regroup_by_length(self, indices: list[int], sizes: list[int],
                           uniforms: np.random.Generator) -> list[list[int]]:
        """Batches of ``indices`` sorted by length, in shuffled order (lengths do not rise through a pool)."""
        order = np.argsort(sizes, kind="stable")  # ties keep their drawn order
        if self.max_tokens is not None:
            bounds = token_batch_bounds(np.asarray(sizes), self.max_tokens)
        else:
            bounds = np.append(np.arange(0, len(order), self.examples_per_batch), len(order))
        batches = [[indices[i] for i in order[start:end]] for start, end in zip(bounds[:-1], bounds[1:])]
        return [batches[b] for b in uniforms.permutation(len(batches))]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """JSON-serialisable state: enough to replay the current epoch exactly and continue (p itself is
        the distribution's; the sampler keeps where each change it saw took effect)."""
        self._sync()
        return {
            "version": STATE_VERSION,
            "corpora": dict(zip(self.names, self.sizes.tolist())),
            "max_tokens": self.max_tokens,
            "batch_size": self.examples_per_batch,
            "mix_corpora": self.mix_corpora,
            "mix_pool_batches": self.mix_pool_batches,
            "seed": self.seed,
            "epoch": self.epoch,
            "started": self._started,
            "complete": self._complete,
            "seen_version": self._seen_version,
            "epoch_start_probabilities": self._epoch_start_probabilities.tolist(),
            "schedule": [[c.position, c.probabilities.tolist()] for c in self._schedule],
            "first_step": self._first_step,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a :meth:`state_dict`; the corpora and batching must be the ones it was saved with."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"Unsupported sampler state version {state.get('version')!r} (expected {STATE_VERSION}).")
        saved = dict(state["corpora"])
        current = dict(zip(self.names, self.sizes.tolist()))
        if saved != current:
            raise ValueError(
                f"The saved sampler state is for corpora {saved} but this sampler has {current}; resume with the "
                "same corpora, filters and tokenizer."
            )
        for key, attribute in (("max_tokens", "max_tokens"), ("batch_size", "examples_per_batch"),
                               ("mix_corpora", "mix_corpora"), ("mix_pool_batches", "mix_pool_batches"),
                               ("seed", "seed")):
            if state[key] != getattr(self, attribute):
                raise ValueError(
                    f"The saved sampler state has {key}={state[key]!r} but this sampler has "
                    f"{getattr(self, attribute)!r}; resume with the same batching settings and seed."
                )
        self.epoch = int(state["epoch"])
        self._started = bool(state["started"])
        self._complete = bool(state["complete"])
        self._seen_version = int(state["seen_version"])
        self._epoch_start_probabilities = self._saved_probabilities(state["epoch_start_probabilities"])
        self._schedule = [_Change(int(position), self._saved_probabilities(p)) for position, p in state["schedule"]]
        self._first_step = None if state.get("first_step") is None else int(state["first_step"])
        self._drawn = 0

    def _saved_probabilities(self, values: Sequence[float]) -> np.ndarray:
        """Checked but not renormalised: dividing by a sum that is 1 only to rounding moves the last bit."""
        validate_probabilities(values, self.names)
        return np.asarray(values, dtype=np.float64)

