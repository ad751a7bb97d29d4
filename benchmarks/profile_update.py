"""Where the time of ONE balancing update goes: a MultiUAT update and a MultiDDS-S update, profiled.

Each strategy trains ``--steps`` steps through ``UATTrainer`` (the setup of ``training_overhead.py``) with
an update after every step: the first update is a cold one (first inference shapes), the second is timed
without a profiler (its wall time), the last runs under ``cProfile`` (and ``torch.profiler`` with
``--torch-profiler``). The cProfile tree gives the cumulative seconds of the update's parts:

- drawing and collating the dev batches (and MultiDDS-S's fresh train batches);
- ``reward.compute``: host→device copies (``Tensor.to``), the model's forward passes (every ``nn.Module``
  call: the K MC-dropout passes, or MultiDDS-S's loss passes), the measure math
  (``uat_hf.strategies.multiuat.measures``), the
  loss, the backward passes (``torch.autograd.grad``), host syncs (``.item``/``.cpu``/``.tolist``);
- the all-reduce over ranks; the distribution's update (the scorer's steps).

cProfile adds a cost per Python call, so the shares of Python-heavy parts are inflated; the unprofiled wall
time is printed beside them. On a GPU, cProfile charges asynchronous kernels to whatever synchronises next:
read ``--torch-profiler``'s operator table there.

    python benchmarks/profile_update.py --preset transformer_base [--strategies multiuat multidds-s]
        [--mc-samples 3] [--steps 3] [--torch-profiler] [--json PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from training_overhead import add_setup_arguments, load_data, make_trainer, padded_tokens

from uat_hf.evaluation.history import load_history, strategy_fields
from uat_hf.utils.checkpoints import HISTORY_FILE

#: (indent, label, [(file name ending, function name), ...]): the parts of one update, by cumulative time.
PARTS = (
    (0, "whole update", [("callback.py", "update")]),
    (1, "draw + collate dev batches", [("callback.py", "dev_batches")]),
    (1, "draw + collate train batches", [("callback.py", "_train_batches")]),
    (1, "reward.compute", [("uncertainty.py", "compute"), ("gradient_cosine.py", "compute")]),
    (2, "host->device copies (Tensor.to)", [("~", "<method 'to' of 'torch._C.TensorBase' objects>")]),
    (2, "model forward passes", [("module.py", "_call_impl")]),
    (2, "measure math", [("measures.py", "position_statistics"), ("measures.py", "sentence_uncertainty"),
                         ("measures.py", "eos_positions")]),
    (2, "loss (cross-entropy)", [("functional.py", "cross_entropy")]),
    (2, "backward (autograd.grad)", [("__init__.py", "grad")]),
    (2, "host syncs (.item/.cpu/.tolist)", [("~", f"<method '{m}' of 'torch._C.TensorBase' objects>")
                                             for m in ("item", "cpu", "tolist")]),
    (1, "all-reduce", [("callback.py", "_sum_over_ranks")]),
    (1, "distribution update (scorer)", [("distribution.py", "update")]),
)


def part_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds of each of :data:`PARTS` in a cProfile run."""
    cumulative: dict[tuple[str, str], float] = {}
    for (filename, _, function), (_, _, _, seconds, _) in stats.stats.items():
        key = (Path(filename).name if filename != "~" else "~", function)
        cumulative[key] = cumulative.get(key, 0.0) + seconds
    return {label: sum(cumulative.get(key, 0.0) for key in keys) for _, label, keys in PARTS}


