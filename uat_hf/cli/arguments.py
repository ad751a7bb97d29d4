"""Command-line / recipe arguments for data and model, beside :class:`~uat_hf.training.uat_config.UATConfig`.

``uat-train`` parses these dataclasses with ``HfArgumentParser`` (see :mod:`uat_hf.cli.parsing`):
``UATConfig`` (training + balancing), :class:`DataArguments` (which corpora, how they are cleaned, what is
evaluated), :class:`ModelArguments` (model preset or checkpoint, tokenizer) and
:class:`~uat_hf.cli.run_arguments.RunArguments`. A
recipe (``recipe.yaml``) is one flat mapping of their fields; every field can also be given on the command
line (``--field value``), which beats the recipe. ``uat-evaluate`` and ``uat-plot`` use the same names for
the same concepts (:mod:`uat_hf.cli.tool_arguments`).

Field values are checked in ``__post_init__`` so that a bad recipe fails before any data is read, with a
message that names the field and the value; :mod:`uat_hf.cli.field_values` reads the YAML-or-JSON values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.corpus_specs import DIRECTIONS, SPLITS, resolve_bundled
from ..data.language_codes import CODE_SCHEMES
from ..models.causal_presets import CAUSAL_PRESETS
from ..models.presets import MODEL_PRESETS
from ..utils.hub_errors import is_hub_id
from .field_values import as_corpus_specs, as_language_codes, as_mapping, check_positive, check_string_fields

__all__ = [
    "DataArguments",
    "ModelArguments",
]

EVAL_SPLITS = ("dev", "test")
LANGUAGE_TAG_MODES = ("auto", "marian", "target", *CODE_SCHEMES, "none")
TOKENIZER_MODELS = ("bpe", "unigram")
#: tokenizer_train_examples' default: on the shared 2-core machine an 8K BPE vocabulary took 21 s on 200K pairs of the
#: bundled sample's sentences (30 words) and 6 s on 200K short synthetic pairs (docs/usage.md, Large corpora).
DEFAULT_TOKENIZER_TRAIN_EXAMPLES = 200_000


#: What ``corpus_audit`` does with a suspect corpus.
AUDIT_ACTIONS = ("auto", "off", "warn", "reweight", "drop")


@dataclass
class DataArguments:
    """Where the corpora come from, how they are cleaned and tokenized, and what is evaluated.

    Give the training corpora in one of two ways:

    * ``corpus_dir``: a directory of ``NAME.{train,dev,test}.jsonl.gz`` files (the layout of the bundled
      samples and of ``../shared/corpora``), e.g. ``bundled:multidomain-en-de``, with ``direction``,
      ``source_lang``/``target_lang`` and optionally ``corpora`` (which NAMEs, in order).
    * ``corpus_specs``: a list of :class:`~uat_hf.data.corpus_specs.CorpusSpec` mappings (Hub dataset ids with
      ``path``/``hub_config`` or local files, ``source_field``/``target_field`` for two-column layouts).
    """

    _argument_group_name = "data (uat_hf.cli.DataArguments)"

    corpus_dir: str | None = field(
        default=None,
        metadata={
            "help": "Directory of NAME.{train,dev,test}.jsonl.gz corpora (one corpus per NAME). "
            "'bundled:multidomain-en-de' and 'bundled:multilingual-ddtp' name the samples shipped with uat_hf; "
            "a relative path is relative to the working directory. Mutually exclusive with corpus_specs."
        },
    )
    direction: str = field(
        default="multi-domain",
        metadata={
            "help": "How the NAMEs of corpus_dir map to language pairs: 'multi-domain' (every NAME a domain of "
            "source_lang→target_lang), 'many-to-one' / 'm2o' / 'x2en' (every NAME a source language, into "
            "target_lang, default en), 'one-to-many' / 'o2m' / 'en2x' (from source_lang, default en, into "
            "every NAME)."
        },
    )
    source_lang: str | None = field(
        default=None, metadata={"help": "Source language code (multi-domain and one-to-many)."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Target language code (multi-domain and many-to-one)."}
    )
    corpora: list[str] | None = field(
        default=None,
        metadata={"help": "Which NAMEs of corpus_dir to train on, in this order (default: all, sorted)."},
    )
    corpus_specs: list[dict] | str | None = field(
        default=None,
        metadata={
            "help": "Training corpora as a list of CorpusSpec mappings (name, source_lang, target_lang, path, "
            "hub_config, train/dev/test, source_field/target_field, max_examples). In YAML a list of mappings; "
            "on the command line a JSON string. Mutually exclusive with corpus_dir."
        },
    )
    eval_corpus_specs: list[dict] | str | None = field(
        default=None,
        metadata={
            "help": "Extra evaluation-only corpora (e.g. out-of-domain test sets), CorpusSpec mappings with at "
            "least the eval_split; they are never trained on nor used for balancing."
        },
    )
    max_train_examples: int | None = field(
        default=None,
        metadata={"help": "Keep the first N training pairs of every corpus (before cleaning; default: all)."},
    )
    train_fraction: float | None = field(
        default=None,
        metadata={
            "help": "Train on this fraction (0, 1] of every training corpus: the same seeded subset of each (after "
            "cleaning, whatever the run's seed), so the corpora keep their size ratios. Dev and test sets and the "
            "tokenizer's sample are untouched. Not with max_train_examples."
        },
    )
    max_eval_examples: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate on the first N sentences of each corpus's eval split only (faster; scores are then "
            "not comparable to the full test set)."
        },
    )
    max_source_length: int = field(
        default=256, metadata={"help": "Truncate source sentences to this many subword tokens."}
    )
    max_target_length: int = field(
        default=256, metadata={"help": "Truncate target sentences to this many subword tokens."}
    )
    max_length_ratio: float | None = field(
        default=1.5,
        metadata={
            "help": "Training pairs whose word-length ratio exceeds this are dropped (Moses clean-corpus-n; the "
            "paper's 1.5). Set to null/None to disable. Dev/test sets are never filtered."
        },
    )
    max_source_words: int | None = field(
        default=None, metadata={"help": "Drop training pairs with more source words than this."}
    )
    max_target_words: int | None = field(
        default=None, metadata={"help": "Drop training pairs with more target words than this."}
    )
    dedupe: bool = field(default=True, metadata={"help": "Drop repeated (source, target) training pairs."})
    corpus_audit: str = field(
        default="auto",
        metadata={"help": "Corpus audit's action: auto, warn, reweight, drop or off."},
    )  # docs/corpus_audit.md: the default chosen on the dev sets of the study's noise cells
    streaming: bool = field(
        default=False,
        metadata={"help": "Read every training corpus as a stream (datasets' streaming=True): cleaned and tokenized "
                  "as it trains, never loaded whole; a corpus spec's own streaming field wins. Needs dedupe: false; "
                  "dev and test sets are loaded as usual (docs/usage.md, 'Streaming corpora')."},
    )
    language_tags: str = field(
        default="auto",
        metadata={"help": "Marian tag (>>de<<) on the source: 'auto'/'marian' (one-to-many only), 'target' (always); "
                  "or the language codes of the model's own tokenizer, per corpus (source code on the input, target "
                  "code first in the labels and forced first at generation): 'nllb', 'm2m100', 'mbart50'; 'none'."},
    )
    language_codes: dict | str | None = field(
        default=None,
        metadata={"help": "language_tags nllb/m2m100/mbart50: language → code where the table has none, e.g. "
                  "{sr: srp_Latn} (JSON on the command line); a language spelled as a code needs none."},
    )
    prompt_template: str | None = field(
        default=None,
        metadata={"help": "Decoder-only models: the prompt before each translation, with {source}, "
                  "{source_language} and {target_language}; default: uat_hf.data.causal_data.DEFAULT_TEMPLATE, "
                  "'Translate {source_language} to {target_language}:' and the source on its own line."},
    )
    chat_template: bool = field(
        default=False,
        metadata={"help": "Decoder-only instruct models: put the prompt as a user turn through the tokenizer's chat "
                  "template."},
    )
    eval_split: str = field(
        default="test",
        metadata={
            "help": "Split of the final per-corpus evaluation: 'test' (reported scores) or 'dev'. Evaluation during "
            "training (eval_strategy, load_best_model_at_end with metric_for_best_model=mean_bleu) always uses the "
            "dev sets, so model selection never sees test."
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={"help": "Processes for cleaning and tokenization (num_proc of their datasets.map/filter calls; "
                  "splits under 20,000 pairs use one). The result is the same with any number."},
    )
    dataset_cache_dir: str | None = field(
        default=None, metadata={"help": "Cache directory for datasets.load_dataset (default: the HF cache)."}
    )
    preparation_cache: bool = field(
        default=True,
        metadata={"help": "Keep the prepared data (tokenizer and tokenized corpora) and read it back on a run with "
                  "the same data fields, corpus files and tokenizer, which then starts training in seconds; false: "
                  "prepare it on every run."},
    )
    preparation_cache_dir: str | None = field(
        default=None,
        metadata={"help": "Folder of the preparation cache (default: uat_hf_prepared in dataset_cache_dir, else in "
                  "the datasets cache, HF_DATASETS_CACHE)."},
    )

    def __post_init__(self) -> None:
        check_string_fields(self, ("corpus_dir", "direction", "source_lang", "target_lang", "language_tags",
                                   "prompt_template", "eval_split", "dataset_cache_dir"))
        for name in ("source_lang", "target_lang", "corpus_dir"):
            if isinstance(getattr(self, name), str) and getattr(self, name).strip().lower() in ("", "none", "null"):
                setattr(self, name, None)  # lets the command line unset a value the recipe sets
        self.corpus_specs = as_corpus_specs(self.corpus_specs, "corpus_specs")
        self.eval_corpus_specs = as_corpus_specs(self.eval_corpus_specs, "eval_corpus_specs")
        if (self.corpus_dir is None) == (self.corpus_specs is None):
            raise ValueError(
                ("Give the corpora either" if self.corpus_dir is not None else "corpus_dir or corpus_specs is "
                 "missing: give the corpora (here or in the --config recipe) either")
                + " as corpus_dir (a NAME.{train,dev,test}.jsonl.gz directory or 'bundled:multidomain-en-de') or as "
                "corpus_specs (a list of corpus mappings)" + (", not both." if self.corpus_dir is not None else ".")
            )
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {self.direction!r}.")
        if self.corpus_audit not in AUDIT_ACTIONS:
            raise ValueError(f"corpus_audit must be one of {list(AUDIT_ACTIONS)}, got {self.corpus_audit!r}.")
        if self.corpus_dir is not None:
            # Existence is checked when the data is loaded (still before training), so that a recipe parses on a
            # machine without its data (e.g. to inspect or edit it).
            self.corpus_dir = resolve_bundled(self.corpus_dir)
            if self.direction == "multi-domain" and not (self.source_lang and self.target_lang):
                raise ValueError("direction 'multi-domain' needs both source_lang and target_lang (e.g. en, de).")
        elif self.corpora:
            raise ValueError("corpora selects NAMEs of corpus_dir; with corpus_specs, list only the corpora you want.")
        if isinstance(self.corpora, str):
            self.corpora = [self.corpora]
        if self.eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {list(EVAL_SPLITS)}, got {self.eval_split!r}.")
        if self.language_tags not in LANGUAGE_TAG_MODES:
            raise ValueError(f"language_tags must be one of {list(LANGUAGE_TAG_MODES)}, got {self.language_tags!r}.")
        self.language_codes = as_language_codes(self.language_codes, self.language_tags)
        check_positive(
            self, "max_train_examples", "max_eval_examples", "max_source_length", "max_target_length",
            "max_source_words", "max_target_words", "preprocessing_num_workers",
        )
        if self.train_fraction is not None:
            if not 0 < self.train_fraction <= 1:  # also rejects NaN
                raise ValueError(f"train_fraction must be in (0, 1] (1: every pair), got {self.train_fraction!r}.")
            if self.max_train_examples is not None:
                raise ValueError(
                    f"Give train_fraction ({self.train_fraction}) or max_train_examples ({self.max_train_examples}), "
                    "not both: the fraction keeps the corpora's size ratios, the cap of N pairs per corpus changes "
                    "them."
                )
        if self.corpus_audit == "auto":  # drop won the screening; a stream or a fraction cannot drop by index
            self.corpus_audit = "reweight" if self.streaming or self.train_fraction is not None else "drop"
        elif self.corpus_audit == "drop" and (self.streaming or self.train_fraction is not None):
            raise ValueError("corpus_audit: drop removes the failing pairs of a whole, map-style corpus, in its "
                             f"order: not with {'streaming: true' if self.streaming else 'train_fraction'}; use "
                             "reweight.")
        if self.streaming and self.train_fraction is not None:
            raise ValueError(f"train_fraction ({self.train_fraction}) draws a random subset of each whole corpus, "
                             "which streaming: true never holds; cap the streams with max_train_examples instead.")
        if self.max_length_ratio is not None and not self.max_length_ratio >= 1:
            raise ValueError(f"max_length_ratio must be >= 1 (or null to disable), got {self.max_length_ratio!r}.")
        for name in ("dataset_cache_dir", "preparation_cache_dir"):
            value = getattr(self, name)
            if value is not None and Path(value).expanduser().exists() and not Path(value).expanduser().is_dir():
                raise ValueError(f"{name} {value!r} is a file, not a folder; give a folder (created if missing).")

    def split_names(self) -> tuple[str, ...]:
        """Splits to load for the training corpora: train, dev (rewards) and the eval split."""
        return tuple(s for s in SPLITS if s in ("train", "dev", self.eval_split))


@dataclass
class ModelArguments:
    """Which model to train and which tokenizer it reads.

    A preset name builds a randomly initialised MarianMT model of that size; a local directory or a Hub id
    (``Helsinki-NLP/opus-mt-en-de``) loads a pretrained checkpoint. Without ``tokenizer_name_or_path`` a
    preset gets a joint subword vocabulary trained on the training corpora (language tags as special
    tokens), and a pretrained model its own tokenizer.
    """

    _argument_group_name = "model (uat_hf.cli.ModelArguments)"

    model_name_or_path: str = field(
        default="small",
        metadata={
            "help": f"A preset ({', '.join(MODEL_PRESETS)}), a local model directory or a Hub id (org/name). "
            "transformer_iwslt_de_en and transformer_base are the paper's sizes; small trains on a CPU."
        },
    )
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A saved tokenizer (local directory or Hub id). Default: for a preset, train a joint "
            "tokenizer on the training corpora; for a pretrained model, the model's own tokenizer."
        },
    )
    vocab_size: int = field(
        default=8000, metadata={"help": "Size of the trained joint vocabulary (special tokens included)."}
    )
    tokenizer_model: str = field(default="bpe", metadata={"help": "Trained tokenizer type: bpe or unigram."})
    tokenizer_min_frequency: int = field(
        default=2, metadata={"help": "BPE: a merge must occur at least this often in the training text."}
    )
    tokenizer_max_sentences: int | None = field(
        default=None,
        metadata={"help": "Train the tokenizer on at most this many pairs per corpus (default: all training pairs)."},
    )
    tokenizer_train_examples: int = field(
        default=DEFAULT_TOKENIZER_TRAIN_EXAMPLES,
        metadata={"help": "Train the joint tokenizer on a seeded random sample of this many training pairs, shared "
                  "among the corpora by size (all pairs when they hold no more); the default trains in well under a "
                  "minute on 2 CPU cores (docs/usage.md, Large corpora)."},
    )
    lowercase: bool = field(default=False, metadata={"help": "Lowercase all text in the trained tokenizer."})
    dropout: float | None = field(
        default=None, metadata={"help": "Override the model's dropout (paper: 0.3 multilingual, 0.1 multi-domain)."}
    )
    attention_dropout: float | None = field(default=None, metadata={"help": "Override the attention dropout."})
    activation_dropout: float | None = field(default=None, metadata={"help": "Override the activation (FFN) dropout."})
    model_overrides: dict | str | None = field(
        default=None,
        metadata={
            "help": "More MarianConfig fields for a preset (or config attributes for a pretrained model), e.g. "
            "{encoder_layers: 2, decoder_layers: 2}; a JSON string on the command line."
        },
    )

    lora: dict | str | None = field(
        default=None,
        metadata={"help": "Decoder-only models: train a LoRA adapter with these peft LoraConfig fields, e.g. {r: 16, "
                  "lora_alpha: 32, lora_dropout: 0.1, target_modules: [q_proj, v_proj]}; needs pip install "
                  "'uat-hf[peft]'."},
    )
    generation_overrides: dict | str | None = field(
        default=None,
        metadata={
            "help": "GenerationConfig fields for evaluation and the saved model, e.g. {no_repeat_ngram_size: 3}; "
            "JSON on the command line. Beams and length: generation_num_beams / generation_max_length."
        },
    )

    def __post_init__(self) -> None:
        check_string_fields(self, ("model_name_or_path", "tokenizer_name_or_path", "tokenizer_model"))
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is empty; give a preset name, a model directory or a Hub id.")
        name = self.model_name_or_path
        presets = [*MODEL_PRESETS, *CAUSAL_PRESETS]
        if name not in presets and not Path(name).is_dir() and not is_hub_id(name):
            raise ValueError(
                f"model_name_or_path {name!r} is not a preset ({', '.join(presets)}), not a local model "
                "directory and not a Hub id of the form org/name."
            )
        if self.tokenizer_model not in TOKENIZER_MODELS:
            raise ValueError(f"tokenizer_model must be one of {list(TOKENIZER_MODELS)}, got {self.tokenizer_model!r}.")
        if self.vocab_size < 8:
            raise ValueError(f"vocab_size must be a positive vocabulary size, got {self.vocab_size!r}.")
        check_positive(self, "tokenizer_min_frequency", "tokenizer_max_sentences", "tokenizer_train_examples")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
        self.model_overrides = as_mapping(self.model_overrides, "model_overrides")
        self.generation_overrides = as_mapping(self.generation_overrides, "generation_overrides")
        self.lora = as_mapping(self.lora, "lora")
        if self.generation_overrides:
            from transformers import GenerationConfig

            default = GenerationConfig()
            unknown = sorted(k for k in self.generation_overrides if not hasattr(default, k))
            if unknown:
                raise ValueError(f"generation_overrides: {unknown} are not GenerationConfig fields.")

    @property
    def is_preset(self) -> bool:
        return self.model_name_or_path in MODEL_PRESETS or self.model_name_or_path in CAUSAL_PRESETS

    @property
    def is_causal(self) -> bool:
        """A decoder-only model (causal preset, or a checkpoint whose config says so): it reads prompts."""
        from ..models.causal_presets import is_causal_checkpoint

        return is_causal_checkpoint(self.model_name_or_path)

    def config_overrides(self) -> dict[str, Any]:
        """Config fields to set on the model: ``model_overrides`` plus the dropout fields that are set."""
        overrides = dict(self.model_overrides or {})
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if getattr(self, name) is not None:
                overrides[name] = getattr(self, name)
        return overrides
