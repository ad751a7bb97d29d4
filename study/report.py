"""Writes study/results.md (and study/figures/) from the study archive alone (``study/run.py``).

    python study/report.py            # study/archive/unpacked/study/ → study/results.md, study/figures/*.png

The page states numbers: per corpus BLEU and chrF mean ± sd over seeds and their macro mean; uat-evaluate's
paired test of every run against the best static prior of the same seed; the seed-to-seed sd and the
smallest difference three seeds can detect; the dev loss of the largest corpus where the runs evaluated on
dev; p curves and the MultiDDS-S cosine heatmap. It draws no conclusion: each setup and regime gets a marked
placeholder for the one sentence a person writes after reading the tables. Regenerating keeps sentences
already written there.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import grid
import numpy as np
import yaml
from archive import ARCHIVE, STUDY, unpacked
from copy_view import copy_view_lines
from known_answer_report import intact_corpora, is_known_answer, known_answer_lines
from stats import detectable, mean_sd, verdicts
from stats import num as _num

from uat_hf.evaluation.history import load_history, strategy_fields

ROOT = Path(__file__).resolve().parent.parent
STATIC = ("proportional", "temperature", "uniform")
ORDER = STATIC + ("oracle", "multidds-s", "multiuat-enteos", "multiuat-exptp", "multiuat-entsent", "mixing-law")
#: The strategy whose target (issue 26) each table states: never detectably below the best static prior, and
#: detectably above it (a paired t-test over the seeds) in at least one setup.
TARGET = "mixing-law"
#: A run took off when every corpus's test chrF reaches this: runs that did not (the one-epoch study of
#: study/archive/unpacked/previous/README.md) repeat a few frequent words and score chrF 4–12.
TAKEOFF_CHRF = 15.0
PLACEHOLDER = "_To be written by a person: one sentence stating what the numbers below show._"
FINDING = re.compile(r"<!-- finding (\S+) -->\n(.*?)\n<!-- /finding -->", re.S)
_DATA_LINE = re.compile(r"\[uat-train\] data: (.*)")


@dataclass
class ArchivedRun:
    """One finished run, as packed by the driver."""

    folder: Path
    cell: str
    group: str
    strategy: str
    seed: int
    baseline: str | None
    recipe: dict
    results: dict
    log_history: list = field(default_factory=list)
    train_sizes: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)

    @property
    def history(self) -> Path:
        return self.folder / "balancing_history.jsonl"


def load_archive(archive: Path) -> list[ArchivedRun]:
    runs = []
    for marker in sorted(archive.glob("*/seed*/run.json")):
        folder, meta = marker.parent, json.loads(marker.read_text())
        state = folder / "trainer_state.json"
        log = (folder / "train.log").read_text(encoding="utf-8") if (folder / "train.log").is_file() else ""
        sizes = _DATA_LINE.findall(log)
        runs.append(ArchivedRun(
            folder, meta["cell"], meta["group"], meta["strategy"], meta["seed"], meta["baseline"],
            yaml.safe_load((folder / "recipe.yaml").read_text()), json.loads((folder / "results.json").read_text()),
            json.loads(state.read_text())["log_history"] if state.is_file() else [],
            {name: int(count) for name, count in re.findall(r"(\S+) (\d+) train /", sizes[-1])} if sizes else {},
            meta.get("machine", {}),
        ))
    return runs


def _strategies(runs: list[ArchivedRun]) -> list[str]:
    names = {run.strategy for run in runs}
    return [s for s in ORDER if s in names] + sorted(names - set(ORDER))


def best_static(runs: list[ArchivedRun]) -> str | None:
    """The static prior with the highest macro BLEU averaged over its seeds (what the driver compared with)."""
    means = {s: statistics.mean(r.results["mean"]["bleu"] for r in runs if r.strategy == s)
             for s in STATIC if any(r.strategy == s for r in runs)}
    return max(means, key=means.get) if means else None


def score_table(runs: list[ArchivedRun], corpora: list[str], metric: str) -> list[str]:
    lines = [f"| strategy | seeds | {' | '.join(corpora)} | mean |", "|---" * (len(corpora) + 3) + "|"]
    for strategy in _strategies(runs):
        mine = [r for r in runs if r.strategy == strategy]
        cells = [mean_sd([r.results["scores"][c][metric] for r in mine if c in r.results["scores"]]) for c in corpora]
        cells.append(mean_sd([r.results["mean"][metric] for r in mine]))
        lines.append(f"| {strategy} | {len(mine)} | {' | '.join(cells)} |")
    return lines


def significance_table(runs: list[ArchivedRun], corpora: list[str], baseline: str) -> list[str]:
    by_key = {(r.strategy, r.seed): r for r in runs}
    lines = [f"| strategy | seed | compared with | Δ mean BLEU | {' | '.join(f'{c} ΔBLEU (p)' for c in corpora)} |",
             "|---" * (len(corpora) + 4) + "|"]
    for strategy in _strategies(runs):
        for run in sorted((r for r in runs if r.strategy == strategy), key=lambda r: r.seed):
            test = run.results.get("significance")
            base = by_key.get((run.baseline, run.seed))
            if test is None or base is None:
                lines.append(f"| {strategy} | {run.seed} | {run.baseline or '— (the baseline)'} | – |"
                             + " – |" * len(corpora))
                continue
            delta = run.results["mean"]["bleu"] - base.results["mean"]["bleu"]
            cells = []
            for corpus in corpora:
                bleu = test["corpora"].get(corpus, {}).get("bleu")
                cells.append("–" if bleu is None else f"{bleu['system'] - bleu['baseline']:+.2f} "
                             f"({bleu['p_value']:.3f}{'*' if bleu['significant'] else ''})")
            lines.append(f"| {strategy} | {run.seed} | {run.baseline} | {delta:+.2f} | {' | '.join(cells)} |")
    return lines


def variation_table(runs: list[ArchivedRun], baseline: str) -> list[str]:
    base = {r.seed: r.results["mean"]["bleu"] for r in runs if r.strategy == baseline}
    lines = ["| strategy | seeds | sd of mean BLEU | mean Δ vs baseline | sd of paired Δ | smallest detectable Δ "
             "(80 % power) |",
             "|---|---|---|---|---|---|"]
    variances, paired_variances = [], []
    for strategy in _strategies(runs):
        scores = {r.seed: r.results["mean"]["bleu"] for r in runs if r.strategy == strategy}
        sd = statistics.stdev(scores.values()) if len(scores) > 1 else None
        deltas = [scores[s] - base[s] for s in sorted(scores) if s in base]
        paired = statistics.stdev(deltas) if len(deltas) > 1 and strategy != baseline else None
        smallest = detectable(paired, len(deltas)) if paired is not None else None
        if sd is not None:
            variances.append(sd ** 2)
        if paired is not None:
            paired_variances.append(paired ** 2)
        lines.append(f"| {strategy} | {len(scores)} | {_num(sd)} | "
                     f"{_num(statistics.mean(deltas), '+.2f') if deltas and strategy != baseline else '–'} | "
                     f"{_num(paired)} | {_num(smallest)} |")
    n = len(base)
    if paired_variances and n > 1:
        pooled = math.sqrt(statistics.mean(paired_variances))
        lines.append(f"| pooled | {n} | {_num(math.sqrt(statistics.mean(variances)))} | | {pooled:.2f} | "
                     f"{_num(detectable(pooled, n))} |")
    return lines


def target_line(runs: list[ArchivedRun], baseline: str) -> str:
    """Whether :data:`TARGET`'s macro BLEU is (a) not detectably below the baseline and (b) above it (a two-sided
    paired t-test over the seeds, α = 0.05), with the smallest true difference the seeds detect (80 % power)."""
    base = {r.seed: r.results["mean"]["bleu"] for r in runs if r.strategy == baseline}
    deltas = [r.results["mean"]["bleu"] - base[r.seed] for r in runs if r.strategy == TARGET and r.seed in base]
    if len(deltas) < 2:
        return f"{TARGET}: {len(deltas)} paired seed(s) against {baseline}; no test yet."
    verdict, mean, p, smallest = verdicts([deltas])[0]
    return (f"{TARGET} against {baseline} over {len(deltas)} paired seeds: mean Δ {mean:+.2f} BLEU, p {p:.3f}, "
            f"smallest detectable Δ (80 % power) {smallest:.2f}; (a) not detectably below: "
            f"{'no' if verdict == 'below' else 'yes'}; (b) above: {'yes' if verdict == 'above' else 'no'}.")


def law_prediction(history: list[dict]) -> list[float]:
    """Per update after the first: how well the law fitted at the previous update predicted this probe phase.

    Window m (favouring corpus j) moved dev loss i by the measured fall ``losses[m] − losses[m+1]``; the previous
    law predicts ``(A q_j)_i`` for it, q_j being this phase's mix of that window. Both are centred per dev corpus
    over the windows, so the fall every window shares (training goes on) is left out and only what the law is
    for remains: which corpus helps which. Returns Pearson's r of the two, one per predicted phase.
    """
    scores = []
    for previous, record in zip(map(strategy_fields, history), map(strategy_fields, history[1:])):
        law, losses = np.asarray(previous["law"]), np.asarray(record["probe_losses"])
        mixes, order = np.asarray(record["probe_mixes"]), record["probe_order"]
        measured = losses[:len(order)] - losses[1:len(order) + 1]
        predicted = np.stack([law @ mixes[j] for j in order])
        measured, predicted = measured - measured.mean(axis=0), predicted - predicted.mean(axis=0)
        if measured.std() > 0 and predicted.std() > 0:
            scores.append(float(np.corrcoef(measured.ravel(), predicted.ravel())[0, 1]))
    return scores


def law_table(runs: list[ArchivedRun]) -> list[str]:
    """For :data:`TARGET`'s runs: the law's out-of-sample prediction of each next probe phase, and where p went."""
    chosen = [r for r in runs if r.strategy == TARGET and r.history.is_file()]
    if not chosen:
        return []
    corpora = sorted(chosen[0].train_sizes) or sorted(load_history(chosen[0].history)[0]["probabilities"])
    lines = ["How well each fitted law predicted the next probe phase (Pearson r of the measured and the predicted "
             "dev-loss falls of its windows, centred per dev corpus; 0 is no skill), and p at the end against the "
             "prior (the share of training examples).", "",
             f"| seed | updates | r, mean | r > 0 | {' | '.join(f'p {c} (prior)' for c in corpora)} |",
             "|---" * (4 + len(corpora)) + "|"]
    for run in sorted(chosen, key=lambda r: r.seed):
        history = load_history(run.history)
        scores, final = law_prediction(history), history[-1]["probabilities"]
        total = sum(run.train_sizes.values())
        shares = [f"{final[c]:.3f} ({run.train_sizes[c] / total:.3f})" if total else f"{final[c]:.3f}"
                  for c in corpora]
        lines.append(f"| {run.seed} | {len(history)} | {_num(statistics.mean(scores) if scores else None)} | "
                     f"{sum(r > 0 for r in scores)} of {len(scores)} | {' | '.join(shares)} |")
    return lines


def lowest_chrf(run: ArchivedRun) -> tuple[str, float]:
    """The corpus with the lowest test chrF of a run, and that chrF."""
    corpus = min(run.results["scores"], key=lambda name: run.results["scores"][name]["chrf"])
    return corpus, run.results["scores"][corpus]["chrf"]


def takeoff_line(runs: list[ArchivedRun]) -> str:
    """The take-off criterion and the runs that fail it."""
    lowest = [(run, *lowest_chrf(run)) for run in runs]
    failed = [f"{run.cell} seed {run.seed} ({corpus} chrF {chrf:.1f})" for run, corpus, chrf in lowest
              if chrf < TAKEOFF_CHRF]
    verdict = (f"all {len(runs)} runs took off (lowest corpus chrF {min(c for _, _, c in lowest):.1f})"
               if not failed else f"{len(failed)} of {len(runs)} runs did not take off: {'; '.join(failed)}")
    return f"Take-off (every corpus's test chrF ≥ {TAKEOFF_CHRF:g}): {verdict}."


def machines_line(runs: list[ArchivedRun]) -> str:
    """Where the runs trained (driver's run.json): runs of one table should share it."""
    where = sorted({f"one {m['gpu']} shared by the runs of the grid, one CPU thread each" if m.get("device") == "cuda"
                    else f"CPU, {m.get('cpus', '?')} cores, one thread per run" for m in (r.machine for r in runs)})
    return f"Trained and scored on: {'; '.join(where)}."


def convergence_table(runs: list[ArchivedRun]) -> list[str]:
    """Dev loss of the largest training corpus at each in-training evaluation, mean over seeds."""
    largest = next((max(r.train_sizes, key=r.train_sizes.get) for r in runs if r.train_sizes), None)
    key = f"eval_{largest}_loss"
    steps = sorted({e["step"] for r in runs for e in r.log_history if key in e})
    if largest is None or len(steps) < 2:
        return []
    lines = [f"Dev loss of the largest training corpus, {largest}, at each evaluation during training (mean over "
             "seeds); the last column is the relative change over the last interval.", "",
             f"| strategy | {' | '.join(f'step {s}' for s in steps)} | change |", "|---" * (len(steps) + 2) + "|"]
    for strategy in _strategies(runs):
        losses = defaultdict(list)
        for run in (r for r in runs if r.strategy == strategy):
            for entry in run.log_history:
                if key in entry:
                    losses[entry["step"]].append(entry[key])
        means = [statistics.mean(losses[s]) if losses[s] else None for s in steps]
        change = (means[-1] - means[-2]) / means[-2] if None not in means[-2:] else None
        lines.append(f"| {strategy} | {' | '.join(_num(m, '.3f') for m in means)} | {_num(change, '+.1%')} |")
    return lines


def figures(runs: list[ArchivedRun], out: Path, page: Path) -> list[str]:
    """p over training for every dynamic strategy and the MultiDDS-S cosine heatmap, from the lowest seed."""
    from uat_hf.evaluation.plotting import plot_cosine_heatmap, plot_law_heatmap, plot_probabilities

    lines = []
    for strategy in _strategies(runs):
        run = min((r for r in runs if r.strategy == strategy and r.history.is_file()), key=lambda r: r.seed,
                  default=None)
        if run is None:
            continue
        title = f"{run.cell}, seed {run.seed}"
        drawn = [plot_probabilities(run.history, out / f"{run.cell}_p.png", title=f"p — {title}")]
        if strategy == "multidds-s":
            drawn.append(plot_cosine_heatmap(run.history, out / f"{run.cell}_cosine.png", title=f"cosine — {title}"))
        if strategy == "mixing-law":
            drawn.append(plot_law_heatmap(run.history, out / f"{run.cell}_law.png", title=f"mean law A — {title}"))
        lines += [f"![{path.stem}]({path.relative_to(page.parent).as_posix()})" for path in drawn]
    return lines


def group_section(group: str, runs: list[ArchivedRun], findings: dict[str, str], out: Path, page: Path) -> list[str]:
    corpora = sorted({c for r in runs for c in r.results["scores"]})
    fixed = grid.baseline_strategy(group)  # proportional in the known-answer groups, by design
    baseline = fixed or best_static(runs)
    compared = (f"Compared with: {fixed} (by design; best static prior by mean BLEU: {best_static(runs) or '–'})"
                if fixed else f"Best static prior (mean BLEU over seeds): {baseline or '–'}")
    recipe = runs[0].recipe
    seeds = sorted({r.seed for r in runs})
    lines = [f"## {group}", "", f"<!-- finding {group} -->", findings.get(group, f"**Finding:** {PLACEHOLDER}"),
             "<!-- /finding -->", "",
             f"{len(runs)} runs, seeds {', '.join(map(str, seeds))}; {recipe.get('max_steps')} steps, train_fraction "
             f"{recipe.get('train_fraction', 1)}, corpora {_corpus_dir(recipe.get('corpus_dir'))}; "
             f"{recipe.get('generation_num_beams')}-beam decoding of the {recipe.get('eval_split', 'test')} sets. "
             f"{compared}. {machines_line(runs)}", "",
             takeoff_line(runs), ""]
    for metric, title in (("bleu", "BLEU"), ("chrf", "chrF")):
        lines += [f"### {title}, mean ± sd over seeds", "", *score_table(runs, corpora, metric), ""]
    if baseline:
        tests = {r.results["significance"]["test"] for r in runs if r.results.get("significance")}
        lines += [f"### Paired test against {fixed or 'the best static prior'}, same seed", "",
                  f"uat-evaluate's paired {'/'.join(sorted(tests)) or '–'} test per corpus (bs: bootstrap "
                  "resampling, ar: approximate randomization) of BLEU; * p < alpha. Δ mean BLEU is the "
                  "difference of the macro means.", "", *significance_table(runs, corpora, baseline), "",
                  "### Seed-to-seed variation and the smallest detectable difference", "",
                  "sd over seeds of each run's macro BLEU; paired Δ = strategy − baseline of the same seed. The "
                  "smallest detectable Δ is the true mean difference a two-sided paired t-test over n seeds "
                  "(α = 0.05) finds with 80 % power: (t(0.975, n−1) + t(0.8, n−1)) · sd(Δ) / √n (5.36 · sd / √3 "
                  "for n = 3); a smaller true difference is more often missed than found. The pooled row takes "
                  "the root mean of the variances.", "", *variation_table(runs, baseline), ""]
        if any(r.strategy == TARGET for r in runs):
            lines += [target_line(runs, baseline), "", *law_table(runs), ""]
        if is_known_answer(group):
            lines += known_answer_lines(group, runs, baseline, _strategies(runs))
        intact = intact_corpora(group.split("-")[0], corpora) if is_known_answer(group) else corpora
        lines += copy_view_lines(runs, [intact] + ([corpora] if intact != corpora else []), baseline,
                                 _strategies(runs),
                                 _corpus_dir(recipe.get("corpus_dir")))
    convergence = convergence_table(runs)
    if convergence:
        lines += ["### Convergence", "", *convergence, ""]
    drawn = figures(runs, out, page)
    if drawn:
        lines += ["### Corpus distribution p during training (MultiDDS-S gradient cosines, mixing-law's law)", "",
                  *drawn, ""]
    return lines


def write_report(archive: Path, page: Path, figures_dir: Path) -> str:
    runs = load_archive(archive)
    findings = dict(FINDING.findall(page.read_text(encoding="utf-8"))) if page.is_file() else {}
    groups = defaultdict(list)
    for run in runs:
        groups[run.group].append(run)
    lines = ["# Study: static priors, MultiDDS-S and MultiUAT at two training lengths", "",
             f"Generated by `python study/report.py` from the {len(runs)} runs archived in "
             f"`{_shown(archive)}/` (how they were made: [study.md](study.md)). Edit only the findings "
             "between the markers: regenerating keeps them. Scores are uat-evaluate's sacreBLEU BLEU and chrF "
             "on the test sets; mean is the unweighted mean over corpora. The earlier one-epoch study is in "
             "[previous.md](previous.md).", ""]
    if not runs:
        lines.append("No run has finished yet: `python study/run.py` runs the grid.")
    for group in sorted(groups):
        lines += group_section(group, groups[group], findings, figures_dir, page)
    text = "\n".join(lines).rstrip() + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    return text


def _corpus_dir(value: str | None) -> str | None:
    """A run's corpus_dir as the recipe gave it: uat-train saves a folder it built (runs/known-answer/...) as an
    absolute path of the machine that trained it."""
    if not value or not Path(value).is_absolute():
        return value
    parts = Path(value).parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("runs"):]) if "runs" in parts else value


def _shown(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="the archive's packs (study/archive.py)")
    parser.add_argument("--out", type=Path, default=ROOT / "study" / "results.md")
    parser.add_argument("--figures", type=Path, default=ROOT / "study" / "figures")
    args = parser.parse_args(argv)
    write_report(unpacked(args.archive) / STUDY, args.out, args.figures)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
