"""CorpusBatchSampler at scale: 100 corpora, 10 M examples in memory-mapped Arrow datasets.

Measures the time from memory-mapped datasets to the first batch (reading lengths, packing token
batches, first draw), the sampler's throughput in batches per second, and its share of a training step
(sampler time per batch divided by the measured time of one optimizer step of the small preset).

Prints a table and, last, ``sampler_step_share_percent=<x>``.

With ``--streams N [N ...]`` it measures :class:`~uat_hf.sampling.stream_batches.StreamBatchSampler` instead, over N
streamed corpora of already tokenized examples (``Dataset.to_iterable_dataset`` of the same synthetic Arrow data, so
that the stream's reading, not tokenization, is what is timed): the time to the first batch (each stream's first
2,000 examples are packed at construction to size its batches, then the first buffer is read and packed), the
batches and examples per second over ``--draws`` batches, and the sampler's share of a training step. Prints
``stream_sampler_batches_per_second_<N>=<x>`` per N.

    python benchmarks/sampler_scale.py [--corpora 100] [--examples 10000000] [--max-tokens 4096]
    python benchmarks/sampler_scale.py --streams 4 64 [--examples 1000000] [--draws 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset, load_from_disk

from uat_hf.sampling.sampler import CorpusBatchSampler
from uat_hf.sampling.stream_batches import StreamBatchSampler
from uat_hf.strategies.registry import build_distribution


def synthetic_corpus(rng: np.random.Generator, size: int, vocab: int = 8000) -> Dataset:
    """Token-id lists with a realistic length spread (2–120 tokens), built column-wise with Arrow."""
    columns = {}
    for column, mean in (("input_ids", 28), ("labels", 30)):
        lengths = np.clip(rng.gamma(2.0, mean / 2.0, size).astype(np.int32), 2, 120)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = rng.integers(3, vocab, offsets[-1], dtype=np.int32)
        columns[column] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    return Dataset(pa.table(columns))


def training_step_seconds(max_tokens: int, steps: int = 3) -> float:
    """Seconds per optimizer step of the 'small' preset on a batch of ``max_tokens`` padded tokens.

    The model is the one ``uat-train`` builds for ``model_name_or_path: small``: a joint BPE vocabulary of
    8,000 tokens trained on the bundled sample, then :func:`~uat_hf.models.presets.build_model`."""
    from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpus_split
    from uat_hf.data.tokenization import train_joint_tokenizer
    from uat_hf.models.presets import build_model

    specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de")
    tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=8000)
    model = build_model("small", tokenizer)
    vocab = len(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rows, width = max_tokens // 32, 32
    batch = {"input_ids": torch.randint(3, vocab, (rows, width)), "labels": torch.randint(3, vocab, (rows, width))}
    model.train()
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


def zipf_sizes(corpora: int, examples: int) -> np.ndarray:
    """A few huge corpora and a long tail, like real multilingual data (at least 100 examples each)."""
    weights = 1.0 / np.arange(1, corpora + 1)
    return np.maximum((weights / weights.sum() * examples).astype(int), 100)


def stream_sampler(corpora: int, examples: int, max_tokens: int, draws: int, step: float) -> dict[str, float]:
    """One row of the streamed table: ``corpora`` streams over ``examples`` examples in all."""
    rng = np.random.default_rng(0)
    sizes = zipf_sizes(corpora, examples)
    streams = {f"c{i}": synthetic_corpus(rng, int(size)).to_iterable_dataset() for i, size in enumerate(sizes)}
    start = time.perf_counter()
    distribution = build_distribution("temperature", {n: int(s) for n, s in zip(streams, sizes)})
    sampler = StreamBatchSampler(streams, distribution, max_tokens=max_tokens, seed=0)
    constructed = time.perf_counter() - start
    iterator = iter(sampler)
    next(iterator)
    first_batch = time.perf_counter() - start
    start, drawn = time.perf_counter(), 0
    for _ in range(draws):
        drawn += len(next(iterator))
    seconds = time.perf_counter() - start
    return {"corpora": corpora, "examples": int(sizes.sum()), "sizing": constructed, "first_batch": first_batch,
            "batches_per_second": draws / seconds, "examples_per_second": drawn / seconds,
            "step_share": 100.0 * seconds / draws / step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", type=int, default=100)
    parser.add_argument("--examples", type=int, default=None, help="default: 10M (1M with --streams)")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--draws", type=int, default=None, help="default: 50,000 (2,000 with --streams)")
    parser.add_argument("--streams", type=int, nargs="+", default=None,
                        help="measure the streamed sampler over this many corpora instead")
    options = parser.parse_args()
    if options.streams:
        step = training_step_seconds(options.max_tokens)
        rows = [stream_sampler(n, options.examples or 1_000_000, options.max_tokens, options.draws or 2_000, step)
                for n in options.streams]
        print(f"max_tokens {options.max_tokens}, buffer 10,000 examples per corpus; training step of the small "
              f"preset {step:.3f} s")
        print(f"{'streams':>7} {'examples':>10} {'sizing s':>9} {'1st batch s':>11} {'batches/s':>10} "
              f"{'examples/s':>11} {'share of a step %':>17}")
        for r in rows:
            print(f"{r['corpora']:>7} {r['examples']:>10,} {r['sizing']:>9.2f} {r['first_batch']:>11.2f} "
                  f"{r['batches_per_second']:>10.0f} {r['examples_per_second']:>11.0f} {r['step_share']:>17.3f}")
        for r in rows:
            print(f"stream_sampler_batches_per_second_{r['corpora']}={r['batches_per_second']:.0f}")
        return
    options.examples = options.examples or 10_000_000
    options.draws = options.draws or 50_000

    rng = np.random.default_rng(0)
    sizes = zipf_sizes(options.corpora, options.examples)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        for i, size in enumerate(sizes):
            synthetic_corpus(rng, int(size)).save_to_disk(str(Path(tmp) / f"c{i}"), max_shard_size="2GB")
        build_seconds = time.perf_counter() - start
        corpora = {f"c{i}": load_from_disk(str(Path(tmp) / f"c{i}")) for i in range(options.corpora)}  # memory-mapped

        start = time.perf_counter()
        distribution = build_distribution("temperature", {n: len(d) for n, d in corpora.items()})
        sampler = CorpusBatchSampler.from_datasets(corpora, distribution, max_tokens=options.max_tokens, seed=0)
        iterator = iter(sampler)
        next(iterator)
        first_batch = time.perf_counter() - start

        start = time.perf_counter()
        for _ in range(options.draws):
            next(iterator)
        per_batch = (time.perf_counter() - start) / options.draws
        sampler.distribution.set_probabilities(np.full(options.corpora, 1.0 / options.corpora))
        start = time.perf_counter()
        for _ in range(1000):
            next(iterator)
        after_update = (time.perf_counter() - start) / 1000

    step = training_step_seconds(options.max_tokens)
    share = 100.0 * per_batch / step
    print(f"corpora {options.corpora}, examples {int(sizes.sum()):,}, batches per epoch {len(sampler):,}, "
          f"max_tokens {options.max_tokens} (synthetic data written in {build_seconds:.1f} s)")
    print(f"{'time to first batch (s)':<40} {first_batch:10.3f}")
    print(f"{'sampler batches per second':<40} {1 / per_batch:10.0f}")
    print(f"{'  after a probability update':<40} {1 / after_update:10.0f}")
    print(f"{'training step, small preset (s)':<40} {step:10.3f}")
    print(f"{'sampler share of a step (%)':<40} {share:10.4f}")
    print(f"first_batch_seconds={first_batch:.3f}")
    print(f"sampler_step_share_percent={share:.4f}")


if __name__ == "__main__":
    main()
