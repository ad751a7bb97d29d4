"""Training overhead of balancing: a static prior vs MultiUAT vs MultiDDS-S (vs mixing-law), same run, same seed.

Every strategy trains through ``UATTrainer`` (the library's own path), ``--repeats`` times, interleaved
(static, multiuat, multidds-s, static, multiuat, ...) so that a drift of the machine hits every strategy
alike; after one untimed warm-up run of each. Per strategy it prints the median and the spread (min–max) of
the end-to-end time and of the time spent inside the balancing updates (``balancing_history.jsonl``), the
overhead against the static prior from the medians, and the end-to-end time *outside* the updates against
the static run's (what costs outside the update, if anything). With ``--memory`` on a GPU it also prints the
CUDA allocator's peak inside the training steps and inside the updates.

S and K are scaled down so that S/K matches the paper's 1000/30 (MultiUAT's overhead is about N·K forward
passes every S steps). Beside the measured ratio it prints the analytic estimate N·K·t_fwd / (S·t_step),
with t_fwd the measured time of one MC-dropout forward pass on a dev batch and t_step the median time of one
static training step.

``--corpora N`` splits the bundled corpora deterministically into N named corpora of varied sizes
(:func:`named_corpora`), ``--preset`` takes any preset of ``uat_hf.models.presets`` (``small``, ``transformer_base``,
``nllb-600m-config``: an NLLB-200-distilled-600M-sized M2M100 with random weights), ``--precision bf16``
trains with the Trainer's ``bf16=True`` (autocast; on a CPU too).

Prints a table and, last, ``multiuat_overhead_percent=<x>`` (medians).

    python benchmarks/training_overhead.py [--preset small] [--precision fp32|bf16] [--corpora 4] [--steps 300]
        [--update-every 100] [--mc-samples 3] [--repeats 3] [--strategies ...] [--memory] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peak_memory import PeakMemory

from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.data.tokenization import train_joint_tokenizer
from uat_hf.evaluation.history import load_history, update_records
from uat_hf.models.presets import build_model
from uat_hf.strategies.mixing_law.law import MixingLawSettings
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import HISTORY_FILE

STATIC = "proportional"


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that decide the model, the data and the balancing settings (shared with profile_update.py)."""
    parser.add_argument("--preset", default="small", help="small, transformer_base, nllb-600m-config, ...")
    parser.add_argument("--model-overrides", type=json.loads, default={},
                        help='JSON config fields over the preset, e.g. the study\'s regime A: \'{"d_model": 192, '
                        '"encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 768, "decoder_ffn_dim": 768}\'')
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: the Trainer's bf16=True (autocast, the balancing passes included).")
    parser.add_argument("--corpora", type=int, default=4, help="N corpora made from the 4 bundled ones.")
    parser.add_argument("--examples", type=int, default=5000, help="Training pairs read per bundled corpus.")
    parser.add_argument("--vocab", type=int, default=4000, help="Size of the joint BPE vocabulary trained here.")
    parser.add_argument("--mc-samples", type=int, default=3, help="K.")
    parser.add_argument("--max-tokens", type=int, default=2048, help="Padded tokens of one training batch.")
    parser.add_argument("--dev-batch-tokens", type=int, default=1024)
    parser.add_argument("--mc-tolerance", type=float, default=None,
                        help="MultiUAT's adaptive K (mc_tolerance): stop the passes once the rewards are "
                        "known this well.")
    parser.add_argument("--mc-min-samples", type=int, default=5, help="Adaptive K: the fewest passes, and the block.")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's). On a small CPU, one thread fewer than the cores "
                        "leaves a core to the rest of the machine, which steadies the timings.")


def load_data(options: argparse.Namespace) -> tuple[Any, dict[str, dict[str, Any]]]:
    """The joint tokenizer and ``{"train": {name: Dataset}, "dev": {...}}`` with ``options.corpora`` corpora
    (after setting ``options.threads``, so that the tokenizer and the runs all see them)."""
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de", max_examples=options.examples)
    tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=options.vocab)
    data = load_corpora(specs, tokenizer, splits=("train", "dev"), max_source_length=64, max_target_length=64)
    return tokenizer, named_corpora(data, options.corpora)