class UpdateProfiler:
    """Wraps ``trainer.balancing.update``: times every call, profiles the ``profile_call``-th one (0-based)."""

    def __init__(self, trainer: Any, profile_call: int, torch_profiler: bool) -> None:
        self.seconds: list[float] = []
        self.parts: dict[str, float] = {}
        self.operators = ""
        self.profile_call, self.torch_profiler = profile_call, torch_profiler
        self.step_seconds: list[float] = []
        self.step_tokens: list[int] = []  # padded source + target tokens of each training batch
        self._wrap(trainer.balancing, "update", self._update)
        self._wrap(trainer, "training_step", self._step)

    @staticmethod
    def _wrap(owner: Any, method: str, wrapper: Any) -> None:
        inner = getattr(owner, method)
        setattr(owner, method, lambda *args, **kwargs: wrapper(inner, *args, **kwargs))

    def _step(self, inner: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = args[1] if len(args) > 1 else kwargs["inputs"]
        self.step_tokens.append(padded_tokens(inputs))
        start = time.perf_counter()
        result = inner(*args, **kwargs)
        _synchronize()
        self.step_seconds.append(time.perf_counter() - start)
        return result

    def _update(self, inner: Any, *args: Any, **kwargs: Any) -> Any:
        if len(self.seconds) != self.profile_call:
            _synchronize()
            start = time.perf_counter()
            result = inner(*args, **kwargs)
            _synchronize()
            self.seconds.append(time.perf_counter() - start)
            return result
        profiler = cProfile.Profile()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        operators = torch.profiler.profile(activities=activities) if self.torch_profiler else None
        start = time.perf_counter()
        if operators is not None:
            operators.__enter__()
        profiler.enable()
        result = inner(*args, **kwargs)
        _synchronize()
        profiler.disable()
        if operators is not None:
            operators.__exit__(None, None, None)
            sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
            self.operators = operators.key_averages().table(sort_by=sort, row_limit=15)
        self.seconds.append(time.perf_counter() - start)
        self.parts = part_seconds(pstats.Stats(profiler))
        return result


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def dev_tokens(trainer: Any) -> tuple[int, int]:
    """(target tokens, padded source + target tokens) of one update's dev batches, over all corpora."""
    batches = [b for corpus in trainer.balancing.dev_batches() for b in corpus]
    return (sum(int((b["labels"] != -100).sum()) for b in batches),
            sum(b["input_ids"].numel() + b["labels"].numel() for b in batches))


def profile(options: argparse.Namespace, tokenizer: Any, data: dict, strategy: str) -> dict[str, Any]:
    """Train ``options.steps`` steps with an update after each; the profile of the last update."""
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(options, tokenizer, data, strategy, out, options.steps, 1)
        targets, padded = dev_tokens(trainer)
        profiler = UpdateProfiler(trainer, options.steps - 1, options.torch_profiler)
        trainer.train()
        history = load_history(out) if (Path(out) / HISTORY_FILE).exists() else []
    return {"strategy": strategy, "update_seconds": profiler.seconds, "parts": profiler.parts,
            "step_seconds": profiler.step_seconds, "step_tokens": profiler.step_tokens,
            "dev_target_tokens": targets, "dev_padded_tokens": padded,
            "operators": profiler.operators,
            "mc_samples_used": [strategy_fields(r).get("mc_samples_used") for r in history]}


def report(result: dict[str, Any], options: argparse.Namespace, corpora: int) -> None:
    seconds = result["update_seconds"]
    print(f"\n== {result['strategy']}: {options.preset}, {options.precision}, N={corpora}, K={options.mc_samples}, "
          f"dev batches {result['dev_target_tokens']} target / {result['dev_padded_tokens']} padded src+tgt tokens "
          f"in all")
    print(f"update wall seconds: cold {seconds[0]:.3f}, warm unprofiled {statistics.median(seconds[1:-1]):.3f}, "
          f"profiled {seconds[-1]:.3f}; training step (forward+backward) median "
          f"{statistics.median(result['step_seconds']):.3f} s over {statistics.median(result['step_tokens']):,.0f} "
          "padded tokens (one corpus per batch: a corpus smaller than --max-tokens gives smaller batches)")
    if result["strategy"] == "multiuat":
        used = result["mc_samples_used"]
        warm = statistics.median(seconds[1:-1]) / statistics.median(result["step_seconds"])
        paper_s = 1000 / 30 * options.mc_samples
        print(f"K used per update: {used if any(k is not None for k in used) else options.mc_samples}; a warm update "
              f"costs {warm:.2f} training steps: {100 * warm / paper_s:.2f} % of training at the paper's ratio "
              f"S = 33.3 K = {paper_s:.0f}")
    whole = result["parts"]["whole update"] or 1.0
    for indent, label, _ in PARTS:
        value = result["parts"][label]
        if value or indent == 0:
            print(f"{'  ' * indent}{label:<{40 - 2 * indent}} {value:8.3f} s {100 * value / whole:6.1f} %")
    if result["operators"]:
        print(result["operators"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_setup_arguments(parser)
    parser.add_argument("--strategies", nargs="+", default=["multiuat", "multidds-s"])
    parser.add_argument("--steps", type=int, default=3, help="Training steps, one update after each (>= 3).")
    parser.add_argument("--torch-profiler", action="store_true", help="Also print torch.profiler's operator table.")
    parser.add_argument("--json", help="Also write the results to this file.")
    options = parser.parse_args()
    if options.steps < 3:
        parser.error("--steps must be >= 3: a cold update, a timed one, a profiled one.")
    tokenizer, data = load_data(options)
    results = []
    for strategy in options.strategies:
        results.append(profile(options, tokenizer, data, strategy))
        report(results[-1], options, len(data["train"]))
    if options.json:
        Path(options.json).write_text(json.dumps({"options": vars(options), "results": results}, indent=1))


if __name__ == "__main__":
    main()
