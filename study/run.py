"""The study of issue 19: recipes × seeds trained with ``uat-train``, scored with ``uat-evaluate``, archived.

    python study/run.py                                          # the grid: study/recipes/*.yaml x their seeds
    python study/run.py --setups multidomain --regimes A         # one setup and regime
    python study/run.py --cells multidomain-A-uniform --seeds 2 --redo   # one seed, from scratch
    python study/run.py --dry-run                                # what would run, and each rerun command

A cell is one recipe, ``study/recipes/<setup>-<regime>-<strategy>.yaml``; a run is a cell and a seed, trained
in ``runs/study/<cell>/seed<N>/``. Without ``--seeds`` each cell runs its own seeds
(``grid.default_seeds``: 1, 2, 3; the known-answer cells 1-5, or 1-3 for temperature and uniform; the
share sweep 11). A known-answer cell's corpora (``runs/known-answer/``) are built first when they are missing
(``study/known_answer_data.py``). Each run goes through three steps, each skipped when its output exists:

1. train: ``uat-train --config RECIPE --seed N --output_dir RUN --torch_num_threads 1``, with
   ``--resume_from_checkpoint latest`` when RUN holds a complete checkpoint (a run whose training ended but
   whose evaluation did not is then evaluated, not trained). Done when ``RUN/recipe.yaml`` exists (uat-train
   writes it last); the checkpoints are deleted then.
2. score: the baseline of a setup and regime is its best static prior: the highest macro test BLEU
   (uat-train's ``eval_results.json``) averaged over the seeds every static prior has trained. It is known
   once they have all trained, so scoring waits until then. The known-answer groups compare with
   proportional by design (``grid.baseline_strategy``). ``uat-evaluate RUN --config RUN --output_dir
   RUN/score``; every other run adds ``--compare BASELINE_RUN/score/hypotheses --seed N`` (the baseline of
   the same seed: paired significance per corpus). Done when ``RUN/score/results.json`` exists.
3. pack: ``study/archive/unpacked/study/<cell>/seed<N>/`` gets the run's recipe.yaml, eval_results.json,
   trainer_state.json (the log history), balancing_history.jsonl, uat-evaluate's results.json,
   hypotheses/*.txt.gz and the two logs, then ``run.json`` last: a run with it is finished and skipped. No model
   weights. Its group's pack in ``study/archive/`` is then written again (``archive.py``).

Runs go ``--jobs`` (2) at a time, each with one thread. ``--device cuda`` trains and scores on the GPU (the
recipes say ``use_cpu: true``; the commands then add ``--use_cpu false``); several runs may share one GPU.
``study/report.py`` writes study/results.md from the archive alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from uat_hf.strategies.registry import get_strategy, split_variant
from uat_hf.utils.checkpoints import checkpoint_folders, last_complete_checkpoint
from uat_hf.utils.version import framework_versions

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts, however this one is loaded
import grid  # noqa: E402
from archive import ARCHIVE, STUDY, unpacked  # noqa: E402
from archive import pack as pack_archive

ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
TRAINED, SCORE_DIR, MARKER = "recipe.yaml", "score", "run.json"
PACKED = ("recipe.yaml", "eval_results.json", "trainer_state.json", "balancing_history.jsonl", "train.log",
          "score.log")

#: Runs a command with its output appended to a log file; returns the exit status. Tests inject their own.
Runner = Callable[[list[str], Path], int]


def run_command(command: list[str], log: Path) -> int:
    """``command`` (as printed: ``uat-train ...``) with one thread, its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        return subprocess.run([tool(command[0]), *command[1:]], stdout=out, stderr=subprocess.STDOUT,
                              env=checkout_env()).returncode


def checkout_env() -> dict[str, str]:
    """The commands' environment: one thread, and this checkout first on the import path. An editable install maps
    ``uat_hf`` to the checkout it was made from; a study run from another one (a worktree that keeps the code under
    study fixed while the first changes) would otherwise train that checkout's code, not the one beside its
    recipes."""
    path = os.pathsep.join(entry for entry in (str(ROOT), os.environ.get("PYTHONPATH", "")) if entry)
    return {**os.environ, **ONE_THREAD, "PYTHONPATH": path}


