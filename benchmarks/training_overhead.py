"""Training overhead of balancing: static prior vs MultiUAT vs MultiDDS-S, same run, same seed.

S and K are scaled down so that S/K matches the paper's 1000/30 (the overhead of MultiUAT is about
N·K forward passes every S steps). Beside the measured ratio it prints the analytic estimate
N·K·t_fwd / (S·t_step), with t_fwd the measured time of one MC-dropout forward pass on a dev batch and
t_step the measured time of one static training step.

Prints a table and, last, ``multiuat_overhead_percent=<x>``.

    python benchmarks/training_overhead.py [--steps 300] [--update-every 100] [--mc-samples 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from uat_hf.checkpoints import HISTORY_FILE
from uat_hf.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.plotting import load_history
from uat_hf.presets import build_model
from uat_hf.tokenization import train_joint_tokenizer
from uat_hf.uat_config import UATConfig
from uat_hf.uat_trainer import UATTrainer
from uat_hf.uncertainty import UncertaintyReward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--update-every", type=int, default=100)
    parser.add_argument("--mc-samples", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--dev-batch-tokens", type=int, default=1024)
    parser.add_argument("--strategies", nargs="+", default=["proportional", "multiuat", "multidds-s", "mixing-law"])
    parser.add_argument("--repeats", type=int, default=1,
                        help="Timed runs per strategy (interleaved); the fastest counts.")
    options = parser.parse_args()

    specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de", max_examples=5000)
    tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=4000)
    data = load_corpora(specs, tokenizer, splits=("train", "dev"), max_source_length=64, max_target_length=64)

    def timed_run(strategy: str, steps: int, update_every: int) -> tuple[float, float]:
        """Wall seconds of ``trainer.train()`` and the part of it spent inside balancing updates."""
        torch.manual_seed(0)
        model = build_model(options.preset, tokenizer)
        with tempfile.TemporaryDirectory() as out:
            args = UATConfig(
                output_dir=out, strategy=strategy, measure="enteos", mc_samples=options.mc_samples,
                update_every=update_every, dev_batch_tokens=options.dev_batch_tokens,
                dds_train_batch_tokens=options.dev_batch_tokens, max_steps=steps,
                max_tokens=options.max_tokens, learning_rate=1e-3, report_to=[], save_strategy="no",
                logging_steps=10_000, disable_tqdm=True, seed=0, use_cpu=not torch.cuda.is_available(),
            )
            trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=data["dev"],
                                 processing_class=tokenizer)
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
            in_updates = sum(r["seconds"] for r in load_history(out)) if (Path(out) / HISTORY_FILE).exists() else 0.0
            return seconds, in_updates

    # Untimed warm-up of every code path (CUDA context, kernel caches for the training and the inference shapes,
    # thread pools), so that none of it lands in whichever strategy happens to be timed first.
    for strategy in options.strategies:
        timed_run(strategy, 10, 5)
    runs: dict[str, list[tuple[float, float]]] = {s: [] for s in options.strategies}
    for _ in range(options.repeats):  # interleaved, so a drift of the machine hits every strategy alike
        for strategy in options.strategies:
            runs[strategy].append(timed_run(strategy, options.steps, options.update_every))
    best = {s: min(r) for s, r in runs.items()}  # fastest repeat: the least disturbed by the machine
    seconds = {s: b[0] for s, b in best.items()}

    # Analytic bound for MultiUAT: N·K forward passes of one dev batch every S steps. The dev batches are those
    # of a training run's first update, drawn by the balancing callback of a UATTrainer.
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as out:
        args = UATConfig(output_dir=out, strategy="multiuat", measure="enteos", mc_samples=10,
                         dev_batch_tokens=options.dev_batch_tokens, report_to=[], seed=0,
                         use_cpu=not torch.cuda.is_available())
        trainer = UATTrainer(build_model(options.preset, tokenizer), args, train_corpora=data["train"],
                             dev_corpora=data["dev"], processing_class=tokenizer)
        dev_batches = trainer.balancing.dev_batches()
    reward = UncertaintyReward("enteos", 10, eos_token_id=trainer.model.config.eos_token_id)
    reward.compute(trainer.model, dev_batches)  # warm-up
    start = time.perf_counter()
    reward.compute(trainer.model, dev_batches)
    t_forward = (time.perf_counter() - start) / (10 * len(dev_batches))  # one MC pass on one corpus's dev batch
    n = len(data["train"])
    t_step = seconds[options.strategies[0]] / options.steps
    bound = 100 * n * options.mc_samples * t_forward / (options.update_every * t_step)

    base = seconds[options.strategies[0]]
    print(f"preset {options.preset}, {options.steps} steps, max_tokens {options.max_tokens}, N={n}, "
          f"S={options.update_every}, K={options.mc_samples} (S/K={options.update_every / options.mc_samples:.1f}; "
          f"paper 1000/30=33.3), torch threads {torch.get_num_threads()}")
    print(f"{'strategy':<14} {'seconds':>9} {'vs static':>10} {'in updates':>11}   all repeats")
    for strategy, (value, in_updates) in best.items():
        print(f"{strategy:<14} {value:9.2f} {100 * (value / base - 1):+9.2f}% {in_updates:10.2f}s   "
              + ", ".join(f"{r[0]:.2f}" for r in runs[strategy]))
    print(f"t_step {t_step:.3f} s, t_fwd (one MC pass, ~{options.dev_batch_tokens} tokens) {t_forward:.3f} s")
    print(f"analytic MultiUAT overhead N*K*t_fwd/(S*t_step) = {bound:.2f}%")
    if "multiuat" in seconds:
        print(f"multiuat_overhead_percent={100 * (seconds['multiuat'] / base - 1):.2f}")


if __name__ == "__main__":
    main()