def named_corpora(data: dict[str, dict[str, Any]], n: int) -> dict[str, dict[str, Any]]:
    """N named corpora from D given ones, deterministically.

    N ≤ D: the first N. N > D: corpus k is ``<domain>-<j>`` with domain k mod D and j = k // D; a domain's
    training set is cut into consecutive, disjoint slices sized 1 : 2 : 3 : ..., so the corpora differ in size
    (and the static prior is not uniform), and every slice keeps the domain's whole dev set (duplicated), so
    that each corpus has a full dev batch to draw and the update's work grows exactly with N.
    """
    names = list(data["train"])
    if n < 1:
        raise ValueError(f"--corpora must be >= 1, got {n}.")
    if n <= len(names):
        return {split: {name: corpora[name] for name in names[:n]} for split, corpora in data.items()}
    train, dev = {}, {}
    for k in range(n):
        domain, j = names[k % len(names)], k // len(names)
        slices = len(range(k % len(names), n, len(names)))
        weights = np.arange(1, slices + 1)
        size = len(data["train"][domain])
        bounds = np.round(np.concatenate([[0], np.cumsum(weights)]) / weights.sum() * size).astype(int)
        if bounds[j + 1] <= bounds[j]:
            raise ValueError(f"--corpora {n}: corpus {domain!r} has too few training pairs ({size}) to cut into "
                             f"{slices} slices; raise --examples or lower --corpora.")
        train[f"{domain}-{j}"] = data["train"][domain].select(range(bounds[j], bounds[j + 1]))
        dev[f"{domain}-{j}"] = data["dev"][domain]
    return {"train": train, "dev": dev}


def make_trainer(options: argparse.Namespace, tokenizer: Any, data: dict, strategy: str, output_dir: str,
                 steps: int, update_every: int, **config: Any) -> UATTrainer:
    """A ``UATTrainer`` with a fresh model (seed 0) for one benchmark run; ``config`` adds ``UATConfig`` fields."""
    torch.manual_seed(0)
    model = build_model(options.preset, tokenizer, **options.model_overrides)
    if strategy == "multidds-s":  # its fresh train batches as large as the dev batches
        config = {**config, "strategy_settings": {"train_batch_tokens": options.dev_batch_tokens}}
    args = UATConfig(
        output_dir=output_dir, strategy=strategy, measure="enteos", mc_samples=options.mc_samples,
        update_every=update_every, dev_batch_tokens=options.dev_batch_tokens,
        mc_tolerance=options.mc_tolerance, mc_min_samples=options.mc_min_samples,
        max_steps=steps, max_tokens=options.max_tokens,
        learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=10_000, disable_tqdm=True, seed=0,
        use_cpu=not torch.cuda.is_available(), bf16=options.precision == "bf16", **config,
    )
    return UATTrainer(model, args, train_corpora=data["train"], dev_corpora=data["dev"], processing_class=tokenizer)


@dataclass
class Run:
    """One timed training run."""

    strategy: str
    seconds: float  # wall time of trainer.train()
    in_updates: float  # of which inside the balancing updates (or mixing-law's measuring)
    updates: int
    train_tokens: int = 0  # padded source + target tokens of the training batches (a changed p changes them)
    step_peak_mb: float | None = None  # CUDA allocator peak inside a training step (--memory)
    update_peak_mb: float | None = None  # ... inside a balancing update
    error: str | None = None  # e.g. out of memory


class UpdatePeaks:
    """CUDA allocator peaks inside ``trainer.training_step`` and inside the balancing updates, by wrapping the two
    methods of these objects (each call synchronises the device: only for runs that measure memory)."""

    def __init__(self, trainer: UATTrainer) -> None:
        self.peaks = {"step": 0, "update": 0}
        self._wrap(trainer, "training_step", "step")
        if trainer.balancing is not None:
            self._wrap(trainer.balancing, "update", "update")
            self._wrap(trainer.balancing, "probe", "update")

    def _wrap(self, owner: Any, method: str, key: str) -> None:
        inner = getattr(owner, method)

        def measured(*args: Any, **kwargs: Any) -> Any:
            memory = PeakMemory(torch.device("cuda"))
            try:
                with memory:
                    return inner(*args, **kwargs)
            finally:
                self.peaks[key] = max(self.peaks[key], memory.absolute)

        setattr(owner, method, measured)


def padded_tokens(inputs: dict) -> int:
    """Padded source + target tokens of one collated training batch."""
    return sum(int(inputs[key].numel()) for key in ("input_ids", "labels") if key in inputs)