def machine(device: str) -> dict:
    """Where a run trained, and with which frameworks: the GPU's name on ``cuda`` (runs on different cards or on the
    CPU are not paired)."""
    import torch

    # The CPU's vector instructions choose PyTorch's kernels, and so how sums round: a rerun elsewhere can differ.
    found = {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": 1, "device": device,
             "cpu_capability": torch.backends.cpu.get_cpu_capability(), "frameworks": framework_versions()}
    if device == "cuda":
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


def say(message: str) -> None:
    print(f"[study {time.strftime('%H:%M:%S')}] {message}", flush=True)


def tool(name: str) -> str:
    """The console script beside this interpreter (a venv need not be activated), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else name


def parts(cell: str) -> tuple[str, str, str]:
    """``<setup>-<regime>-<strategy>`` → its three parts (a strategy may hold a hyphen: multiuat-entsent)."""
    setup, regime, strategy = cell.split("-", 2)
    return setup, regime, strategy


@dataclass(frozen=True)
class Run:
    cell: str
    seed: int

    @property
    def group(self) -> str:
        """``<setup>-<regime>``: the runs that share a baseline and a table."""
        return "-".join(parts(self.cell)[:2])

    @property
    def strategy(self) -> str:
        return parts(self.cell)[2]

    @property
    def name(self) -> str:
        return f"{self.cell}/seed{self.seed}"


@dataclass
class Study:
    recipes: Path
    runs: Path
    archive: Path
    runner: Runner = run_command
    jobs: int = 2
    device: str = "cpu"
    packs: Path | None = None  # the archive's packs (archive.py): a group is packed again after each of its runs

    # ------------------------------------------------------------------ where things are
    def run_dir(self, run: Run) -> Path:
        return self.runs / run.cell / f"seed{run.seed}"

    def archive_dir(self, run: Run) -> Path:
        return self.archive / run.cell / f"seed{run.seed}"

    def recipe(self, run: Run) -> Path:
        return self.recipes / f"{run.cell}.yaml"

    def finished(self, run: Run) -> bool:
        return (self.archive_dir(run) / MARKER).is_file()

    def trained(self, run: Run) -> bool:
        return self.finished(run) or (self.run_dir(run) / TRAINED).is_file()

    def scored(self, run: Run) -> bool:
        return self.finished(run) or (self.run_dir(run) / SCORE_DIR / "results.json").is_file()

    def cells(self) -> list[str]:
        return sorted(path.stem for path in self.recipes.glob("*.yaml"))

    # ------------------------------------------------------------------ commands
    def train_command(self, run: Run) -> list[str]:
        command = ["uat-train", "--config", str(self.recipe(run)), "--seed", str(run.seed),
                   "--output_dir", str(self.run_dir(run)), "--torch_num_threads", "1"]
        if last_complete_checkpoint(str(self.run_dir(run))) is not None:
            command += ["--resume_from_checkpoint", "latest"]
        return command + self._device_arguments()

    def _device_arguments(self) -> list[str]:
        return ["--use_cpu", "false"] if self.device == "cuda" else []

    def score_command(self, run: Run, baseline: Run | None) -> list[str]:
        folder = self.run_dir(run)
        command = ["uat-evaluate", str(folder), "--config", str(folder), "--output_dir",
                   str(folder / SCORE_DIR), "--seed", str(run.seed)]
        if baseline is not None and baseline != run:
            command += ["--compare", str(self.run_dir(baseline) / SCORE_DIR / "hypotheses")]
        return command + self._device_arguments()

    def rerun_command(self, run: Run) -> str:
        device = " --device cuda" if self.device == "cuda" else ""
        return f"python study/run.py --cells {run.cell} --seeds {run.seed}{device} --redo"

    # ------------------------------------------------------------------ baseline
    def baseline(self, group: str) -> tuple[str, list[int]] | None:
        """The best static prior of ``group`` and the seeds it was chosen on, or ``None`` while some static
        prior has trained none of the seeds the others have. A group whose baseline is fixed by design
        (:func:`grid.baseline_strategy`) gets that cell and the seeds it has trained."""
        fixed = grid.baseline_strategy(group)
        if fixed is not None:
            cell = f"{group}-{fixed}"
            seeds = sorted(self._trained_seeds(cell))
            return (cell, seeds) if cell in self.cells() and seeds else None
        static = [cell for cell in self.cells() if "-".join(parts(cell)[:2]) == group
                  and not get_strategy(split_variant(grid.base_strategy(parts(cell)[2]))[0]).learns]
        seeds = None
        for cell in static:
            trained = self._trained_seeds(cell)
            seeds = trained if seeds is None else seeds & trained
        if not static or not seeds:
            return None
        means = {cell: sum(self.test_bleu(Run(cell, seed)) for seed in seeds) / len(seeds) for cell in static}
        return max(means, key=means.get), sorted(seeds)

    def _trained_seeds(self, cell: str) -> set[int]:
        return {int(p.name[4:]) for p in self._seed_dirs(cell) if self.trained(Run(cell, int(p.name[4:])))}

    def _seed_dirs(self, cell: str) -> Iterable[Path]:
        for root in (self.runs, self.archive):
            yield from (root / cell).glob("seed*")

    def test_bleu(self, run: Run) -> float:
        """Macro test BLEU of uat-train's own evaluation (from the run folder, else from the archive)."""
        for folder in (self.run_dir(run), self.archive_dir(run)):
            if (folder / "eval_results.json").is_file():
                return json.loads((folder / "eval_results.json").read_text())["eval_mean_bleu"]
        raise FileNotFoundError(f"{run.name}: no eval_results.json in {self.run_dir(run)} or the archive")

    def baseline_hypotheses(self, baseline: Run) -> Path:
        """The baseline's hypotheses folder; restored from the archive when the run folder is gone."""
        folder = self.run_dir(baseline) / SCORE_DIR / "hypotheses"
        if not folder.is_dir() and self.finished(baseline):
            unpack_hypotheses(self.archive_dir(baseline), folder)
        return folder

    def missing_corpora(self, runs: Iterable[Run]) -> list[Path]:
        """The known-answer corpus folders (``runs/known-answer/<setup>``) that the recipes of ``runs`` read and
        that are not built yet (relative to the working directory, as uat-train reads them)."""
        folders = set()
        for cell in {run.cell for run in runs}:
            corpus_dir = str(yaml.safe_load(self.recipe(Run(cell, 0)).read_text()).get("corpus_dir") or "")
            if corpus_dir.startswith(grid.KNOWN_ANSWER_DIR + "/"):
                folders.add(Path(corpus_dir))
        from known_answer_data import built

        return sorted(folder for folder in folders if not built(folder))

    # ------------------------------------------------------------------ steps
    def train(self, run: Run) -> None:
        self._check(self.runner(self.train_command(run), self.run_dir(run) / "train.log"), run, "uat-train")
        if not (self.run_dir(run) / TRAINED).is_file():
            raise RuntimeError(f"{run.name}: uat-train exited 0 but wrote no {TRAINED}")
        for folder in checkpoint_folders(str(self.run_dir(run))):
            shutil.rmtree(folder)

    def score(self, run: Run, baseline: Run | None) -> None:
        if baseline is not None and baseline != run:
            self.baseline_hypotheses(baseline)
        self._check(self.runner(self.score_command(run, baseline), self.run_dir(run) / "score.log"), run,
                    "uat-evaluate")
        self.pack(run, baseline)

    def _check(self, status: int, run: Run, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{run.name}: {what} exited {status}; see its log in {self.run_dir(run)}")

    def pack(self, run: Run, baseline: Run | None) -> None:
        source, target = self.run_dir(run), self.archive_dir(run)
        if target.exists():
            shutil.rmtree(target)
        (target / "hypotheses").mkdir(parents=True)
        for name in PACKED:
            if (source / name).is_file():
                shutil.copyfile(source / name, target / name)
        shutil.copyfile(source / SCORE_DIR / "results.json", target / "results.json")
        for hypotheses in sorted((source / SCORE_DIR / "hypotheses").glob("*.txt")):
            with gzip.GzipFile(target / "hypotheses" / f"{hypotheses.name}.gz", "wb", mtime=0) as out:
                out.write(hypotheses.read_bytes())
        train_log = (source / "train.log").read_text(encoding="utf-8") if (source / "train.log").is_file() else ""
        marker = {
            "cell": run.cell, "group": run.group, "strategy": run.strategy, "seed": run.seed,
            "baseline": baseline.strategy if baseline is not None else None,
            "train_command": shlex.join(self.train_command(run)),  # checkpoints are gone: no resume flag
            "score_command": shlex.join(self.score_command(run, baseline)),
            "rerun": self.rerun_command(run),
            "train_attempts": train_log.count("$ "),
            "machine": machine(self.device),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        (target / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if self.packs is not None:
            pack_archive(self.packs, cells=[run.cell])

    # ------------------------------------------------------------------ the grid
    def run_all(self, selected: list[Run], *, dry_run: bool = False) -> list[str]:
        """Group by group (setup and regime, in name order: multidomain-A first), train, then score and pack
        ``selected`` (and the baseline runs their scoring needs); returns the errors."""
        errors: list[str] = []
        to_train = [run for run in selected if not self.trained(run)]
        say(f"{len(selected)} runs selected: {sum(map(self.finished, selected))} finished, {len(to_train)} to train")
        if dry_run:
            for run in to_train:
                print(shlex.join(self.train_command(run)))
            return errors
        for group in sorted({run.group for run in selected}):
            errors += self._parallel("trained", self.train, [run for run in to_train if run.group == group])
            errors += self._score_group(group, [run for run in selected if run.group == group])
        return errors

    def _score_group(self, group: str, runs: list[Run]) -> list[str]:
        errors: list[str] = []
        chosen = self.baseline(group)
        waiting = [run for run in runs if self.trained(run) and not self.finished(run)]
        if chosen is None:
            if waiting:
                awaited = grid.baseline_strategy(group) or "every static prior"
                say(f"{group}: {len(waiting)} trained runs wait for {awaited} to train a seed")
            return errors
        cell, seeds = chosen
        say(f"{group}: baseline {cell} (best static prior, mean test BLEU over seeds {seeds})")
        base = {run.seed: Run(cell, run.seed) for run in waiting}
        first = sorted({b for b in base.values() if not self.finished(b) and self.trained(b)}, key=str)
        errors += self._parallel("scored (baseline)", lambda run: self._score_if_needed(run, run), first)
        rest = [run for run in waiting if run not in first and self.finished(base[run.seed])]
        errors += self._parallel("scored", lambda run: self._score_if_needed(run, Run(cell, run.seed)), rest)
        for run in waiting:
            if not self.finished(run) and not self.finished(base[run.seed]):
                errors.append(f"{run.name}: its baseline {base[run.seed].name} has not finished")
        return errors

    def _score_if_needed(self, run: Run, baseline: Run) -> None:
        if self.scored(run) and not self.finished(run):
            self.pack(run, None if baseline == run else baseline)
        elif not self.finished(run):
            self.score(run, None if baseline == run else baseline)

    def _parallel(self, done: str, step: Callable[[Run], None], runs: list[Run]) -> list[str]:
        """``step`` on every run, ``jobs`` at a time; a failed run is reported and the others go on."""
        def attempt(run: Run) -> str | None:
            try:
                step(run)
                say(f"{run.name}: {done}")
                return None
            except RuntimeError as error:
                say(str(error))
                return str(error)

        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return [error for error in pool.map(attempt, runs) if error]

    def forget(self, runs: Iterable[Run], *, training: bool) -> None:
        """``--redo``/``--rescore``: drop the archive of ``runs`` and their scoring (and training)."""
        for run in runs:
            shutil.rmtree(self.archive_dir(run), ignore_errors=True)
            shutil.rmtree(self.run_dir(run) if training else self.run_dir(run) / SCORE_DIR, ignore_errors=True)
        if self.packs is not None:
            pack_archive(self.packs, cells=sorted({run.cell for run in runs}))


def unpack_hypotheses(archived: Path, folder: Path) -> Path:
    """An archived run's ``hypotheses/<corpus>.txt.gz`` as the ``<corpus>.txt`` folder that ``uat-evaluate
    --compare`` (:func:`uat_hf.evaluation.saved_runs.read_hypotheses`) reads."""
    folder.mkdir(parents=True)
    for packed in (archived / "hypotheses").glob("*.txt.gz"):
        (folder / packed.name[:-3]).write_bytes(gzip.decompress(packed.read_bytes()))
    return folder


def build_missing_corpora(study: Study, runs: list[Run], *, dry_run: bool = False) -> None:
    """Build the known-answer corpora that the recipes of ``runs`` read and that are missing."""
    missing = study.missing_corpora(runs)
    for folder in missing:
        say(f"{folder}: not built yet; {'would build' if dry_run else 'building'} it with "
            "python study/known_answer_data.py")
    if missing and not dry_run:
        from known_answer_data import build

        for folder in missing:
            build(folder.parent, setups=(folder.name,))


def select(cells: list[str], *, setups=None, regimes=None, strategies=None, only=None, seeds=None) -> list[Run]:
    """The runs of the cells that match every filter given, for every seed of ``seeds`` (``None``: each cell's
    own, :func:`grid.default_seeds`)."""
    chosen = [cell for cell in cells
              if (not setups or parts(cell)[0] in setups) and (not regimes or parts(cell)[1] in regimes)
              and (not strategies or parts(cell)[2] in strategies) and (not only or cell in only)]
    unknown = sorted(set(only or ()) - set(cells))
    if unknown:
        raise SystemExit(f"unknown cells {unknown}; the recipes define {cells}")
    return [Run(cell, seed) for cell in chosen for seed in (seeds or grid.default_seeds(cell))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", nargs="*", help="multidomain, multilingual (default: all)")
    parser.add_argument("--regimes", nargs="*", help="A, B, B2 (default: all)")
    parser.add_argument("--strategies", nargs="*", help="e.g. proportional multiuat-entsent (default: all)")
    parser.add_argument("--cells", nargs="*", help="whole cell names, e.g. multidomain-A-uniform")
    parser.add_argument("--seeds", nargs="+", type=int,
                        help="default: each cell's own (1 2 3; known-answer cells 1-5 or 1-3; the share sweep 11)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: train and score on the GPU, --jobs runs sharing it (default: cpu, as the recipes)")
    parser.add_argument("--recipes", type=Path, default=Path("study/recipes"), help="relative to the repository")
    parser.add_argument("--runs", type=Path, default=Path("runs/study"))
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="the archive's packs (study/archive.py)")
    parser.add_argument("--redo", action="store_true", help="train and score the selected runs again from scratch")
    parser.add_argument("--rescore", action="store_true", help="score the selected runs again (after a baseline "
                        "seed was redone)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run and the rerun commands")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # recipes point at ../shared/corpora and the commands it prints are run from here
    study = Study(args.recipes, args.runs, unpacked(args.archive) / STUDY, jobs=args.jobs, device=args.device,
                  packs=args.archive)
    selected = select(study.cells(), setups=args.setups, regimes=args.regimes, strategies=args.strategies,
                      only=args.cells, seeds=args.seeds)
    if not selected:
        raise SystemExit("no run matches the filters")
    if args.device == "cuda" and not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda, but torch sees no CUDA device here: run on a GPU machine with a CUDA "
                             "build of torch, or leave --device out to train on the CPU.")
    build_missing_corpora(study, selected, dry_run=args.dry_run)
    if args.redo or args.rescore:
        study.forget(selected, training=args.redo)
    errors = study.run_all(selected, dry_run=args.dry_run)
    for run in selected:
        state = "finished" if study.finished(run) else "trained" if study.trained(run) else "to train"
        print(f"{run.name:<40} {state:<9} rerun alone: {study.rerun_command(run)}")
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
