"""``uat-evaluate``: per-corpus BLEU/chrF of a saved model, hypotheses on disk, paired significance.

Example (a UATTrainer output dir evaluated on the bundled multi-domain test sets, one domain held out as
out-of-domain, compared with a baseline evaluated the same way before)::

    uat-evaluate runs/multiuat --corpus_dir bundled:multidomain-en-de --source_lang en --target_lang de \\
        --corpora software descriptions bible --ood_corpora dictionary \\
        --output_dir runs/multiuat/eval --compare runs/proportional/eval/hypotheses

    uat-evaluate runs/multiuat --output_dir runs/multiuat/eval   # the run's own test sets (its recipe.yaml)
    uat-evaluate runs/multiuat --config runs/multiuat --output_dir runs/multiuat/eval   # the same, spelt out

Flags are ``uat-train``'s field names (:mod:`uat_hf.cli.tool_arguments`); ``--field-name`` spellings of the
same names work too. Renamed from the argparse version (a clean break, the old flags are errors now):
``--max-sentences`` → ``--max_eval_examples``, ``--num-beams`` → ``--generation_num_beams``, ``--tags`` →
``--language_tags``, ``--split`` → ``--eval_split``, ``--batch-size`` → ``--per_device_eval_batch_size``,
``--tokenizer`` → ``--tokenizer_name_or_path``, ``--output FILE`` → ``--output_dir DIR`` (results.json in it).

``OUTPUT_DIR/results.json`` holds the scores per corpus, their unweighted mean, the sacreBLEU signatures, the
generation settings and (with ``--compare``) per corpus and metric the difference Δ to the baseline and its
p-value, and the mean Δ over the corpora.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..evaluation.metrics import format_table, macro_average
from ..utils.logging import set_verbosity
from .arguments import DataArguments
from .parsing import CONFIG_FLAG, exit_on_help
from .recipe import RECIPE_FILE, Recipe
from .tool_arguments import EVALUATE_RECIPE_FIELDS, EvaluateArguments, make_evaluate_parser

if TYPE_CHECKING:
    from ..training.uat_trainer import CorpusTranslation

# datasets, torch, transformers' Trainer and the model code are imported by _run, so that `uat-evaluate --help`
# (and a bad argument) answers without loading them.

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.json"


def build_parser():
    """The ``HfArgumentParser`` of ``uat-evaluate`` (:func:`uat_hf.cli.tool_arguments.make_evaluate_parser`)."""
    return make_evaluate_parser()


def parse_arguments(argv: Sequence[str] | None = None) -> tuple[DataArguments, EvaluateArguments]:
    """``argv`` (an optional MODEL first, ``--config RECIPE``, ``--field value`` ...) → ``(DataArguments,
    EvaluateArguments)``: the test sets as uat-train reads them, and how to translate and score them.

    Without ``--config`` and without corpora on the command line, a MODEL folder holding the ``recipe.yaml``
    uat-train saved is its own recipe (``uat-evaluate RUN`` = ``uat-evaluate RUN --config RUN``). With
    ``--compare``, the test sets are cut to the sentences the baseline translated (its run says how many)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    run_recipe = _run_recipe(argv)
    if run_recipe is not None:
        argv = [CONFIG_FLAG, run_recipe, *argv]
    (arguments, data), _ = build_parser().parse(argv, recipe_fields=EVALUATE_RECIPE_FIELDS)
    return data, arguments


def _run_recipe(argv: Sequence[str]) -> str | None:
    """The MODEL folder of ``argv`` when it holds a uat-train ``recipe.yaml`` and ``argv`` gives neither
    ``--config`` nor corpora; else ``None``."""
    flags = {arg.split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}
    if {"__config", "__corpus_dir", "__corpus_specs"} & flags:
        return None
    model = argv[0] if argv and not argv[0].startswith("-") else None
    if model is None and "--model_name_or_path" in argv:
        index = argv.index("--model_name_or_path") + 1
        model = argv[index] if index < len(argv) else None
    if model is None or not os.path.isfile(os.path.join(model, RECIPE_FILE)):
        return None
    logging.getLogger(__name__).info("Reading the test sets and generation settings of %s",
                                     os.path.join(model, RECIPE_FILE))
    return model


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point (returns nothing: console scripts pass a return value to ``sys.exit``); results go to
    ``OUTPUT_DIR/results.json``. Bad input exits 2 with ``uat-evaluate: error: ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_help(argv, build_parser)
    parser = build_parser()
    set_verbosity(logging.INFO)  # its progress lines; Transformers' own messages keep their verbosity
    try:
        data_args, args = parse_arguments(argv)
    except (OSError, ValueError) as error:
        parser.exit(2, f"uat-evaluate: error: {error}\n")
    try:
        _run(data_args, args)
    except (OSError, ValueError) as error:
        parser.exit(2, f"uat-evaluate: error: {error}\n")


