"""The known-answer part of study/results.md (issue 36): for the groups ``misaligned-A``, ``duplicated-A`` and the
share sweep ``misaligned-Adev``, what each strategy scored over all the evaluation sets AND over the intact
corpora, its paired differences from proportional and from the oracle over the seeds, and where its p went.

Why the intact corpora: in ``misaligned`` the broken corpus's own test set is clean, so the macro over all four
rewards whatever learns software from the other domains; the known answer (give software's training data almost
nothing) is about the other three. In ``duplicated`` every corpus is sound data, only over-sampled: all four
count. ``study_report.py`` calls :func:`known_answer_lines` for these groups; the numbers come from the archive
alone, like the rest of the page.
"""

from __future__ import annotations

import statistics

from grid import BROKEN_CORPUS, KNOWN_ANSWER, NOISE_ORACLE_SHARES, fixed_prior
from noise import KINDS
from stats import mean_sd, num, verdicts

from uat_hf.evaluation.history import load_history
from uat_hf.sampling.priors import temperature_prior
from uat_hf.strategies.registry import get_strategy


def is_known_answer(group: str) -> bool:
    """Whether ``group`` (``<setup>-<regime>``) is a known-answer group or the share sweep."""
    return group.split("-")[0] in KNOWN_ANSWER


#: Setups whose broken corpus is sound data, only repeated: every corpus counts.
REPEATED = ("duplicated", "neardup")


def intact_corpora(setup: str, corpora: list[str]) -> list[str]:
    """The corpora whose training data is sound: all but the broken one, or all where it is only repeated."""
    return [c for c in corpora if setup in REPEATED or c != BROKEN_CORPUS[setup]]


def macro(run, corpora: list[str], metric: str) -> float:
    """The unweighted mean of ``metric`` over ``corpora`` (uat-evaluate's mean when they are all of them)."""
    return statistics.mean(run.results["scores"][corpus][metric] for corpus in corpora)


def _history(run) -> list[dict] | None:
    """The records of a run's balancing history, or None for a static run archived without one."""
    return load_history(run.history) if run.history.is_file() else None


def _prior(history: list[dict]) -> dict[str, float]:
    return history[0].get("prior", history[0]["probabilities"])


def final_p(run, history: list[dict] | None) -> dict[str, float] | None:
    """p at the end of a run: the last balancing update of a dynamic strategy, else the static prior of its recipe
    (a fixed prior's corpus_probabilities, or the temperature prior over the training sizes of its train.log)."""
    if history is not None:
        return history[-1]["probabilities"]
    strategy = run.recipe.get("strategy")
    if strategy == "fixed":
        return run.recipe.get("corpus_probabilities") or fixed_prior(run.group.split("-")[0], _share(run.strategy))
    tau = get_strategy(strategy).prior_temperature if strategy else None
    if tau is not None and run.train_sizes:  # a temperature prior archived before static runs kept a history
        tau = run.recipe.get("sampling_temperature") or tau
        return dict(zip(run.train_sizes, temperature_prior(run.train_sizes, tau).tolist()))
    return None


def p_at(run, history: list[dict] | None, fraction: float) -> dict[str, float] | None:
    """p in force after ``fraction`` of the run's steps: the last record at or before that step (its prior before
    the first), or the final p of a run without a history."""
    if history is None:
        return final_p(run, history)
    before = [record for record in history if record["step"] <= fraction * run.recipe["max_steps"]]
    return before[-1]["probabilities"] if before else _prior(history)


def _share(strategy: str) -> float | None:
    return float(strategy[len("share"):]) if strategy.startswith("share") else None


def distance(p: dict[str, float], q: dict[str, float]) -> float:
    """Total variation distance: the share of the examples that would have to move from one mix to the other (a
    corpus one mix lacks, left out of training by the audit's drop, has share 0 there)."""
    return sum(abs(p.get(c, 0.0) - q.get(c, 0.0)) for c in set(p) | set(q)) / 2