def count_train_tokens(trainer: UATTrainer) -> list[int]:
    """A one-item list that counts the padded tokens of every training batch ``trainer.training_step`` receives:
    after an update the batches come from other corpora, so their shapes and cost differ from the static run's."""
    count = [0]
    inner = trainer.training_step

    def counted(model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
        count[0] += padded_tokens(inputs)
        return inner(model, inputs, *args, **kwargs)

    trainer.training_step = counted
    return count


def timed_run(options: argparse.Namespace, tokenizer: Any, data: dict, strategy: str, steps: int,
              update_every: int, **config: Any) -> Run:
    """Train once; the wall time, the part of it inside updates and (``options.memory`` on CUDA) the peaks."""
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, strategy, out, steps, update_every, **config)
        memory = UpdatePeaks(trainer) if getattr(options, "memory", False) and torch.cuda.is_available() else None
        tokens = count_train_tokens(trainer)
        error = None
        start = time.perf_counter()
        try:
            trainer.train()
        except torch.OutOfMemoryError as oom:  # a result: e.g. K copies of a 256K-entry output layer
            error = f"out of memory: {str(oom).splitlines()[0]}"
        seconds = time.perf_counter() - start
        history = update_records(load_history(out)) if (Path(out) / HISTORY_FILE).exists() else []
        run = Run(strategy, seconds, sum(r["seconds"] for r in history), len(history), tokens[0], error=error)
        if memory is not None:
            run.step_peak_mb, run.update_peak_mb = (memory.peaks[k] / 2**20 for k in ("step", "update"))
        del trainer
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return run


def interleaved(strategies: Sequence[str], repeats: int) -> list[str]:
    """The order of the timed runs: every strategy once per round, ``repeats`` rounds."""
    return [strategy for _ in range(repeats) for strategy in strategies]


def warm_up(options: argparse.Namespace, tokenizer: Any, data: dict, strategy: str) -> None:
    """One short untimed run: CUDA context, kernel caches for the training and inference shapes, thread pools,
    so that none of it lands in whichever strategy is timed first. Mixing-law's probe windows shrink to fit."""
    if strategy == "mixing-law":
        every = len(data["train"]) + 1
        timed_run(options, tokenizer, data, strategy, 2 * every, every,
                  strategy_settings={"sweeps": 1, "window_steps": 1})
    else:
        timed_run(options, tokenizer, data, strategy, 10, 5)


def summarize(runs: Sequence[Run]) -> dict[str, dict[str, float]]:
    """Per strategy: median, min and max of the e2e seconds, of the seconds inside updates and outside them."""
    table: dict[str, dict[str, float]] = {}
    for strategy in dict.fromkeys(r.strategy for r in runs):
        mine = [r for r in runs if r.strategy == strategy and r.error is None]
        if not mine:
            continue
        row = {}
        for key, values in (("e2e", [r.seconds for r in mine]), ("updates", [r.in_updates for r in mine]),
                            ("outside", [r.seconds - r.in_updates for r in mine])):
            row.update({f"{key}_median": statistics.median(values), f"{key}_min": min(values),
                        f"{key}_max": max(values)})
        row["train_tokens_median"] = statistics.median(r.train_tokens for r in mine)
        table[strategy] = row
    return table


def paired_overheads(runs: Sequence[Run]) -> dict[str, list[float]]:
    """Per strategy, its e2e time over the static run's of the same round, minus 1, round by round.

    The rounds run back to back, so a drift of the machine (a noisy neighbour, the clock) hits both runs of a
    round alike and cancels in their ratio, where it adds to both medians of :func:`summarize`.
    """
    rounds: list[dict[str, Run]] = []
    for run in runs:
        if not rounds or run.strategy in rounds[-1]:
            rounds.append({})
        rounds[-1][run.strategy] = run
    paired: dict[str, list[float]] = {}
    for round_ in rounds:
        base = round_.get(STATIC)
        for strategy, run in round_.items():
            if strategy != STATIC and base is not None and run.error is None and base.error is None:
                paired.setdefault(strategy, []).append(run.seconds / base.seconds - 1)
    return paired


def forward_seconds(options: argparse.Namespace, tokenizer: Any, data: dict, passes: int = 10) -> float:
    """t_fwd: one MC-dropout pass over one corpus's dev batch, as the first update of a MultiUAT run draws them."""
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, "multiuat", out, 10, 5)
        dev_batches = trainer.balancing.dev_batches()
        reward = UncertaintyReward("enteos", passes, eos_token_id=trainer.model.config.eos_token_id)
        device = trainer.model.device
        precision = (torch.autocast(device.type, dtype=torch.bfloat16) if options.precision == "bf16"
                     else contextlib.nullcontext())
        with precision:
            reward.compute(trainer.model, dev_batches)  # warm-up
            start = time.perf_counter()
            reward.compute(trainer.model, dev_batches)
        return (time.perf_counter() - start) / (passes * len(dev_batches))


