"""Scores that copying cannot game, for the study's report: the copy baseline of each evaluation set and the
archived hypotheses re-scored on the pairs that need translation.

At the study's scale, copying each source verbatim scores BLEU 8.9 on the bundled descriptions test set and 13.4
on software's, above the small models; a model that learned to copy earns the same credit. So per group the
report gives each corpus's copy baseline (the source as hypothesis, uat_hf.evaluation.copy_baseline) and a
*needs-translation view*: the pairs whose reference is not a near-copy of its source — fewer than
:data:`NEAR_COPY` of the reference's words stand in the source — with every run's archived hypotheses re-scored on
them (BLEU and chrF), and the paired differences from the baseline strategy in that view. Nothing is retrained.
"""

from __future__ import annotations

import gzip
import statistics
import warnings
from functools import cache
from pathlib import Path

from stats import mean_sd, num, verdicts

from uat_hf.data.corpora import load_corpus_split
from uat_hf.data.corpus_specs import resolve_bundled
from uat_hf.data.preprocessing import PreprocessingConfig, preprocess
from uat_hf.evaluation.copy_baseline import copy_metrics, copy_rate
from uat_hf.evaluation.metrics import translation_scores

ROOT = Path(__file__).resolve().parent.parent
#: A reference with at least this share of its words in its source is a near-copy: a copy earns most of its score.
NEAR_COPY = 0.5


def needs_translation(sources: list[str], references: list[str]) -> list[bool]:
    """Per pair: whether its reference is not a near-copy of its source (the view's filter)."""
    return [copy_rate([reference], [source]) < NEAR_COPY for source, reference in zip(sources, references)]


@cache
def evaluation_pairs(recipe_file: str, folder: str, split: str) -> dict[str, tuple]:
    """corpus → (sources, references) of ``split`` of a run's recipe with its corpora in ``folder``, read as
    uat-train reads an evaluation split (its specs, cleaning and max_eval_examples)."""
    from uat_hf.cli.train import parse_arguments
    from uat_hf.cli.train_data import build_specs

    with warnings.catch_warnings():  # an archived recipe may name settings since renamed (read as today's names)
        warnings.simplefilter("ignore", FutureWarning)
        _, data, *_ = parse_arguments(["--config", recipe_file, "--corpus_dir", folder, "--eval_split", split])
    pairs = {}
    for spec in [s for group in build_specs(data) for s in group]:
        if spec.split_location(split) is None:
            continue
        rows = preprocess(load_corpus_split(spec, split), PreprocessingConfig(), corpus=spec.name, split=split)
        columns = rows.select_columns(["source", "target"]).to_dict()  # the rows the cleaning kept
        pairs[spec.name] = (tuple(columns["source"]), tuple(columns["target"]))
    return pairs


def scored_pairs(run, pairs: dict[str, tuple]) -> dict[str, tuple]:
    """The first pairs of each corpus, as many as the run's archived hypotheses: what uat-evaluate scored (it
    takes a prefix of each set when told to translate fewer sentences)."""
    out = {}
    for corpus, (sources, references) in pairs.items():
        count = len(hypotheses(run, corpus))
        if count > len(references):
            raise ValueError(f"{run.folder}: {count} {corpus} hypotheses for {len(references)} references")
        out[corpus] = (sources[:count], references[:count])
    return out


def run_pairs(run, corpus_dir: str | None) -> dict[str, tuple] | None:
    """The evaluation pairs a run was scored on, or None when its corpus folder is not here."""
    folder = corpus_dir or run.recipe.get("corpus_dir")
    path = Path(resolve_bundled(folder)) if folder else None
    path = path if path is None or path.is_absolute() else ROOT / path
    if path is None or not path.is_dir():
        return None
    return evaluation_pairs(str(run.folder / "recipe.yaml"), str(path), run.results.get("split", "test"))


def hypotheses(run, corpus: str) -> list[str]:
    with gzip.open(run.folder / "hypotheses" / f"{corpus}.txt.gz", "rt", encoding="utf-8") as lines:
        return lines.read().split("\n")[: -1]


def view_scores(run, pairs: dict[str, tuple]) -> dict[str, dict[str, float]]:
    """Per corpus: BLEU and chrF of the run's hypotheses on the pairs that need translation."""
    out = {}
    for corpus, (sources, references) in scored_pairs(run, pairs).items():
        hyps = hypotheses(run, corpus)
        keep = needs_translation(list(sources), list(references))
        scores, _ = translation_scores([h for h, k in zip(hyps, keep) if k],
                                       [r for r, k in zip(references, keep) if k])
        out[corpus] = {**scores, "copy_rate": copy_rate(hyps, list(sources))}
    return out