def known_answer_lines(group: str, runs: list, baseline: str, strategies: list[str]) -> list[str]:
    """The section's lines: what the known answer is, one row per strategy (in ``strategies``' order) with its
    scores and its paired differences from ``baseline`` and from the oracle, then where each strategy's p went."""
    setup = group.split("-")[0]
    broken = BROKEN_CORPUS[setup]
    oracle = fixed_prior(setup) if setup not in KINDS or setup in NOISE_ORACLE_SHARES else None
    corpora = sorted({c for r in runs for c in r.results["scores"]})
    intact = intact_corpora(setup, corpora)
    split = runs[0].results.get("split", "test")
    why = (f"{broken}'s training targets are misaligned (its {split} set is clean), so the right mix gives it "
           "almost nothing" if setup == "misaligned" else
           f"{broken}'s training file is repeated (dedupe off), so the right mix is proportional without the copies"
           if setup == "duplicated" else f"{broken}: {KINDS[setup][0].about} (its {split} set is clean)")
    said = (f"Oracle (a fixed prior, cell `{setup}-A-oracle`): {', '.join(f'{c} {p:g}' for c, p in oracle.items())}"
            if oracle else f"No oracle yet: the share sweep on the dev sets (`{setup}-Adev-*`) chooses it")
    lines = [f"### Known answer ({setup})", "",
             f"{why}. {said}. Intact corpora: {', '.join(intact)}. Δ is the "
             f"paired difference from {baseline} (or from the oracle) of the same seed in the macro BLEU over the "
             "intact corpora; p is a two-sided paired t-test over the seeds, Holm-corrected across the table's "
             "tests against the same reference (a verdict needs p < 0.05); \"detectable\" is the smallest true Δ "
             "that test finds with 80 % power; \"of oracle's Δ\" is the share of the oracle's mean Δ over the same "
             "seeds that a strategy recovers.",
             "", "| strategy | seeds | BLEU, all | BLEU, intact | chrF, all | chrF, intact | Δ intact BLEU | p (Holm) "
             "| detectable | verdict | of oracle's Δ | Δ from the oracle | p (Holm) | detectable | verdict |",
             "|---" * 15 + "|"]
    base = {r.seed: macro(r, intact, "bleu") for r in runs if r.strategy == baseline}
    at_oracle = {r.seed: macro(r, intact, "bleu") for r in runs if r.strategy == "oracle"}
    best, best_score, moves = None, None, []
    ordered = [sorted((r for r in runs if r.strategy == strategy), key=lambda r: r.seed) for strategy in strategies]
    scored = [[macro(r, intact, "bleu") for r in mine] for mine in ordered]

    def differences(reference: dict[int, float], skip: str) -> list:
        """One family: each strategy's paired differences from ``reference`` (none for ``skip`` itself)."""
        return verdicts([[] if strategy == skip else [score - reference[r.seed] for r, score in zip(mine, scores)
                                                       if r.seed in reference]
                         for strategy, mine, scores in zip(strategies, ordered, scored)])

    for strategy, mine, scores, (verdict, mean_delta, p, smallest), (o_verdict, o_delta, o_p, o_smallest) in zip(
            strategies, ordered, scored, differences(base, baseline), differences(at_oracle, "oracle")):
        verdict = "(baseline)" if strategy == baseline else verdict
        o_verdict = "–" if strategy == "oracle" else o_verdict
        # the oracle's gain over the same seeds, so that a strategy with fewer seeds is not compared with others
        paired = [(score - base[r.seed], at_oracle[r.seed] - base[r.seed]) for r, score in zip(mine, scores)
                  if r.seed in base and r.seed in at_oracle]
        oracle_gain = statistics.mean(o for _, o in paired) if paired else None
        recovered = (statistics.mean(d for d, _ in paired) / oracle_gain
                     if oracle_gain and strategy not in ("oracle", baseline) else None)
        lines.append(f"| {strategy} | {len(mine)} | {mean_sd([r.results['mean']['bleu'] for r in mine])} | "
                     f"{mean_sd(scores)} | {mean_sd([r.results['mean']['chrf'] for r in mine])} | "
                     f"{mean_sd([macro(r, intact, 'chrf') for r in mine])} | {num(mean_delta, '+.2f')} | "
                     f"{num(p, '.3f')} | {num(smallest)} | {verdict} | {num(recovered, '.0%')} | "
                     f"{num(o_delta, '+.2f')} | {num(o_p, '.3f')} | {num(o_smallest)} | {o_verdict} |")
        moves.append(_p_row(strategy, mine, broken, oracle))
        if scores and (best_score is None or statistics.mean(scores) > best_score):
            best, best_score = strategy, statistics.mean(scores)
    if best is not None:
        lines += ["", f"Highest mean BLEU over the intact corpora: {best} ({best_score:.2f})."]
    return lines + ["", f"Where p went (means over seeds): {broken}'s share in the prior, after the first update, "
                    "after a third and half of training and at the end; the largest total variation distance of p "
                    "from its prior at any update of the run (the share of the examples p moved); the final p's "
                    "distance from the oracle.", "",
                    f"| strategy | seeds | p {broken}: prior | first update | at ⅓ | at ½ | at end | largest TV from "
                    "the prior | TV to oracle |", "|---" * 9 + "|", *moves, ""]


def _p_row(strategy: str, runs: list, broken: str, oracle: dict[str, float]) -> str:
    """One row of the table of where p went (a corpus the audit's drop left out of training has share 0)."""
    def mean_of(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.mean(values) if values else None

    histories = [_history(r) for r in runs]
    mixes = [_mixes(r, h) for r, h in zip(runs, histories)]
    ends = [p for p in map(final_p, runs, histories) if p is not None]
    cells = [mean_of([mix[0].get(broken, 0.0) if mix else None for mix in mixes]),
             mean_of([_first_update(h, broken) for h in histories]),
             *(mean_of([p.get(broken, 0.0) if p else None for p in (p_at(r, h, f) for r, h in zip(runs, histories))])
               for f in (1 / 3, 1 / 2)),
             mean_of([p.get(broken, 0.0) for p in ends]),
             mean_of([max(distance(p, mix[0]) for p in mix) if mix else None for mix in mixes]),
             mean_of([distance(p, oracle) for p in ends] if oracle else [])]
    return f"| {strategy} | {len(runs)} | " + " | ".join(num(c, ".3f") for c in cells) + " |"


def _first_update(history: list[dict] | None, broken: str) -> float | None:
    """``broken``'s share after the strategy's first update (a cap by the health check is not one; runs archived
    before the caps were named so call its record ``set_aside``)."""
    updates = [r for r in history or [] if r["step"] > 0 and not {"cap", "set_aside"} & r.keys()]
    return updates[0]["probabilities"].get(broken, 0.0) if updates else None


def _mixes(run, history: list[dict] | None) -> list[dict[str, float]]:
    """The prior, then p after each update of a run (only the prior, or nothing, for a static run)."""
    if history is None:
        p = final_p(run, history)
        return [p] if p is not None else []
    return [_prior(history)] + [r["probabilities"] for r in history if r["step"] > 0]
