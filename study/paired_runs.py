"""Paired comparison of two archived sets of runs, seed by seed, from their hypotheses alone (no model needed).

    python study/paired_runs.py study/archive/unpacked/study/multidomain-B-mixing-law \\
        study/archive/unpacked/study_checks/multidomain-B-proportional-cpu --seeds 1 2 3

Each folder holds ``seed<N>/`` as ``study/run.py`` archives a run: ``recipe.yaml``, ``results.json`` and
``hypotheses/<corpus>.txt.gz``. The study driver pairs every cell with the best static prior of its own grid;
this script pairs runs the driver does not, such as a check retrained on another device (study/study.md,
"Device check"), where only runs trained on the same device make a pair. The test sets are read from the
first folder's recipe, as ``uat-evaluate`` reads them; each corpus gets ``uat-evaluate --compare``'s paired
test (:func:`uat_hf.evaluation.saved_runs.paired_significance`, seeded with the run's seed), and the seeds give the
mean difference of the macro BLEU with the smallest difference a paired t-test over them could detect.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from archive import unpacked
from run import unpack_hypotheses
from stats import detectable

from uat_hf.cli.evaluate import parse_arguments
from uat_hf.cli.train_data import evaluation_specs
from uat_hf.data.corpora import load_corpus_split
from uat_hf.evaluation.saved_runs import paired_significance, read_hypotheses


def references(run: Path) -> dict[str, list[str]]:
    """The test references of every in-domain corpus of the run's recipe, as uat-evaluate scores them."""
    data, _ = parse_arguments(["archived-run", "--config", str(run / "recipe.yaml")])
    specs, _ = evaluation_specs(data)
    targets = {spec.name: load_corpus_split(spec, data.eval_split)["target"] for spec in specs}
    return {name: refs[:data.max_eval_examples] for name, refs in targets.items()}


def compare(system: Path, baseline: Path, seed: int) -> dict:
    """Per corpus: system and baseline BLEU and the paired test's p-value; and the two macro means."""
    runs = {"system": system / f"seed{seed}", "baseline": baseline / f"seed{seed}"}
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        folders = {side: unpack_hypotheses(run, Path(scratch) / side) for side, run in runs.items()}
        for corpus, refs in references(runs["system"]).items():
            system_lines, baseline_lines = (read_hypotheses(folders[side], corpus, expected=len(refs))
                                            for side in ("system", "baseline"))
            rows[corpus] = paired_significance(system_lines, baseline_lines, refs, seed=seed)[0]["bleu"]
    means = {side: statistics.mean(row[side] for row in rows.values()) for side in runs}
    for side, run in runs.items():  # the hypotheses are the ones the archive scored
        archived = json.loads((run / "results.json").read_text())["mean"]["bleu"]
        if abs(means[side] - archived) > 0.01:
            raise ValueError(f"{run}: its hypotheses score {side} BLEU other than its results.json ({archived:.2f}).")
    return {"corpora": rows, **means}


def report(system: Path, baseline: Path, seeds: list[int]) -> str:
    compared = {seed: compare(system, baseline, seed) for seed in seeds}
    corpora = list(next(iter(compared.values()))["corpora"])
    lines = [f"system: {system}; baseline: {baseline}; paired bootstrap (1,000 resamples, seeded with the seed)", "",
             f"| seed | baseline | system | Δ mean BLEU | {' | '.join(f'{c} Δ (p)' for c in corpora)} |",
             "|---" * (len(corpora) + 4) + "|"]
    for seed, c in compared.items():
        cells = [f"{r['system'] - r['baseline']:+.2f} ({r['p_value']:.3f}{'*' if r['p_value'] < 0.05 else ''})"
                 for r in c["corpora"].values()]
        lines.append(f"| {seed} | {c['baseline']:.2f} | {c['system']:.2f} | {c['system'] - c['baseline']:+.2f} | "
                     f"{' | '.join(cells)} |")
    deltas = [c["system"] - c["baseline"] for c in compared.values()]
    summary = f"mean Δ {statistics.mean(deltas):+.2f} over {len(deltas)} seed{'s' if len(deltas) > 1 else ''}"
    if len(deltas) > 1:
        sd = statistics.stdev(deltas)
        smallest = detectable(sd, len(deltas))
        summary += f", sd {sd:.2f}" + (f", smallest detectable Δ (80 % power) {smallest:.2f}"
                                        if smallest is not None else "")
    return "\n".join(lines + ["", summary])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", type=Path, help="folder of seed<N>/ archives: the runs under test")
    parser.add_argument("baseline", type=Path, help="folder of seed<N>/ archives: the runs compared with")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args(argv)
    unpacked()  # the folders named are under study/archive/unpacked/: extract what changed
    print(report(args.system, args.baseline, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
