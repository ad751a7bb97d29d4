"""Arguments of ``uat-evaluate`` and ``uat-plot``, in ``uat-train``'s dialect.

Both tools parse a dataclass with ``HfArgumentParser`` (``--field_name value``; ``--field-name`` works too),
and a concept that ``uat-train`` also has carries ``uat-train``'s name: ``corpus_dir``, ``corpora``,
``direction``, ``source_lang``, ``target_lang``, ``language_tags``, ``eval_split``, ``max_eval_examples``,
``max_source_length``, ``generation_num_beams``, ``generation_max_length``, ``per_device_eval_batch_size``,
``bleu_tokenize``, ``model_name_or_path``, ``tokenizer_name_or_path``, ``output_dir``, ``seed``. The model
(``uat-evaluate``) and the run directory (``uat-plot``) may also come first, without a flag.

``uat-evaluate --config RECIPE`` takes the test sets and generation settings of a ``uat-train`` recipe (a
run's ``output_dir`` holds the one it used); the command line wins.

Checks happen in ``__post_init__`` (before any model or data is loaded) with messages that name the field.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..corpus_specs import DIRECTIONS, resolve_bundled
from ..evaluation import SIGNIFICANCE_TESTS
from .arguments import EVAL_SPLITS, LANGUAGE_TAG_MODES, _check_positive, _language_codes
from .parsing import CONFIG_FLAG, GroupedArgumentParser

__all__ = [
    "EVALUATE_RECIPE_FIELDS",
    "EvaluateArguments",
    "PlotArguments",
    "make_evaluate_parser",
    "make_plot_parser",
    "parse_tool_arguments",
]

logger = logging.getLogger(__name__)

#: The fields ``uat-evaluate --config`` takes from a ``uat-train`` recipe. The recipe's model_name_or_path
#: (what training started from), output_dir, seed and training fields describe the training run, and its
#: max_eval_examples a shortcut for speed: uat-evaluate scores whole test sets unless told otherwise.
EVALUATE_RECIPE_FIELDS = (
    "corpus_dir", "corpora", "direction", "source_lang", "target_lang", "language_tags", "language_codes",
    "eval_split", "max_source_length", "generation_num_beams", "generation_max_length", "per_device_eval_batch_size",
    "bleu_tokenize",
)
_POSITIONAL = "positional"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """HfArgumentParser's formatter, without "(default: None)" and where the help already names the default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