def copy_view_lines(runs: list, views: list[list[str]], baseline: str, strategies: list[str],
                    corpus_dir: str | None) -> list[str]:
    """The section: the copy baseline per corpus, then for each corpus list of ``views`` one table: per strategy
    its macro BLEU and chrF over those corpora in the needs-translation view, with the paired Δ from ``baseline``,
    the smallest Δ its seeds detect and, where the group has an oracle, the share of the oracle's Δ it recovers."""
    pairs = run_pairs(runs[0], corpus_dir)
    if pairs is not None:
        pairs = {c: p for c, p in pairs.items() if (runs[0].folder / "hypotheses" / f"{c}.txt.gz").is_file()}
    if pairs is None:
        return ["### Copy baseline and the needs-translation view", "",
                f"Not computed: the corpus folder `{corpus_dir or runs[0].recipe.get('corpus_dir')}` is not here "
                "(python study/known_answer_data.py builds the study's).", ""]
    lines = ["### Copy baseline and the needs-translation view", "",
             "Copy: the source itself scored as the translation. The view keeps the pairs whose reference has fewer "
             f"than {NEAR_COPY:.0%} of its words in its source; every run's archived hypotheses are re-scored on "
             "them. "
             "Copied: the share of the system's words that stand in the source (mean over seeds), beside the "
             "references'. Runs above copy: of this group's runs, how many score above the copy baseline on that "
             "corpus's whole set.", "",
             "| corpus | copy BLEU | copy chrF | references copied | pairs in the view | runs above copy: BLEU "
             "| chrF |",
             "|---|---|---|---|---|---|---|"]
    first = scored_pairs(runs[0], pairs)
    for corpus in sorted({c for r in runs for c in r.results["scores"]} & set(pairs)):
        sources, references = first[corpus]
        copy = copy_metrics(list(sources), list(references))
        kept = sum(needs_translation(list(sources), list(references)))
        above = {m: sum(r.results["scores"][corpus][m] > copy[f"{m}_copy"] for r in runs)
                 for m in ("bleu", "chrf")}
        lines.append(f"| {corpus} | {copy['bleu_copy']:.2f} | {copy['chrf_copy']:.2f} | "
                     f"{copy['reference_copy_rate']:.0%} | {kept} of {len(references)} | "
                     f"{above['bleu']} of {len(runs)} | {above['chrf']} of {len(runs)} |")
    scored = {id(run): view_scores(run, pairs) for run in runs}
    for corpora in views:
        lines += _view_table(runs, scored, corpora, baseline, strategies)
    return lines + [""]


def _view_table(runs: list, scored: dict, corpora: list[str], baseline: str, strategies: list[str]) -> list[str]:
    """One table of :func:`copy_view_lines`: the view's macro over ``corpora``."""
    view = {id(run): {m: statistics.mean(scored[id(run)][c][m] for c in corpora) for m in ("bleu", "chrf")}
            for run in runs}
    base = {r.seed: view[id(r)] for r in runs if r.strategy == baseline}
    oracle = {r.seed: view[id(r)] for r in runs if r.strategy == "oracle"}
    shown = [s for s in strategies if any(r.strategy == s for r in runs)]
    mine_of = {s: sorted((r for r in runs if r.strategy == s), key=lambda r: r.seed) for s in shown}

    def recovered(strategy: str, metric: str) -> str:
        """The share of the oracle's mean Δ over the same seeds that ``strategy``'s mean Δ is."""
        paired = [(view[id(r)][metric] - base[r.seed][metric], oracle[r.seed][metric] - base[r.seed][metric])
                  for r in mine_of[strategy] if r.seed in base and r.seed in oracle]
        gain = statistics.mean(o for _, o in paired) if paired else None
        return num(statistics.mean(d for d, _ in paired) / gain if gain and strategy not in ("oracle", baseline)
                   else None, ".0%")

    tests = {metric: verdicts([[] if s == baseline else [view[id(r)][metric] - base[r.seed][metric]
                                                          for r in mine_of[s] if r.seed in base] for s in shown])
             for metric in ("bleu", "chrf")}
    share = " | of oracle's Δ" if oracle else ""
    lines = ["", f"Macro over {', '.join(corpora)}, in the view; Δ paired with {baseline} of the same seed; p a "
             "two-sided paired t-test over the seeds, Holm-corrected across the table's tests of one measure; "
             "detectable: the smallest true Δ that test finds with 80 % power"
             + ("; of oracle's Δ: the share of the oracle's mean Δ over the same seeds that a strategy recovers"
                if oracle else "") + ".", "",
             f"| strategy | seeds | BLEU | chrF | Δ BLEU | p (Holm) | detectable{share} | Δ chrF | p (Holm) | "
             f"detectable{share} | copied |", "|---" * (11 + 2 * bool(oracle)) + "|"]
    for k, strategy in enumerate(shown):
        mine = mine_of[strategy]
        cells = []
        for metric in ("bleu", "chrf"):
            _, mean, p, smallest = tests[metric][k]
            cells += [num(mean, "+.2f") if strategy != baseline else "–", num(p, ".3f"), num(smallest)]
            cells += [recovered(strategy, metric)] if oracle else []
        copied = statistics.mean(statistics.mean(scored[id(r)][c]["copy_rate"] for c in corpora) for r in mine)
        lines.append(f"| {strategy} | {len(mine)} | {mean_sd([view[id(r)]['bleu'] for r in mine])} | "
                     f"{mean_sd([view[id(r)]['chrf'] for r in mine])} | {' | '.join(cells)} | {copied:.0%} |")
    return lines