def print_table(table: dict, runs: Sequence[Run]) -> None:
    base = table.get(STATIC)
    print(f"{'strategy':<13} {'e2e median [min-max] s':>26} {'vs static':>10} {'in updates [min-max] s':>26} "
          f"{'outside updates vs static':>26} {'tokens vs static':>17}  peak MB step/update")
    for strategy, row in table.items():
        vs = f"{100 * (row['e2e_median'] / base['e2e_median'] - 1):+9.2f}%" if base else "-"
        outside = f"{100 * (row['outside_median'] / base['outside_median'] - 1):+25.2f}%" if base else "-"
        tokens = (f"{100 * (row['train_tokens_median'] / base['train_tokens_median'] - 1):+16.2f}%"
                  if base and base["train_tokens_median"] else "-")
        peaks = [r for r in runs if r.strategy == strategy and r.step_peak_mb is not None]
        peak = (f"{max(r.step_peak_mb for r in peaks):,.0f} / {max(r.update_peak_mb for r in peaks):,.0f}"
                if peaks else "-")
        print(f"{strategy:<13} {row['e2e_median']:10.2f} [{row['e2e_min']:.2f}-{row['e2e_max']:.2f}]"
              f" {vs:>10} {row['updates_median']:10.2f} [{row['updates_min']:.2f}-{row['updates_max']:.2f}]"
              f" {outside:>26} {tokens:>17}  {peak}")
    for run in runs:
        if run.error:
            print(f"{run.strategy}: {run.error}")
    for strategy, values in paired_overheads(runs).items():
        print(f"{strategy} vs static, paired by round: median {100 * statistics.median(values):+.2f}% "
              f"[{', '.join(f'{100 * v:+.2f}%' for v in values)}]")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_setup_arguments(parser)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--update-every", type=int, default=100)
    parser.add_argument("--strategies", nargs="+", default=[STATIC, "multiuat", "multidds-s", "mixing-law"])
    parser.add_argument("--repeats", type=int, default=3, help="Timed runs per strategy, interleaved.")
    parser.add_argument("--memory", action="store_true", help="CUDA: peak memory of training steps and updates.")
    parser.add_argument("--no-analytic", action="store_true", help="Skip measuring t_fwd for the analytic bound.")
    parser.add_argument("--mixing-law-sweeps", type=int, default=MixingLawSettings.sweeps,
                        help="mixing-law's sweeps of probe windows per update (its default: %(default)s).")
    parser.add_argument("--json", help="Also write the runs and the table to this file.")
    options = parser.parse_args(argv)
    probe_steps = MixingLawSettings(sweeps=options.mixing_law_sweeps).probe_steps(options.corpora)
    if "mixing-law" in options.strategies and probe_steps >= options.update_every:
        parser.error(f"mixing-law probes {probe_steps} steps per update at N={options.corpora} with "
                     f"--mixing-law-sweeps {options.mixing_law_sweeps}, not fewer than --update-every "
                     f"{options.update_every}: raise --update-every or leave mixing-law out of --strategies.")
    tokenizer, data = load_data(options)
    for strategy in options.strategies:
        warm_up(options, tokenizer, data, strategy)
    runs = []
    for strategy in interleaved(options.strategies, options.repeats):
        config = {"strategy_settings": {"sweeps": options.mixing_law_sweeps}} if strategy == "mixing-law" else {}
        runs.append(timed_run(options, tokenizer, data, strategy, options.steps, options.update_every, **config))
    table = summarize(runs)

    n = len(data["train"])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} threads"
    print(f"preset {options.preset}, {options.precision}, {device}, {options.steps} steps, max_tokens "
          f"{options.max_tokens}, N={n}, S={options.update_every}, K={options.mc_samples} "
          f"(S/K={options.update_every / options.mc_samples:.1f}; paper 1000/30=33.3), {options.repeats} repeats")
    print_table(table, runs)
    result: dict[str, Any] = {"options": vars(options), "device": device, "corpora": list(data["train"]),
                              "runs": [asdict(r) for r in runs], "table": table, "paired": paired_overheads(runs)}
    if STATIC in table and not options.no_analytic and "multiuat" in options.strategies:
        t_forward = forward_seconds(options, tokenizer, data)
        t_step = table[STATIC]["e2e_median"] / options.steps
        bound = 100 * n * options.mc_samples * t_forward / (options.update_every * t_step)
        print(f"t_step {t_step:.3f} s, t_fwd (one MC pass, ~{options.dev_batch_tokens} tokens) {t_forward:.4f} s")
        print(f"analytic MultiUAT overhead N*K*t_fwd/(S*t_step) = {bound:.2f}%")
        result.update(t_step=t_step, t_forward=t_forward, analytic_percent=bound)
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=1))
    if STATIC in table and "multiuat" in table:
        overhead = 100 * (table["multiuat"]["e2e_median"] / table[STATIC]["e2e_median"] - 1)
        print(f"multiuat_overhead_percent={overhead:.2f}")
    return result


if __name__ == "__main__":
    main()
