"""``uat-evaluate``: per-corpus BLEU/chrF of a saved model, hypotheses on disk, paired significance.

Example (a UATTrainer output dir evaluated on the bundled multi-domain test sets, one domain held out as
out-of-domain, compared with a baseline evaluated the same way before)::

    uat-evaluate runs/multiuat --corpus-dir bundled:multidomain-en-de --source-lang en --target-lang de \\
        --corpora software descriptions bible --ood-corpora dictionary \\
        --output runs/multiuat/eval/results.json --compare runs/proportional/eval/hypotheses

The JSON holds the scores per corpus, their unweighted mean, the sacreBLEU signatures, the generation
settings and (with ``--compare``) a p-value per corpus and metric.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import datasets

from ..corpora import DIRECTIONS, corpus_tags
from ..evaluation import (
    SIGNIFICANCE_TESTS,
    EvalSet,
    eval_set_specs,
    load_eval_sets,
    load_translation_model,
    paired_significance,
    read_hypotheses,
    score_eval_sets,
    translate,
    write_hypotheses,
)
from ..metrics import format_table, macro_average
from ..tokenization import check_tags_in_vocab
from .arguments import resolve_bundled

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="uat-evaluate",
        description="Translate named test sets with a saved seq2seq model and report BLEU/chrF per corpus with "
        "their mean; optionally test the difference to another system's hypotheses for significance.",
    )
    parser.add_argument("model", help="model directory (save_pretrained / trainer.save_model output) or Hub id org/name")
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory or Hub id (default: MODEL)")
    data = parser.add_argument_group("test sets")
    data.add_argument("--corpus-dir", required=True,
                      help="directory of NAME.{train,dev,test}.jsonl.gz files; 'bundled:multidomain-en-de' or "
                      "'bundled:multilingual-ddtp' name the samples shipped with uat_hf")
    data.add_argument("--corpora", nargs="+", default=None, help="NAMEs to evaluate, in this order (default: all)")
    data.add_argument("--ood-corpora", nargs="+", default=None,
                      help="out-of-domain NAMEs, reported in a separate table with their own mean")
    data.add_argument("--ood-corpus-dir", default=None, help="where the out-of-domain sets are (default: --corpus-dir)")
    data.add_argument("--split", default="test", choices=("dev", "test"), help="which split to translate (default: test)")
    data.add_argument("--direction", default="multi-domain", choices=sorted(DIRECTIONS),
                      help="how NAMEs map to language pairs (default: multi-domain)")
    data.add_argument("--source-lang", default=None, help="source language (multi-domain, one-to-many)")
    data.add_argument("--target-lang", default=None, help="target language (multi-domain, many-to-one)")
    data.add_argument("--tags", default="auto", choices=("auto", "target", "none"),
                      help="target-language tags on the source, as in training (default: auto)")
    data.add_argument("--max-sentences", type=int, default=None, help="first N pairs of each set only (quick checks)")
    generation = parser.add_argument_group("generation")
    generation.add_argument("--batch-size", type=int, default=32, help="sentences per generate() call (default: 32)")
    generation.add_argument("--num-beams", type=int, default=None, help="beam size (default: the model's generation config)")
    generation.add_argument("--max-new-tokens", type=int, default=None,
                            help="longest translation in tokens (default: the model's generation config)")
    generation.add_argument("--max-source-length", type=int, default=None,
                            help="truncate sources to this many tokens (default and cap: the model's maximum)")
    generation.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    scoring = parser.add_argument_group("scoring and output")
    scoring.add_argument("--bleu-tokenize", default="13a", help="sacreBLEU tokenizer (13a; zh, ja-mecab, char ... for CJK)")
    scoring.add_argument("--output", default="uat-eval/results.json", help="results JSON (default: uat-eval/results.json)")
    scoring.add_argument("--hypotheses-dir", default=None,
                         help="folder for <corpus>.txt hypothesis files (default: 'hypotheses' beside --output)")
    significance = parser.add_argument_group("significance against another system")
    significance.add_argument("--compare", default=None,
                              help="the baseline's hypotheses folder (<corpus>.txt, one line per sentence), e.g. the "
                              "--hypotheses-dir of an earlier uat-evaluate run")
    significance.add_argument("--significance-test", default="bs", choices=SIGNIFICANCE_TESTS,
                              help="bs: paired bootstrap resampling; ar: approximate randomization (default: bs)")
    significance.add_argument("--significance-samples", type=int, default=0,
                              help="resamples / trials (default: sacrebleu's, 1000 for bs, 10000 for ar)")
    significance.add_argument("--seed", type=int, default=12345, help="seed of the resampling (positive; default 12345)")
    significance.add_argument("--alpha", type=float, default=0.05, help="significance level for the * mark (default 0.05)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point (returns nothing: console scripts pass a return value to ``sys.exit``); results go to ``--output``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    datasets.disable_progress_bars()  # a bar per tiny map() over each test set is noise here
    try:
        _run(args)
    except (OSError, ValueError) as error:
        parser.exit(2, f"uat-evaluate: error: {error}\n")


def _run(args: argparse.Namespace) -> None:
    corpus_dir = resolve_bundled(args.corpus_dir)
    ood_dir = resolve_bundled(args.ood_corpus_dir) if args.ood_corpus_dir else corpus_dir
    language = {"source_lang": args.source_lang, "target_lang": args.target_lang, "direction": args.direction}
    in_domain = eval_set_specs(corpus_dir, args.split, corpora=args.corpora, **language)
    ood = eval_set_specs(ood_dir, args.split, corpora=args.ood_corpora, **language) if args.ood_corpora else []
    model, tokenizer = load_translation_model(args.model, args.tokenizer, device=args.device)
    check_tags_in_vocab(tokenizer, sorted({tag for tag in corpus_tags(in_domain + ood, args.tags).values() if tag}))
    eval_sets = load_eval_sets(in_domain + ood, args.split, tags=args.tags, max_sentences=args.max_sentences)
    # Read the baseline first: a missing or misaligned file should fail before minutes of generation.
    baselines = ({name: read_hypotheses(args.compare, name, expected=len(eval_set.references))
                  for name, eval_set in eval_sets.items()} if args.compare else None)

    output = Path(args.output)
    hypotheses_dir = Path(args.hypotheses_dir) if args.hypotheses_dir else output.parent / "hypotheses"
    hypotheses = {}
    for name, eval_set in eval_sets.items():
        logger.info("Translating %s (%d sentences)", name, len(eval_set.sources))
        hypotheses[name] = translate(model, tokenizer, eval_set.sources, batch_size=args.batch_size,
                                     num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
                                     max_source_length=args.max_source_length)
        write_hypotheses(hypotheses_dir, name, hypotheses[name])
    scores, signatures = score_eval_sets(hypotheses, eval_sets, bleu_tokenize=args.bleu_tokenize)

    in_names = [spec.name for spec in in_domain]
    ood_names = [spec.name for spec in ood]
    generation = model.generation_config
    results: dict[str, Any] = {
        "model": args.model,
        "split": args.split,
        "corpus_dir": corpus_dir,
        "generation": {
            "num_beams": args.num_beams or generation.num_beams,
            "max_new_tokens": args.max_new_tokens or generation.max_new_tokens,
            "max_length": None if args.max_new_tokens else generation.max_length,
            "batch_size": args.batch_size,
        },
        "sentences": {name: len(eval_set.references) for name, eval_set in eval_sets.items()},
        "scores": {name: scores[name] for name in in_names},
        "mean": _mean(scores, in_names),
        "signatures": signatures,
        "hypotheses_dir": str(hypotheses_dir),
    }
    print(format_table(results["scores"]))
    if ood_names:
        results["ood_scores"] = {name: scores[name] for name in ood_names}
        results["ood_mean"] = _mean(scores, ood_names)
        print("\nout-of-domain\n" + format_table(results["ood_scores"]))
    print(f"\nBLEU: {signatures['bleu']}\nchrF: {signatures['chrf']}")

    if baselines is not None:
        results["significance"] = _significance(args, eval_sets, hypotheses, baselines)
        print("\n" + _significance_table(results["significance"]))

    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nWrote {output} and hypotheses to {hypotheses_dir}/", file=sys.stderr)


def _significance(args: argparse.Namespace, eval_sets: dict[str, EvalSet], hypotheses: dict[str, list[str]],
                  baselines: dict[str, list[str]]) -> dict[str, Any]:
    corpora = {}
    signatures: dict[str, str] = {}
    for name, eval_set in eval_sets.items():
        corpora[name], signatures = paired_significance(
            hypotheses[name], baselines[name], eval_set.references, test=args.significance_test,
            n_samples=args.significance_samples, seed=args.seed, bleu_tokenize=args.bleu_tokenize,
        )
        for metric in corpora[name].values():
            metric["significant"] = metric["p_value"] < args.alpha
    return {"baseline": str(args.compare), "test": args.significance_test, "alpha": args.alpha,
            "signatures": signatures, "corpora": corpora}


def _significance_table(significance: dict[str, Any]) -> str:
    corpora = significance["corpora"]
    width = max(len("corpus"), *(len(name) for name in corpora))
    header = f"{'corpus':<{width}}  {'BLEU':>6} {'base':>6} {'p':>7}   {'chrF':>6} {'base':>6} {'p':>7}"
    lines = [f"paired {'bootstrap' if significance['test'] == 'bs' else 'approximate randomization'} test against "
             f"{significance['baseline']} (* p < {significance['alpha']})", header]
    for name, metrics in corpora.items():
        cells = [f"{m['system']:6.2f} {m['baseline']:6.2f} {m['p_value']:6.4f}{'*' if m['significant'] else ' '}"
                 for m in (metrics["bleu"], metrics["chrf"])]
        lines.append(f"{name:<{width}}  {cells[0]}  {cells[1]}")
    return "\n".join(lines)


def _mean(scores: dict[str, dict[str, float]], names: Sequence[str]) -> dict[str, float]:
    subset = {name: scores[name] for name in names}
    return {"bleu": macro_average(subset, "bleu"), "chrf": macro_average(subset, "chrf")}


if __name__ == "__main__":
    main()