def _run(data_args: DataArguments, args: EvaluateArguments) -> None:
    import datasets

    from ..data.causal_data import CausalPrompt
    from ..data.corpora import load_corpora
    from ..evaluation.copy_baseline import copy_metrics
    from ..evaluation.saved_runs import (
        eval_set_specs,
        load_translation_model,
        read_hypotheses,
        source_length_limit,
        write_hypotheses,
    )
    from ..models.causal_lm import is_causal_lm
    from ..training.uat_config import UATConfig
    from ..training.uat_trainer import UATTrainer
    from .train_data import check_tokenizer_codes, evaluation_sources, evaluation_specs, language_codes_for, tags_for

    datasets.disable_progress_bars()  # a bar per tiny map() over each test set is noise here
    if args.torch_num_threads is not None:
        import torch

        torch.set_num_threads(args.torch_num_threads)
    corpus_dir = data_args.corpus_dir  # bundled: names are resolved by DataArguments
    split = data_args.eval_split
    # The test sets uat-train evaluates (its corpora's eval_split, then eval_corpus_specs), plus ood_corpora.
    in_domain, ood = evaluation_specs(data_args)
    if args.ood_corpora:
        ood_dir = args.ood_corpus_dir or corpus_dir
        if ood_dir is None:
            raise ValueError("ood_corpora names files of a directory: give ood_corpus_dir (or corpus_dir).")
        ood += eval_set_specs(ood_dir, split, corpora=args.ood_corpora, source_lang=data_args.source_lang,
                              target_lang=data_args.target_lang, direction=data_args.direction)
    codes = language_codes_for(in_domain + ood, data_args)
    model, tokenizer = load_translation_model(args.model_name_or_path, args.tokenizer_name_or_path)
    corpus_generation_kwargs = check_tokenizer_codes(tokenizer, codes, data_args)  # forced_bos_token_id per corpus
    # Read and tokenize the test sets exactly as uat-train reads its evaluation corpora (tags or codes included).
    limit = source_length_limit(model, tokenizer, data_args.max_source_length)
    # A decoder-only model is asked with the prompt it was trained with (saved beside it by uat-train).
    prompt = CausalPrompt.from_pretrained(args.model_name_or_path) if is_causal_lm(model) else None
    tag_of, eval_tag_of = tags_for(in_domain, ood, "none" if prompt else data_args.language_tags)
    tags = None if prompt else data_args.language_tags if codes else {**tag_of, **eval_tag_of}
    corpora = load_corpora(in_domain + ood, tokenizer, splits=(split,), tags=tags,
                           language_codes=data_args.language_codes, max_source_length=limit,
                           max_target_length=limit, cache_dir=data_args.dataset_cache_dir, prompt=prompt)[split]
    if data_args.max_eval_examples is not None:
        corpora = {name: ds.select(range(min(data_args.max_eval_examples, len(ds)))) for name, ds in corpora.items()}
    if args.compare and data_args.max_eval_examples is None:
        corpora = _as_many_as_the_baseline(corpora, Path(args.compare))
    sizes = {name: len(dataset) for name, dataset in corpora.items()}
    # Read the baseline first: a missing or misaligned file should fail before minutes of generation.
    baselines = ({name: read_hypotheses(args.compare, name, expected=size) for name, size in sizes.items()}
                 if args.compare else None)

    trainer = UATTrainer(model, UATConfig(
        output_dir=args.output_dir, per_device_eval_batch_size=args.per_device_eval_batch_size,
        generation_num_beams=args.generation_num_beams, generation_max_length=args.generation_max_length,
        bleu_tokenize=args.bleu_tokenize, use_cpu=args.use_cpu, seed=args.seed, report_to="none", disable_tqdm=True,
    ), eval_corpora=corpora, processing_class=tokenizer, corpus_generation_kwargs=corpus_generation_kwargs)
    logger.info("Translating %s", ", ".join(f"{name} ({size} sentences)" for name, size in sizes.items()))
    gen_kwargs = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    translations = trainer.translate(metric_key_prefix=split, **gen_kwargs)
    if not trainer.is_world_process_zero():
        return
    hypotheses_dir = Path(args.hypotheses_dir) if args.hypotheses_dir else Path(args.output_dir) / "hypotheses"
    for name, translation in translations.items():
        write_hypotheses(hypotheses_dir, name, translation.hypotheses)
    scores = {name: {metric: t.output.metrics[f"{split}_{name}_{metric}"] for metric in ("bleu", "chrf")}
              for name, t in translations.items()}
    sources = evaluation_sources(data_args, in_domain + ood)
    for name, translation in translations.items():  # the copy baseline beside each corpus's scores
        if translation.references is not None and len(sources.get(name, ())) >= len(translation.references):
            scores[name].update(copy_metrics(sources[name][:len(translation.references)], translation.references,
                                             translation.hypotheses))
    signatures = trainer.metric_signatures

    in_names = [spec.name for spec in in_domain]
    ood_names = [spec.name for spec in ood]
    generation = model.generation_config
    results: dict[str, Any] = {
        "model": args.model_name_or_path,
        "split": split,
        "corpus_dir": corpus_dir,
        "generation": {
            "num_beams": args.generation_num_beams or generation.num_beams,
            "max_new_tokens": args.max_new_tokens,
            "max_length": None if args.max_new_tokens else args.generation_max_length or generation.max_length,
            "max_source_length": limit,
            "batch_size": args.per_device_eval_batch_size,
        },
        "sentences": sizes,
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
        results["significance"] = _significance(args, translations, baselines)
        print("\n" + _significance_table(results["significance"]))

    output = Path(args.output_dir) / RESULTS_FILE
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nWrote {output} and hypotheses to {hypotheses_dir}/", file=sys.stderr)


def _significance(args: EvaluateArguments, translations: dict[str, CorpusTranslation],
                  baselines: dict[str, list[str]]) -> dict[str, Any]:
    from ..evaluation.saved_runs import paired_significance

    corpora = {}
    signatures: dict[str, str] = {}
    for name, translation in translations.items():
        corpora[name], signatures = paired_significance(
            translation.hypotheses, baselines[name], translation.references, test=args.significance_test,
            n_samples=args.significance_samples, seed=args.seed, bleu_tokenize=args.bleu_tokenize,
        )
        for metric in corpora[name].values():
            metric["delta"] = metric["system"] - metric["baseline"]
            metric["significant"] = metric["p_value"] < args.alpha
    mean = {}
    for metric in ("bleu", "chrf"):
        system = sum(c[metric]["system"] for c in corpora.values()) / len(corpora)
        baseline = sum(c[metric]["baseline"] for c in corpora.values()) / len(corpora)
        mean[metric] = {"system": system, "baseline": baseline, "delta": system - baseline}
    return {"baseline": str(args.compare), "test": args.significance_test, "alpha": args.alpha,
            "signatures": signatures, "corpora": corpora, "mean": mean}


def _significance_table(significance: dict[str, Any]) -> str:
    """Per corpus: the system's score, the baseline's, their difference Δ and its p-value, for BLEU and chrF;
    then the unweighted mean over the corpora (no p-value: each corpus has its own test)."""
    corpora = significance["corpora"]
    width = max(len("corpus"), *(len(name) for name in corpora))
    columns = f"{'BLEU':>6} {'base':>6} {'Δ':>6} {'p':>7}   {'chrF':>6} {'base':>6} {'Δ':>6} {'p':>7}"
    lines = [f"paired {'bootstrap' if significance['test'] == 'bs' else 'approximate randomization'} test against "
             f"{significance['baseline']} (* p < {significance['alpha']})", f"{'corpus':<{width}}  {columns}"]
    for name, metrics in corpora.items():
        cells = [f"{m['system']:6.2f} {m['baseline']:6.2f} {m['delta']:+6.2f} {m['p_value']:6.4f}"
                 f"{'*' if m['significant'] else ' '}" for m in (metrics["bleu"], metrics["chrf"])]
        lines.append(f"{name:<{width}}  {cells[0]}  {cells[1]}")
    mean = significance["mean"]
    cells = [f"{m['system']:6.2f} {m['baseline']:6.2f} {m['delta']:+6.2f} {'':>7}"
             for m in (mean["bleu"], mean["chrf"])]
    lines.append(f"{'mean':<{width}}  {cells[0]}  {cells[1]}")
    return "\n".join(lines)


def _as_many_as_the_baseline(corpora: dict, hypotheses: Path) -> dict:
    """The test sets cut to the sentences the baseline translated, as its run says: ``uat-evaluate``'s
    ``results.json`` (``sentences``) or ``uat-train``'s ``recipe.yaml`` (``max_eval_examples``) beside the
    hypotheses folder; whole sets when neither says (a hand-made folder)."""
    run = hypotheses.resolve().parent
    counts: dict[str, int] = {}
    if (run / RESULTS_FILE).is_file():
        counts = json.loads((run / RESULTS_FILE).read_text(encoding="utf-8")).get("sentences", {})
    elif (run / RECIPE_FILE).is_file():
        limit = Recipe.from_pretrained(str(run)).to_dict().get("max_eval_examples")
        counts = {name: limit for name in corpora} if limit else {}
    return {name: ds.select(range(min(counts[name], len(ds)))) if name in counts else ds
            for name, ds in corpora.items()}


def _mean(scores: dict[str, dict[str, float]], names: Sequence[str]) -> dict[str, float]:
    subset = {name: scores[name] for name in names}
    return {"bleu": macro_average(subset, "bleu"), "chrf": macro_average(subset, "chrf")}


if __name__ == "__main__":
    main()
