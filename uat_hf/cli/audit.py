"""``uat-audit``: the corpus audit of a recipe's training corpora, without training.

    uat-audit --config recipes/demo.yaml                   # the table uat-train prints before step 0
    uat-audit --config my.yaml --output_json audit.json    # and the whole report as JSON

Flags are ``uat-train``'s (a recipe and its overrides); the audit reads the training pairs after the recipe's
cleaning and each corpus's dev pairs, as ``uat-train`` does (docs/corpus_audit.md). Exit status 0, or 2 for bad
input; with ``--strict``, 3 when a corpus is suspect (for a data pipeline that should stop there).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from ..utils.logging import set_verbosity
from .arguments import DataArguments
from .train_data import build_specs, preprocessing_for, streams

logger = logging.getLogger(__name__)


def run_audit(data_args: DataArguments, specs: list, *, seed: int = 0, cleaned=None, kept=None):
    """The :class:`~uat_hf.data.audit.AuditReport` of ``specs`` as the run cleans them, printed; ``None`` when
    ``corpus_audit`` is off. A streamed corpus is audited on its first pairs (no random access to a stream).
    ``cleaned``: the pairs the run's preparation read and cleaned (:func:`~uat_hf.data.corpora.clean_corpora`),
    audited as they are; ``kept``: the report the preparation cache kept for this run, printed, not measured
    again."""
    if data_args.corpus_audit == "off":
        return None
    import time

    from ..data.audit import audit_specs

    start = time.monotonic()
    report = kept
    if report is None:
        streamed = [spec.name for spec in specs if streams(spec, data_args)]
        report = audit_specs(specs, preprocessing_for(data_args), seed=seed, cache_dir=data_args.dataset_cache_dir,
                             streamed=streamed, failing=data_args.corpus_audit == "drop", cleaned=cleaned,
                             num_proc=data_args.preprocessing_num_workers)
    where = "read from the preparation cache" if kept is not None else f"{time.monotonic() - start:.0f}s"
    logger.info(f"corpus audit ({where}; corpus_audit={data_args.corpus_audit}):\n{report.table()}")
    pairs = language_pairs(specs)
    whole = kept_whole(report, pairs)
    for name in report.suspects:
        audit = report.corpora[name]
        dropped = 0 if audit.failing is None else int(audit.failing.sum())
        action = {"reweight": "its prior counts its effective size",
                  "drop": f"its {dropped} failing pairs are dropped" + (
                      f" and the prior counts the rest at their clean share ({audit.kept_clean_share:.0%})"
                      if audit.kept_clean_share < 1 else "")}.get(
            data_args.corpus_audit, "set corpus_audit: reweight to start its prior from its effective size, or drop "
                                    "to train without its failing pairs")
        if data_args.corpus_audit == "drop" and name in whole:
            action = (f"drop keeps it whole, since no other training corpus is {'→'.join(pairs[name])} "
                      "and leaving it out would leave that pair untrained; remove it from the recipe if its pairs "
                      "are worse than none")
        logger.warning(f"corpus {name!r} is suspect ({', '.join(audit.flagged)}): about {audit.clean_share:.0%} of "
                       f"its {audit.pairs} training pairs look sound ({audit.effective_size:.0f} effective); "
                       f"{action}.")
    return report


def audited_sizes(audit, data_args: DataArguments, train) -> dict[str, float] | None:
    """The sizes the prior counts when the audit changes them: with ``corpus_audit: reweight`` each suspect
    corpus's examples times its clean share; with ``drop`` the examples it kept times their clean share, where a
    flagged signal lets broken pairs pass (word order; else ``None``: the kept examples count as they are). A
    streamed run keeps the sizes of its streams (its prior is theirs, or ``corpus_probabilities``), and says so when
    a corpus is suspect."""
    if audit is None or not audit.suspects or set(train) - set(audit.corpora):
        return None
    if data_args.corpus_audit == "drop":
        shares = {name: audit.corpora[name].kept_clean_share for name in audit.suspects  # not one kept whole
                  if name in train and not audit.corpora[name].none_sound}
        if all(share == 1.0 for share in shares.values()):
            return None
        return {name: len(dataset) * shares.get(name, 1.0) for name, dataset in train.items()}
    if data_args.corpus_audit != "reweight":
        return None
    if any(not hasattr(dataset, "__len__") for dataset in train.values()):
        logger.warning("corpus_audit: reweight does not change a streamed run's prior (its streams' sizes): give the "
                       "suspect corpora a smaller share with corpus_probabilities, e.g. their effective sizes above.")
        return None
    return audit.effective_sizes({name: len(dataset) for name, dataset in train.items()})


def _command_parser() -> argparse.ArgumentParser:
    """``uat-audit``'s own flags; every other flag is ``uat-train``'s and goes to its parser."""
    parser = argparse.ArgumentParser(
        prog="uat-audit", allow_abbrev=False,
        usage="%(prog)s [--config RECIPE] [--FIELD VALUE ...] [--output_json PATH] [--strict]",
        description="Audit the training corpora of a recipe against their dev sets, as uat-train does before step 0, "
        "without training: print the table (pairs, effective size, failing share per signal, the dev set's own "
        "rate, verdict) and optionally write the whole report as JSON.",
        epilog="Every uat-train field is accepted (uat-train --help lists them); the audit reads the data fields "
        "(corpus_dir, corpus_specs, the cleaning fields, corpus_audit) and seed. Exit status 0, 2 for bad input, "
        "3 with --strict when a corpus is suspect.")
    parser.add_argument("--config", metavar="RECIPE", help="A recipe, as uat-train --config takes it.")
    parser.add_argument("--output_json", metavar="PATH", help="Also write the whole report to PATH as JSON.")
    parser.add_argument("--strict", action="store_true",
                        help="Exit with status 3 when a corpus is suspect (for a data pipeline that should stop).")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    own, argv = _command_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if own.config is not None:
        argv = ["--config", own.config, *argv]
    from .parsing import parse_arguments

    set_verbosity(logging.WARNING)  # the table is the command's output (below), the warnings go to stderr
    try:
        training_args, data_args, *_ = parse_arguments(argv)
        if data_args.corpus_audit == "off":
            data_args.corpus_audit = "warn"  # this command is the audit
        report = run_audit(data_args, build_specs(data_args)[0], seed=training_args.seed)
    except (ValueError, FileNotFoundError) as error:
        print(f"uat-audit: error: {error}", file=sys.stderr)
        return 2
    print(report.table())
    if own.output_json:
        with open(own.output_json, "w", encoding="utf-8") as out:
            json.dump(report.to_dict(), out, indent=2)
    return 3 if own.strict and report.suspects else 0


def language_pairs(specs: Sequence) -> dict[str, tuple[str, str]]:
    """Each corpus spec's name → (source language, target language)."""
    return {spec.name: (spec.source_lang, spec.target_lang) for spec in specs}


