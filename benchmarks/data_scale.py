"""Data preparation at scale, through ``uat-train``: one large synthetic corpus beside a small one.

For each size (0.1M and 1M pairs by default) and each ``preprocessing_num_workers`` (1 and 2) it writes a
``corpus_specs`` recipe, then runs ``uat-train`` twice with a cold ``datasets`` cache of its own: the first run
prepares everything (reads the files, cleans, trains the tokenizer on its sample, tokenizes, saves the preparation
cache), the second run with the same recipe reads the preparation cache. Each run trains ``--max-steps`` steps of
the tiny preset and evaluates 8 test sentences per corpus. Measured from ``uat-train``'s own output:

- start-up: process start to its first line about the data (imports, recipe);
- preparation: from there to the line saying the prepared data was saved to (or read from) the preparation cache
  (the corpus audit, the tokenizer, cleaning and tokenization);
- audit: the seconds the corpus audit reports (``corpus audit (Ns``), part of the preparation: it measures the pairs
  the preparation cleaned, before the tokenizer is trained (0 when it is read from the preparation cache);
- first batch: process start to the Trainer's first logged step (``logging_steps: 1``), i.e. the first batch trained,
  and the same less the start-up (what the data costs before training starts; start-up is imports, seconds on an
  idle machine but far more on a busy one);
- peak memory: the largest resident set of any process of the run (``uat-train`` or a preparation worker);
- training throughput: optimizer steps per second from the first logged step to the last (the batches after the
  first), to compare streamed with map-style corpora at the same batch shape (give ``--max-steps`` a few hundred).

With ``--streaming`` each size also gets a run that reads the training corpora as streams (``streaming: true``,
``dedupe: false``; the tokenizer on the first ``STREAM_TOKENIZER_PAIRS`` pairs of each stream): nothing is prepared
before training, so its first batch should not depend on the corpus size, nor its peak memory (bounded buffers).
``--workers`` given without a value runs the streamed rows only.

Prints a table and, last, ``cached_first_batch_seconds=<x>`` (the second run at the largest size, most workers;
``streamed_first_batch_seconds=<x>`` with ``--streaming`` only).

    python benchmarks/data_scale.py [--pairs 100000 1000000] [--workers 1 2] [--streaming] [--max-steps 5]
        [--model tiny] [--keep DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

#: Words per sentence of the synthetic pairs ("short pairs": 4 to 12 words), and the size of each side's vocabulary.
SENTENCE_WORDS = (4, 12)
VOCABULARY = 30_000
SMALL_PAIRS = 5_000
HELD_OUT_PAIRS = 200
#: A streamed run's tokenizer reads the first this many pairs of each stream (``tokenizer_max_sentences``).
STREAM_TOKENIZER_PAIRS = 50_000
#: Runs ``uat-train`` in a child that reports the largest resident set of its descendants (Linux: kB).
_PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
             "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True); "
             "sys.exit(code)")


@dataclass
class Run:
    pairs: int
    workers: int
    run: str
    startup: float
    preparation: float
    audit: float
    first_batch: float
    peak_mb: float
    total: float
    steps_per_second: float
    load: float = float("nan")  # the 1-minute load average when the run ended: how busy the machine was


@functools.cache
def pseudo_words(seed: int) -> np.ndarray:
    """A vocabulary of :data:`VOCABULARY` letter strings of 2 to 10 letters."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(VOCABULARY)])


def write_pairs(path: Path, count: int, seed: int, chunk: int = 100_000) -> None:
    """``count`` synthetic en–de pairs as JSON lines (``{"translation": {"en": ..., "de": ...}}``): Zipf-distributed
    words, the German side as many words as the English one, give or take one (the length-ratio filter keeps most)."""
    rng = np.random.default_rng(seed)
    words = {"en": pseudo_words(1), "de": pseudo_words(2)}
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            lengths = rng.integers(SENTENCE_WORDS[0], SENTENCE_WORDS[1] + 1, n)
            target_lengths = np.clip(lengths + rng.integers(-1, 2, n), 1, None)
            ranks = (rng.zipf(1.2, (n, SENTENCE_WORDS[1] + 1)) - 1) % VOCABULARY
            lines = []
            for i in range(n):
                en = " ".join(words["en"][ranks[i, : lengths[i]]])
                de = " ".join(words["de"][ranks[i, ::-1][: target_lengths[i]]])
                lines.append(json.dumps({"translation": {"en": en, "de": de}}, ensure_ascii=False))
            f.write("\n".join(lines) + "\n")


def write_corpora(folder: Path, pairs: int) -> list[dict]:
    """The large corpus (``pairs`` training pairs) and a small one, each with dev and test files: corpus specs.
    Files already in ``folder`` (a ``--keep`` folder) are reused: the same seeds write the same pairs."""
    specs = []
    for name, count, seed in (("large", pairs, 10), ("small", SMALL_PAIRS, 20)):
        spec = {"name": name, "source_lang": "en", "target_lang": "de"}
        for split, n, offset in (("train", count, 0), ("dev", HELD_OUT_PAIRS, 1), ("test", HELD_OUT_PAIRS, 2)):
            path = folder / f"{name}.{split}.jsonl"
            if not path.exists():
                partial = path.with_suffix(".partial")  # renamed once complete: a killed run leaves no short file
                write_pairs(partial, n, seed + offset)
                partial.rename(path)
            spec[split] = str(path)
        specs.append(spec)
    return specs


