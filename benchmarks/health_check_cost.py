"""The corpus-health checks' cost: the same static run with and without them, interleaved, through ``UATTrainer``.

Each round trains the run twice from the same seed, once with ``corpus_health_checks`` K (the checks' training
samples held out, ``corpus_health_holdout``) and once with the checks off, so that a drift of the machine hits both
alike. Per variant it prints the median and the spread of the end-to-end time; for the checked runs also the time
inside the checks (``CorpusHealthCallback.check``, wrapped) and so the seconds of one check, t_check, and of one
training step of the unchecked run, t_step. The cost at a run of S steps with C checks is C·t_check / (S·t_step):
printed for the demo's shape (``--demo-steps`` 1950, ``--demo-checks`` 3; recipes/demo.yaml), with the measured
paired e2e overhead of the benchmark's own runs beside it.

The defaults are the demo's model and batches: regime A's model (the ``small`` preset at d_model 192, 2+2 layers),
mixed batches of at most 1,000 tokens, the 4 bundled corpora, 4,096-token check samples.

Prints a table and, last, ``health_check_percent_at_demo=<x>`` (medians).

``--check-only R`` times the checks alone instead, on the untrained model (a check's compute does not depend on the
weights): R rounds, each one check with the encoder pass shared by the aligned and mismatched versions (what
``check_sample`` does for an encoder-decoder model) and one with both versions encoded in full (before), and
prints the medians of wall and CPU seconds and ``shared_encoder_check_ratio=<x>`` (of CPU seconds, paired by round:
with ``--threads 1`` the check's compute, little disturbed by other work on the machine); then the CPU seconds of one
training step without checks (``--steps`` of them) and the checks' share of training at the demo's shape, with every
sample read whole and with every sample read in its first half only (the two bounds of a check's cost).

    python benchmarks/health_check_cost.py [--steps 300] [--checks 3] [--repeats 3] [--threads 1] [--check-only R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from training_overhead import STATIC, add_setup_arguments, load_data, make_trainer

from uat_hf.training.health_callback import CorpusHealthCallback

DEMO_MODEL = ('{"d_model": 192, "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 768, '
              '"decoder_ffn_dim": 768}')


def timed_run(options: argparse.Namespace, tokenizer: Any, data: dict, checks: int) -> dict[str, float]:
    """Train once; the wall time of ``trainer.train()``, the seconds inside the checks and their number."""
    config = {"corpus_health_checks": checks, "corpus_health_tokens": options.health_tokens,
              "mix_corpora": True}
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, STATIC, out, options.steps, options.steps + 1, **config)
        inside = {"in_checks": 0.0, "checks": 0}
        health = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, CorpusHealthCallback)]
        if checks and len(health) != 1:
            raise RuntimeError(f"expected one corpus-health callback with corpus_health_checks={checks}, found "
                               f"{len(health)}")
        for callback in health:
            measure = callback.check

            def timed(*args: Any, _measure=measure, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _measure(*args, **kwargs)
                finally:
                    inside["in_checks"] += time.perf_counter() - start
                    inside["checks"] += 1

            callback.check = timed
        start = time.perf_counter()
        trainer.train()
        return {"e2e": time.perf_counter() - start, **inside}


def check_only(options: argparse.Namespace, tokenizer: Any, data: dict) -> float:
    """Median seconds of one check with the encoder pass shared, over one with both versions encoded in full."""
    from uat_hf.evaluation import corpus_health

    config = {"corpus_health_checks": options.checks, "corpus_health_tokens": options.health_tokens,
              "mix_corpora": True}
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, STATIC, out, options.steps, options.steps + 1, **config)
        callback = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, CorpusHealthCallback))
        model, shared = trainer.model, corpus_health._encoder_of
        callback.check(model, 0)  # warm-up, untimed: draws and collates the samples
        seconds: dict[str, list[float]] = {"shared": [], "full": []}
        cpu: dict[str, list[float]] = {"shared": [], "full": []}
        for _ in range(options.check_only):
            for variant in seconds:
                corpus_health._encoder_of = shared if variant == "shared" else (lambda model: None)
                start, start_cpu = time.perf_counter(), time.process_time()
                callback.check(model, 0)
                seconds[variant].append(time.perf_counter() - start)
                cpu[variant].append(time.process_time() - start_cpu)
        corpus_health._encoder_of = shared
    for variant, times in seconds.items():
        print(f"one check, {variant:<6} encoder pass: median {statistics.median(times):.2f} s "
              f"[{min(times):.2f}-{max(times):.2f}], CPU {statistics.median(cpu[variant]):.2f} s "
              f"[{min(cpu[variant]):.2f}-{max(cpu[variant]):.2f}] over {len(times)}")
    # CPU seconds: what the check computes, much less disturbed than wall time by other work on the machine
    ratio = statistics.median(s / f for s, f in zip(cpu["shared"], cpu["full"]))
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, STATIC, out, options.steps, options.steps + 1,
                               corpus_health_checks=0, mix_corpora=True)
        start_cpu = time.process_time()
        trainer.train()
        step_cpu = (time.process_time() - start_cpu) / options.steps
    check_cpu = statistics.median(cpu["shared"])
    for label, read in (("every sample read whole", 1.0), ("every sample read in its first half", 0.5)):
        print(f"at the demo's shape, {label}: {options.demo_checks} x {read * check_cpu:.2f} CPU s / "
              f"({options.demo_steps} x {1000 * step_cpu:.1f} CPU ms a training step) = "
              f"{100 * options.demo_checks * read * check_cpu / (options.demo_steps * step_cpu):.2f} %")
    print(f"shared_encoder_check_ratio={ratio:.3f}")
    return ratio


def main(argv: Sequence[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_setup_arguments(parser)
    parser.set_defaults(model_overrides=json.loads(DEMO_MODEL), max_tokens=1000, vocab=3000, examples=20_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--checks", type=int, default=3, help="corpus_health_checks of the checked runs.")
    parser.add_argument("--health-tokens", type=int, default=4096, help="corpus_health_tokens.")
    parser.add_argument("--repeats", type=int, default=3, help="Rounds of (checked, unchecked) runs.")
    parser.add_argument("--demo-steps", type=int, default=1950)
    parser.add_argument("--demo-checks", type=int, default=3)
    parser.add_argument("--check-only", type=int, default=0, metavar="R",
                        help="Time R rounds of single checks, encoder shared and not, instead of training runs.")
    options = parser.parse_args(argv)
    tokenizer, data = load_data(options)
    if options.check_only:
        return check_only(options, tokenizer, data)
    timed_run(options, tokenizer, data, options.checks)  # warm-up, untimed: thread pools, allocator, the samples
    runs = {"checked": [], "unchecked": []}
    for _ in range(options.repeats):
        runs["checked"].append(timed_run(options, tokenizer, data, options.checks))
        runs["unchecked"].append(timed_run(options, tokenizer, data, 0))
    for variant, mine in runs.items():
        e2e = [r["e2e"] for r in mine]
        print(f"{variant:<10} e2e median {statistics.median(e2e):8.2f} s [{min(e2e):.2f}-{max(e2e):.2f}]"
              + (f"; inside the checks median {statistics.median(r['in_checks'] for r in mine):.2f} s over "
                 f"{mine[0]['checks']} checks" if variant == "checked" else ""))
    t_check = statistics.median(r["in_checks"] / max(r["checks"], 1) for r in runs["checked"])
    t_step = statistics.median(r["e2e"] for r in runs["unchecked"]) / options.steps
    paired = [c["e2e"] / u["e2e"] - 1 for c, u in zip(runs["checked"], runs["unchecked"])]
    share = options.demo_checks * t_check / (options.demo_steps * t_step)
    print(f"t_check {t_check:.2f} s, t_step {t_step * 1000:.1f} ms (the unchecked run's e2e / steps); paired e2e "
          f"overhead of these {options.steps}-step runs: median {100 * statistics.median(paired):+.2f}% "
          f"[{', '.join(f'{100 * v:+.2f}%' for v in paired)}]")
    print(f"at the demo's shape: {options.demo_checks} x {t_check:.2f} s / ({options.demo_steps} x "
          f"{t_step * 1000:.1f} ms)")
    print(f"health_check_percent_at_demo={100 * share:.2f}")
    return share


if __name__ == "__main__":
    main()