def kept_whole(audit, pairs: Mapping[str, tuple[str, str]]) -> set[str]:
    """The suspect corpora ``drop`` keeps whole although none of their pairs is sound: those no other training
    corpus serves the language pair of (``pairs``: name → (source, target)). Leaving one out would leave
    that pair untrained, and no signal read before training shows that nothing is better than its pairs (copies of
    the source teach a small model to carry names and numbers over: docs/corpus_audit.md, "Where drop costs")."""
    unsound = {name for name in (audit.suspects if audit is not None else ()) if audit.corpora[name].none_sound}
    served = {pair for name, pair in pairs.items() if name not in unsound}
    return {name for name in unsound if pairs[name] not in served}


def without_failing_pairs(audit, train: dict, pairs: Mapping[str, tuple[str, str]]) -> dict:
    """With ``corpus_audit: drop``, the training corpora without the pairs the audit found failing in each suspect
    corpus (:attr:`~uat_hf.data.audit.corpus_audit.CorpusAudit.failing`, marked on the pairs the run's cleaning kept,
    in their order, which tokenizing keeps). A corpus none of whose pairs is sound is left out of training (its
    test set is still evaluated), with a warning, unless it is its language pair's only one (:func:`kept_whole`;
    ``pairs``: name → (source, target)).
    Each such corpus's :attr:`~uat_hf.data.audit.corpus_audit.CorpusAudit.action` says which, for the results."""
    whole = kept_whole(audit, {name: pairs[name] for name in train})
    kept = dict(train)
    for name in audit.suspects if audit is not None else ():
        failing = audit.corpora[name].failing
        if failing is None:
            continue
        if name in whole:
            source, target = pairs[name]
            audit.corpora[name].action = f"kept whole: the only {source}→{target} training corpus"
            continue
        if len(failing) != len(train[name]):
            raise ValueError(f"corpus_audit: drop marked {len(failing)} pairs of corpus {name!r}, but the run reads "
                             f"{len(train[name])}: the audit and the data preparation disagree; use reweight.")
        if audit.corpora[name].none_sound:
            del kept[name]
            audit.corpora[name].action = "left out of training"
            logger.warning(f"corpus {name!r} is left out of training: every one of its {len(failing)} training pairs "
                           f"fails {', '.join(audit.corpora[name].flagged)} (corpus_audit: drop); it is still "
                           "evaluated.")
            continue
        import numpy as np

        kept[name] = train[name].select(np.flatnonzero(~failing))
        audit.corpora[name].action = f"{int(failing.sum())} failing pairs dropped"
        logger.info(f"corpus {name!r}: dropped {int(failing.sum())} of {len(failing)} training pairs failing "
                    f"{', '.join(audit.corpora[name].flagged)} (corpus_audit: drop)")
    return kept


if __name__ == "__main__":
    sys.exit(main())
