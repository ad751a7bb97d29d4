"""MC-dropout reward estimation: uat-hf vs the authors' style, same model, same dev batches.

The authors' fairseq code measures with K separate forward passes in a Python loop with autograd on
(a graph is built and never used), over one unsorted padded dev batch per corpus, computing the output
layer at every position. uat-hf runs without autograd, sorts the drawn sentences by length into
sub-batches, applies the output layer only at real target positions, and on a GPU repeats the batch K
times along the batch axis. Both use the same measure code, so only the execution differs.

``--precision`` runs both methods in the same training precision, as the Trainer would: ``bf16``/``fp16``
under autocast (what ``CorpusBalancingCallback`` does when the model trains with ``bf16``/``fp16``), ``tf32``
with TF32 matrix products (``tf32=True``; CUDA only).

Prints a table (time, peak memory, rewards) and, last, ``speedup_k30=<x>``.

    python benchmarks/mc_dropout.py [--preset small] [--vocab 8000] [--device cpu|cuda]
        [--precision fp32|tf32|bf16|fp16]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time

import numpy as np
import torch
from peak_memory import PeakMemory

from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.data.tokenization import train_joint_tokenizer
from uat_hf.models.presets import build_model
from uat_hf.strategies.multiuat.measures import eos_positions, position_statistics, sentence_uncertainty
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer


def authors_style(model, dev_rows, collate, measure: str, k: int, eos: int) -> np.ndarray:
    """K passes per corpus, autograd on, one unsorted padded batch, full output layer."""
    model.train()
    rewards = []
    for rows in dev_rows:
        batch = {key: value.to(model.device) for key, value in collate(rows).items()}
        mask = batch["labels"] != -100
        passes = []
        for _ in range(k):
            logits = model(**batch).logits
            max_prob, entropy = position_statistics(logits)
            eos_index = eos_positions(batch["labels"], eos, mask)
            passes.append(sentence_uncertainty(measure, max_prob, entropy, mask, eos_index).mean().item())
        rewards.append(np.mean(passes))
    model.eval()
    return np.array(rewards)


def library_dev_batches(model, tokenizer, dev: dict, options) -> tuple:
    """The collator and the dev batches of the first update of a training run: drawn, sorted by length and
    collated by the balancing callback of a ``UATTrainer``, as ``uat-train`` measures them. The trainer only
    draws here; the dev sets stand in for the training corpora it needs."""
    with tempfile.TemporaryDirectory() as out:
        config = UATConfig(output_dir=out, strategy="multiuat", measure=options.measure, mc_samples=1,
                           dev_batch_tokens=options.dev_tokens, use_cpu=model.device.type == "cpu", report_to=[],
                           seed=0)
        trainer = UATTrainer(model, config, train_corpora=dev, dev_corpora=dev, processing_class=tokenizer)
        return trainer.data_collator, trainer.balancing.dev_batches()


def unpadded_rows(batches: list[dict]) -> list[dict]:
    """The dataset rows a list of collated batches was made from (padding and ignored labels removed)."""
    rows = []
    for batch in batches:
        for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
            source = ids[mask.bool()].tolist()
            rows.append({"input_ids": source, "attention_mask": [1] * len(source),
                         "labels": labels[labels != -100].tolist()})
    return rows


def training_precision(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The numeric setting both methods run in: autocast for bf16/fp16, TF32 matrix products for tf32."""
    if precision in ("bf16", "fp16"):
        return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    if precision == "tf32":
        if device.type != "cuda":
            raise SystemExit("--precision tf32 needs a CUDA device.")
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--measure", default="enteos")
    parser.add_argument("--dev-tokens", type=int, default=1024)
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 30])
    parser.add_argument("--repeats", type=int, default=1, help="Timed runs per method and K; the fastest counts.")
    parser.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="fp32")
    options = parser.parse_args()
    device = torch.device(options.device)
    torch.manual_seed(0)

    specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de", max_examples=3000)
    tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=options.vocab)
    dev = load_corpora(specs, tokenizer, splits=("dev",), max_source_length=128, max_target_length=128)["dev"]
    model = build_model(options.preset, tokenizer).to(device).eval()
    collate, dev_batches = library_dev_batches(model, tokenizer, dev, options)
    eos = model.config.eos_token_id
    # The authors' batch holds the same sentences, unsorted, in one padded batch.
    rng = np.random.default_rng(0)
    dev_rows = [list(rng.permutation(unpadded_rows(batches))) for batches in dev_batches]

    print(f"model {options.preset}: {model.num_parameters() / 1e6:.1f}M parameters, device {device}, "
          f"N={len(dev_rows)} corpora, ~{options.dev_tokens} target tokens each, measure {options.measure}, "
          f"precision {options.precision}, torch threads {torch.get_num_threads()}")
    print(f"{'K':>3} {'method':<22} {'seconds':>8} {'peak MB':>8}  rewards")
    with training_precision(options.precision, device):
        speedups = measure_speedups(options, model, dev_rows, dev_batches, collate, eos, device)
    print(f"speedup_k{options.ks[-1]}={speedups[options.ks[-1]]:.2f}")


def measure_speedups(
    options, model, dev_rows, dev_batches, collate, eos: int, device: torch.device
) -> dict[int, float]:
    """Times both methods per K, prints a row per run, returns the speed-ups."""
    # Untimed warm-up of both methods: CUDA context, cuBLAS handles and kernel caches (or CPU thread pools) must
    # not land in whichever method happens to be timed first.
    authors_style(model, dev_rows, collate, options.measure, 1, eos)
    UncertaintyReward(options.measure, 1, eos_token_id=eos).compute(model, dev_batches, seed=0)
    speedups = {}
    for k in options.ks:
        timings = {}
        for label in ("authors (loop+autograd)", "uat-hf"):
            seconds = math.inf
            for _ in range(options.repeats):  # the fastest repeat counts (GPU timings here are tenths of a second)
                with PeakMemory(device) as memory:
                    start = time.perf_counter()
                    if label.startswith("authors"):
                        rewards = authors_style(model, dev_rows, collate, options.measure, k, eos)
                    else:
                        reward = UncertaintyReward(options.measure, k, eos_token_id=eos)
                        rewards = reward.finalize(reward.compute(model, dev_batches, seed=k))[0]
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    seconds = min(seconds, time.perf_counter() - start)
            timings[label] = seconds
            print(f"{k:>3} {label:<22} {seconds:8.2f} {memory.peak / 2**20:8.1f}  {np.round(rewards, 4).tolist()}")
        speedups[k] = timings["authors (loop+autograd)"] / timings["uat-hf"]
        print(f"{k:>3} speed-up {speedups[k]:.2f}x")
    return speedups


if __name__ == "__main__":
    main()
