"""Arguments of ``uat-evaluate`` and ``uat-plot``, in ``uat-train``'s dialect, and their parsers.

``uat-evaluate`` parses :class:`~uat_hf.cli.arguments.DataArguments`, uat-train's own data arguments (which
corpora, formats, language codes, eval split, evaluation-only corpora), with :class:`EvaluateArguments`
(model, generation, output, significance). ``uat-evaluate --config RECIPE`` therefore reads a ``uat-train``
recipe's data fields as ``uat-train`` does (a run's ``output_dir`` holds the recipe it used), plus its
generation settings (:data:`EVALUATE_RECIPE_FIELDS`); the command line wins. The model (``uat-evaluate``)
and the run directory (``uat-plot``) may also come first, without a flag.

Checks happen in ``__post_init__`` (before any model or data is loaded) with messages that name the field.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .arguments import DataArguments
from .field_values import check_positive, check_string_fields
from .parsing import UATParser

__all__ = [
    "EVALUATE_RECIPE_FIELDS",
    "EvaluateArguments",
    "PlotArguments",
    "make_evaluate_parser",
    "make_plot_parser",
]

#: The fields ``uat-evaluate --config`` takes from a ``uat-train`` recipe: every data field but
#: max_eval_examples (a shortcut for speed: uat-evaluate scores whole test sets unless told otherwise; with
#: --compare, a set is cut to the baseline's hypotheses), and
#: the generation settings. The recipe's model_name_or_path (what training started from), output_dir, seed and
#: training fields describe the training run.
EVALUATE_RECIPE_FIELDS = tuple(f.name for f in fields(DataArguments) if f.name != "max_eval_examples") + (
    "generation_num_beams", "generation_max_length", "per_device_eval_batch_size", "bleu_tokenize",
)


@dataclass
class EvaluateArguments:
    """With which model and settings ``uat-evaluate`` translates the test sets of its
    :class:`~uat_hf.cli.arguments.DataArguments`, and where the results go."""

    _argument_group_name = "model, generation, scoring and output (uat_hf.cli.EvaluateArguments)"

    # out-of-domain test sets beside the DataArguments ones
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
    use_cpu: bool = field(default=False, metadata={"help": "Translate on the CPU even when a GPU is available (as "
                                                    "uat-train); under accelerate launch each process takes a share."})
    torch_num_threads: int | None = field(
        default=None,
        metadata={"help": "CPU threads for PyTorch (torch.set_num_threads), as uat-train's. Default: PyTorch's choice "
                  "(all cores); on a CPU shared with other jobs, 1 thread is often several times faster."},
    )
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
        metadata={"help": "bs: paired bootstrap resampling; ar: approximate randomization."},
    )
    significance_samples: int = field(
        default=0, metadata={"help": "Resamples / trials (0: sacrebleu's default, 1000 for bs, 10000 for ar)."}
    )
    seed: int = field(default=12345, metadata={"help": "Seed of the resampling (positive)."})
    alpha: float = field(default=0.05, metadata={"help": "Significance level for the * mark."})

    def __post_init__(self) -> None:
        from ..evaluation.saved_runs import (
            SIGNIFICANCE_TESTS,  # not at import time: it imports torch (uat-plot shares this)
        )

        check_string_fields(self, ("ood_corpus_dir", "model_name_or_path", "tokenizer_name_or_path", "output_dir",
                                   "hypotheses_dir", "compare"))
        for name in ("ood_corpus_dir", "tokenizer_name_or_path"):
            value = getattr(self, name)
            if isinstance(value, str) and value.strip().lower() in ("", "none", "null"):
                setattr(self, name, None)  # lets the command line unset a value the recipe sets
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is missing: give the model to evaluate first (uat-evaluate MODEL "
                             "...) or as --model_name_or_path (a model directory or a Hub id org/name).")
        if isinstance(self.ood_corpora, str):
            self.ood_corpora = [self.ood_corpora]
        if self.significance_test not in SIGNIFICANCE_TESTS:
            raise ValueError(f"significance_test must be one of {list(SIGNIFICANCE_TESTS)}, got "
                             f"{self.significance_test!r}.")
        check_positive(self, "per_device_eval_batch_size", "generation_num_beams", "generation_max_length",
                        "max_new_tokens", "seed", "torch_num_threads")
        if self.significance_samples < 0:
            raise ValueError("significance_samples must be >= 0 (0: sacrebleu's default), "
                             f"got {self.significance_samples!r}.")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}.")


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


def make_evaluate_parser() -> UATParser:
    """``uat-evaluate``'s parser: ``(EvaluateArguments, DataArguments)``, MODEL first, ``--config RECIPE``."""
    return UATParser(
        (EvaluateArguments, DataArguments),  # the model first: its absence is reported before the data's
        positional=("model_name_or_path", "MODEL"),
        config_help="A uat-train recipe (YAML file, a run's output_dir holding recipe.yaml, or a Hub repo id): its "
        "data fields (not max_eval_examples) and generation_num_beams, generation_max_length, "
        "per_device_eval_batch_size, bleu_tokenize are read as uat-train reads them. The command line wins. Default: "
        "MODEL's recipe.yaml, when it has one and no corpora are given.",
        prog="uat-evaluate",
        usage="%(prog)s [MODEL] [--config RECIPE] [--corpus_dir DIR | --corpus_specs JSON] [--FIELD VALUE ...]",
        description="Translate the test sets of uat-train's data fields (corpus_dir or corpus_specs, plus "
        "eval_corpus_specs) with a saved seq2seq model and report BLEU/chrF per corpus with their mean; optionally "
        "test the difference to another system's hypotheses for significance. The training-only data fields "
        "(max_train_examples, train_fraction, cleaning) are read but not used.",
    )


def make_plot_parser() -> UATParser:
    """``uat-plot``'s parser: :class:`PlotArguments`, RUN_DIR first."""
    return UATParser(
        (PlotArguments,),
        positional=("output_dir", "RUN_DIR"),
        prog="uat-plot",
        usage="%(prog)s [RUN_DIR [RUN_DIR ...] | --output_dir RUN_DIR] [--plot_dir DIR]",
        description="Plot the sampling probabilities and rewards of a MultiUAT / MultiDDS-S run over training "
        "steps, and the mean gradient-cosine heatmap of a MultiDDS-S run. Several RUN_DIRs: their p on one chart "
        "(a static strategy's run as a flat line at its step-0 p).",
    )