@dataclass
class EvaluateArguments:
    """What ``uat-evaluate`` translates and scores, with which model and settings, and where results go."""

    # test sets
    corpus_dir: str | None = field(
        default=None,
        metadata={"help": "Directory of NAME.{dev,test}.jsonl.gz test sets (only eval_split must exist); "
                  "'bundled:multidomain-en-de' and 'bundled:multilingual-ddtp' name the samples shipped with uat_hf. "
                  "Required (here or in the --config recipe)."},
    )
    corpora: list[str] | None = field(
        default=None, metadata={"help": "NAMEs of corpus_dir to evaluate, in this order (default: all, sorted)."}
    )
    direction: str = field(
        default="multi-domain",
        metadata={"help": "How NAMEs map to language pairs, as in uat-train.", "choices": sorted(DIRECTIONS)},
    )
    source_lang: str | None = field(default=None, metadata={"help": "Source language (multi-domain, one-to-many)."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language (multi-domain, many-to-one)."})
    language_tags: str = field(
        default="auto",
        metadata={"help": "Marian target tags on the source side, or the model's language-code scheme (nllb, m2m100, "
                  "mbart50: each corpus generated with its own target code), as in training.",
                  "choices": LANGUAGE_TAG_MODES},
    )
    language_codes: dict | str | None = field(
        default=None, metadata={"help": "language → code where uat-hf's table has none, as in uat-train (JSON)."}
    )
    eval_split: str = field(default="test", metadata={"help": "Which split to translate.", "choices": EVAL_SPLITS})
    max_eval_examples: int | None = field(
        default=None,
        metadata={"help": "Translate the first N pairs of each set only (quick checks; report whole sets)."},
    )
    ood_corpora: list[str] | None = field(
        default=None, metadata={"help": "Out-of-domain NAMEs, reported in a separate table with their own mean."}
    )
    ood_corpus_dir: str | None = field(
        default=None, metadata={"help": "Where the out-of-domain sets are (default: corpus_dir)."}
    )
    # model and generation
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "The model to evaluate: a model directory (save_pretrained / trainer.save_model output, "
                  "e.g. a uat-train output_dir) or a Hub id org/name. May also be given as the first argument."},
    )
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "Tokenizer directory or Hub id (default: model_name_or_path)."}
    )
    per_device_eval_batch_size: int = field(default=32, metadata={"help": "Sentences per generate() call."})
    generation_num_beams: int | None = field(
        default=None, metadata={"help": "Beam size (default: the model's generation config)."}
    )
    generation_max_length: int | None = field(
        default=None,
        metadata={"help": "Maximum length of a generated sequence, as uat-train's generation_max_length (default: "
                  "the model's generation config, where uat-train saved it)."},
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "Longest translation in new tokens (generate()'s max_new_tokens; wins over "
                                "generation_max_length)."},
    )
    max_source_length: int | None = field(
        default=None, metadata={"help": "Truncate sources to this many tokens (default and cap: the model's maximum)."}
    )
    use_cpu: bool = field(default=False, metadata={"help": "Translate on the CPU even when a GPU is available (as "
                                                    "uat-train); under accelerate launch each process takes a share."})
    # scoring and output
    bleu_tokenize: str = field(
        default="13a", metadata={"help": "sacreBLEU tokenizer (13a; 'zh', 'ja-mecab', 'char', ... for CJK targets)."}
    )
    output_dir: str = field(
        default="uat-eval", metadata={"help": "Folder for results.json (and the hypotheses, see hypotheses_dir)."}
    )
    hypotheses_dir: str | None = field(
        default=None, metadata={"help": "Folder for <corpus>.txt hypothesis files (default: OUTPUT_DIR/hypotheses)."}
    )
    # significance against another system
    compare: str | None = field(
        default=None,
        metadata={"help": "The baseline's hypotheses folder (<corpus>.txt, one line per sentence), e.g. the "
                  "hypotheses_dir of an earlier uat-evaluate run: adds a paired significance test per corpus."},
    )
    significance_test: str = field(
        default="bs",
        metadata={"help": "bs: paired bootstrap resampling; ar: approximate randomization.",
                  "choices": SIGNIFICANCE_TESTS},
    )
    significance_samples: int = field(
        default=0, metadata={"help": "Resamples / trials (0: sacrebleu's default, 1000 for bs, 10000 for ar)."}
    )
    seed: int = field(default=12345, metadata={"help": "Seed of the resampling (positive)."})
    alpha: float = field(default=0.05, metadata={"help": "Significance level for the * mark."})

    def __post_init__(self) -> None:
        for name in ("source_lang", "target_lang", "ood_corpus_dir", "tokenizer_name_or_path"):
            value = getattr(self, name)
            if isinstance(value, str) and value.strip().lower() in ("", "none", "null"):
                setattr(self, name, None)  # lets the command line unset a value the recipe sets
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is missing: give the model to evaluate first (uat-evaluate MODEL "
                             "...) or as --model_name_or_path (a model directory or a Hub id org/name).")
        if not self.corpus_dir:
            raise ValueError("corpus_dir is missing: give the directory of NAME.{dev,test}.jsonl.gz test sets "
                             "(--corpus_dir DIR or 'bundled:multidomain-en-de'), or a --config recipe that sets it.")
        self.corpus_dir = resolve_bundled(self.corpus_dir)
        self.ood_corpus_dir = resolve_bundled(self.ood_corpus_dir)
        for name in ("corpora", "ood_corpora"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, [getattr(self, name)])
        choices = {"direction": DIRECTIONS, "language_tags": LANGUAGE_TAG_MODES, "eval_split": EVAL_SPLITS,
                   "significance_test": SIGNIFICANCE_TESTS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {sorted(allowed)}, got {getattr(self, name)!r}.")
        self.language_codes = _language_codes(self.language_codes, self.language_tags)
        _check_positive(self, "max_eval_examples", "per_device_eval_batch_size", "generation_num_beams",
                        "generation_max_length", "max_new_tokens", "max_source_length", "seed")
        if self.significance_samples < 0:
            raise ValueError("significance_samples must be >= 0 (0: sacrebleu's default), "
                             f"got {self.significance_samples!r}.")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}.")


EVALUATE_GROUPS = (
    ("test sets", ("corpus_dir", "corpora", "direction", "source_lang", "target_lang", "language_tags",
                   "language_codes", "eval_split", "max_eval_examples", "ood_corpora", "ood_corpus_dir")),
    ("model and generation", ("model_name_or_path", "tokenizer_name_or_path", "per_device_eval_batch_size",
                              "generation_num_beams", "generation_max_length", "max_new_tokens", "max_source_length",
                              "use_cpu")),
    ("scoring and output", ("bleu_tokenize", "output_dir", "hypotheses_dir")),
    ("significance against another system", ("compare", "significance_test", "significance_samples", "seed", "alpha")),
)