def recipe(specs: list[dict], output_dir: Path, max_steps: int, model: str = "tiny") -> dict:
    return {
        "corpus_specs": specs, "output_dir": str(output_dir), "strategy": "temperature",
        "model_name_or_path": model, "max_source_length": 64, "max_target_length": 64,
        "max_steps": max_steps, "max_tokens": 400, "logging_steps": 1, "save_strategy": "no", "eval_strategy": "no",
        "max_eval_examples": 8, "generation_num_beams": 1, "generation_max_length": 8, "use_cpu": True,
        "report_to": "none", "disable_tqdm": True, "seed": 0,
        # The corpus-health checks (forward passes over training and dev samples, seconds each with the small
        # preset) run for map-style corpora only: off, so that both paths train the same work.
        "corpus_health_checks": 0,
    }


def timed_run(config: Path, workers: int, env: dict, log: Path) -> tuple[float, ...]:
    """``(start-up, preparation, first batch, peak MB, total, steps per second)`` of one ``uat-train`` run (times in
    seconds), whose output goes to ``log`` with each line's time since the start."""
    uat_train = [sys.executable, "-m", "uat_hf.cli.train"]
    command = [sys.executable, "-c", _PEAK_RSS, *uat_train, "--config", str(config),
               "--preprocessing_num_workers", str(workers)]
    start = time.monotonic()
    seen: dict[str, float] = {}
    peak_kb, tail, steps = 0.0, [], []
    with (subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as process,
          open(log, "w", encoding="utf-8") as saved):
        for line in process.stdout:
            now = time.monotonic() - start
            saved.write(f"{now:8.1f} {line}")
            tail = (tail + [line])[-40:]
            if "Generating" in line or "[uat-hf]" in line:
                seen.setdefault("corpora", now)
            audit = re.search(r"\[uat-hf\] corpus audit \((\d+)s|\[uat-hf\] corpus audit \(read from", line)
            if audit:
                seen["audit"] = float(audit.group(1) or 0)
            if "[uat-hf] prepared data" in line:
                seen.setdefault("model", now)
            elif re.match(r"\{'loss'", line.strip()):
                seen.setdefault("first_batch", now)
                steps.append(now)
            elif line.startswith("peak_rss_kb"):
                peak_kb = float(line.split()[1])
    total = time.monotonic() - start
    if process.returncode != 0 or not {"corpora", "model", "first_batch"} <= seen.keys():
        raise RuntimeError(f"uat-train failed (exit {process.returncode}):\n{''.join(tail)}")
    throughput = (len(steps) - 1) / (steps[-1] - steps[0]) if len(steps) > 1 else float("nan")
    return (seen["corpora"], seen["model"] - seen["corpora"], seen.get("audit", float("nan")), seen["first_batch"],
            peak_kb / 1024, total, throughput)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--streaming", action="store_true", help="also a run with the training corpora streamed")
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--model", default="tiny", help="the preset trained (tiny, small, ...)")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a "
                        "temporary folder, removed at the end)")
    options = parser.parse_args(argv)
    root = options.keep or Path(tempfile.mkdtemp(prefix="data_scale_"))
    runs: list[Run] = []
    try:
        for pairs in options.pairs:
            folder = root / f"pairs-{pairs}"
            folder.mkdir(parents=True, exist_ok=True)
            written = time.monotonic()
            specs = write_corpora(folder, pairs)
            print(f"# {pairs} + {SMALL_PAIRS} synthetic pairs written in {time.monotonic() - written:.0f}s",
                  flush=True)
            for workers in options.workers:
                cache = folder / f"hf-cache-{workers}"  # cold: neither the datasets cache nor the preparation cache
                shutil.rmtree(cache, ignore_errors=True)
                env = dict(os.environ, HF_DATASETS_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                           CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
                config = folder / f"recipe-{workers}.yaml"
                run_recipe = recipe(specs, folder / f"run-{workers}", options.max_steps, options.model)
                config.write_text(yaml.safe_dump(run_recipe))
                for run in ("first", "second (cached)"):
                    log = folder / f"uat-train-{workers}-{run.split()[0]}.log"
                    runs.append(Run(pairs, workers, run, *timed_run(config, workers, env, log), os.getloadavg()[0]))
                    print(f"# {runs[-1]}", flush=True)
            if options.streaming:
                env = dict(os.environ, HF_DATASETS_CACHE=str(folder / "hf-cache-streamed"), HF_HUB_OFFLINE="1",
                           HF_DATASETS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
                config = folder / "recipe-streamed.yaml"
                streamed = {**recipe(specs, folder / "run-streamed", options.max_steps, options.model),
                            "streaming": True, "dedupe": False, "tokenizer_max_sentences": STREAM_TOKENIZER_PAIRS}
                config.write_text(yaml.safe_dump(streamed))
                log = folder / "uat-train-streamed.log"
                runs.append(Run(pairs, 1, "streamed", *timed_run(config, 1, env, log), os.getloadavg()[0]))
                print(f"# {runs[-1]}", flush=True)
    finally:
        if options.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'pairs':>9} {'workers':>7} {'run':<16} {'start-up s':>10} {'prep s':>7} {'audit s':>7} "
          f"{'1st batch s':>11} {'less start-up':>13} {'peak MB':>8} {'total s':>8} {'steps/s':>8} {'load':>5}")
    for r in runs:
        print(f"{r.pairs:>9} {r.workers:>7} {r.run:<16} {r.startup:>10.1f} {r.preparation:>7.1f} {r.audit:>7.0f} "
              f"{r.first_batch:>11.1f} {r.first_batch - r.startup:>13.1f} {r.peak_mb:>8.0f} {r.total:>8.1f} "
              f"{r.steps_per_second:>8.2f} {r.load:>5.1f}")
    cached = [r for r in runs if r.run != "streamed"]
    if cached:
        print(f"cached_first_batch_seconds={cached[-1].first_batch:.1f}")
    if options.streaming:
        print(f"streamed_first_batch_seconds={runs[-1].first_batch:.1f}")


if __name__ == "__main__":
    main()