@dataclass
class PlotArguments:
    """Which run ``uat-plot`` draws and where the PNG files go."""

    output_dir: str | None = field(
        default=None,
        metadata={"help": "The run's output_dir (holding balancing_history.jsonl) or the history file itself. "
                  "May also be given as the first argument."},
    )
    plot_dir: str | None = field(default=None, metadata={"help": "Folder for the PNG files (default: output_dir)."})

    def __post_init__(self) -> None:
        if not self.output_dir:
            raise ValueError("output_dir is missing: give the run's output_dir first (uat-plot RUN_DIR) or as "
                             "--output_dir.")


PLOT_GROUPS = (("run and figures", ("output_dir", "plot_dir")),)


def make_evaluate_parser() -> GroupedArgumentParser:
    parser = GroupedArgumentParser(
        [EvaluateArguments],
        EVALUATE_GROUPS,
        prog="uat-evaluate",
        usage="%(prog)s [MODEL] [--config RECIPE] [--corpus_dir DIR] [--FIELD VALUE ...]   (%(prog)s --help lists "
        "every field)",
        description="Translate named test sets with a saved seq2seq model and report BLEU/chrF per corpus with "
        "their mean; optionally test the difference to another system's hypotheses for significance. Flags are "
        "named as uat-train's fields (--corpus_dir, --source_lang, --eval_split, --max_eval_examples, "
        "--generation_num_beams ...).",
        allow_abbrev=False,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(_POSITIONAL, nargs="?", default=None, metavar="MODEL",
                        help="the model to evaluate (the same as --model_name_or_path)")
    parser.add_argument(
        CONFIG_FLAG,
        default=None,
        metavar="RECIPE",
        help="A uat-train recipe (YAML file, a run's output_dir holding recipe.yaml, or a Hub repo id) to take "
        f"{', '.join(EVALUATE_RECIPE_FIELDS)} from; its other fields are not used. The command line wins.",
    )
    return parser


def make_plot_parser() -> GroupedArgumentParser:
    parser = GroupedArgumentParser(
        [PlotArguments],
        PLOT_GROUPS,
        prog="uat-plot",
        usage="%(prog)s [RUN_DIR | --output_dir RUN_DIR] [--plot_dir DIR]",
        description="Plot the sampling probabilities and rewards of a MultiUAT / MultiDDS-S run over training "
        "steps, and the mean gradient-cosine heatmap of a MultiDDS-S run.",
        allow_abbrev=False,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(_POSITIONAL, nargs="?", default=None, metavar="RUN_DIR",
                        help="the run's output_dir (the same as --output_dir)")
    return parser


def parse_tool_arguments(parser: argparse.ArgumentParser, dtype: type, argv: Sequence[str], *,
                         positional_field: str, recipe_fields: Sequence[str] = ()) -> Any:
    """``argv`` → ``dtype``: recipe values (``--config``, only ``recipe_fields``), then the command line.

    Argparse errors (unknown flag, bad int, bad choice) exit 2 with ``PROG: error: ...``; a bad value caught
    by the dataclass or a recipe that cannot be read raises ``ValueError`` / ``OSError`` for the caller.
    """
    argv = list(argv)
    if any(a in ("-h", "--help") for a in argv):
        parser.parse_args(["--help"])  # prints the help and exits
    if recipe_fields:
        pre = argparse.ArgumentParser(prog=parser.prog, usage=parser.usage, add_help=False, allow_abbrev=False)
        pre.add_argument(CONFIG_FLAG, default=None)
        config = pre.parse_known_args(argv)[0].config
        if config:
            parser.set_defaults(**_recipe_defaults(config, recipe_fields))
    values = vars(parser.parse_args(argv))
    values.pop("config", None)
    positional = values.pop(_POSITIONAL, None)
    if positional is not None:
        given = values.get(positional_field)
        if given is not None and given != positional:
            raise ValueError(f"{positional_field} given twice: {positional!r} first and --{positional_field} "
                             f"{given!r}; give one.")
        values[positional_field] = positional
    names = {f.name for f in fields(dtype) if f.init}
    return dtype(**{key: value for key, value in values.items() if key in names})


def _recipe_defaults(config: str, recipe_fields: Sequence[str]) -> dict[str, Any]:
    from ..recipe import Recipe

    recipe = Recipe.from_pretrained(config)
    unread = [key for key in ("corpus_specs", "eval_corpus_specs") if recipe.get(key)]
    if unread:
        logger.warning("%s sets %s, which uat-evaluate does not read: it evaluates the NAME.<split>.jsonl.gz files "
                       "of corpus_dir (and of ood_corpus_dir with ood_corpora).", recipe.source or config,
                       " and ".join(unread))
    return {key: recipe[key] for key in recipe_fields if key in recipe}
