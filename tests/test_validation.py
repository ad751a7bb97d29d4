"""Bad inputs are refused before step 0, with a message naming the culprit; loading never runs code.

Every bad input tried is one :class:`Case` in :data:`CASES`. Each case is run against the real objects
(``UATConfig``, ``HfArgumentParser``, ``UATTrainer`` with a real tiny Marian model and tokenizer, real
``datasets`` corpora, ``load_corpora`` on JSONL files) and must raise at construction or loading time with
``fragment`` in its message. ``docs/validation.md`` is generated from the same cases and the messages the
code really raises, and :func:`test_bad_input_is_refused_with_a_named_culprit` compares every raised message
with its row in that table, so the doc cannot drift. After changing a message, regenerate the doc with::

    UAT_WRITE_VALIDATION_DOC=1 python -m pytest tests/test_validation.py
"""

from __future__ import annotations

import ast
import copy
import gzip
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasets import Dataset
from transformers import HfArgumentParser

from conftest import corpus_of
from uat_hf.data.corpora import CorpusSpec, corpus_specs_from_directory, load_corpora
from uat_hf.data.language_codes import check_language_codes, corpus_language_codes
from uat_hf.data.tokenization import train_joint_tokenizer
from uat_hf.models.presets import build_model
from uat_hf.sampling.sampler import CorpusBatchSampler
from uat_hf.strategies.scorer import RELEASED_FIT_TOLERANCE
from uat_hf.training.callback import CorpusBalancingCallback
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "uat_hf"
DOC = ROOT / "docs" / "validation.md"
WRITE_DOC = os.environ.get("UAT_WRITE_VALIDATION_DOC") == "1"

SENTENCES = [
    "the court rejected the appeal", "the patient received a new treatment", "the market closed higher today",
    "das gericht wies die berufung ab", "der patient erhielt eine neue behandlung", "der markt schloss heute höher",
    "the law applies to every member state", "das gesetz gilt für jeden mitgliedstaat",
]


# ---------------------------------------------------------------------------------------------- objects


@dataclass
class Env:
    """The real objects the cases start from (module scope: built once, never mutated by a case)."""

    tokenizer: Any
    model: Any
    train: dict[str, Dataset]
    dev: dict[str, Dataset]
    tmp: Path


def _tokenized(lengths: list[int], label_lengths: list[int]) -> Dataset:
    """A tokenized corpus with known lengths (ids 3..22, EOS = 1 at the end of every sequence)."""

    def ids(n: int, shift: int) -> list[int]:
        return [3 + (shift + i) % 20 for i in range(n - 1)] + [1]

    return Dataset.from_dict({
        "input_ids": [ids(n, i) for i, n in enumerate(lengths)],
        "attention_mask": [[1] * n for n in lengths],
        "labels": [ids(n, i + 7) for i, n in enumerate(label_lengths)],
    })


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    tokenizer = train_joint_tokenizer(SENTENCES * 3, vocab_size=120, min_frequency=1, special_tokens=[">>de<<"])
    assert len(tokenizer) > 23
    import torch

    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    train = {"news": _tokenized([6, 9, 12, 7, 5, 8], [7, 8, 11, 6, 5, 9]),
             "law": _tokenized([10, 14, 30, 9], [9, 13, 20, 8])}
    dev = {"news": _tokenized([6, 7, 8], [6, 7, 8]), "law": _tokenized([9, 10], [9, 10])}
    return Env(tokenizer, model, train, dev, tmp_path_factory.mktemp("validation"))


def config(env: Env, **overrides: Any) -> UATConfig:
    settings = dict(output_dir=str(env.tmp / "out"), max_tokens=64, report_to=[], use_cpu=True, save_strategy="no",
                    disable_tqdm=True, update_every=2, mc_samples=2)
    settings.update(overrides)
    return UATConfig(**settings)


def parse(env: Env, *argv: str) -> UATConfig:
    """What ``uat-train`` does with its command line (``HfArgumentParser`` over ``UATConfig``)."""
    (args,) = HfArgumentParser((UATConfig,)).parse_args_into_dataclasses(
        ["--output_dir", str(env.tmp / "out"), "--report_to", "none", "--use_cpu", *argv]
    )
    return args


def trainer(env: Env, *, model: Any = None, tokenizer: Any = None, train: dict | None = None, dev: dict | None = None,
            eval_corpora: dict | None = None, **overrides: Any) -> UATTrainer:
    return UATTrainer(
        model if model is not None else env.model, config(env, **overrides),
        train_corpora=env.train if train is None else train, dev_corpora=env.dev if dev is None else dev,
        eval_corpora=eval_corpora, processing_class=tokenizer if tokenizer is not None else env.tokenizer,
    )


def without(corpora: dict, name: str) -> dict:
    return {k: v for k, v in corpora.items() if k != name}


def with_empty(corpora: dict, name: str) -> dict:
    return {**corpora, name: corpora[name].select([])}


def no_eos(env: Env) -> UATTrainer:
    model = build_model("tiny", env.tokenizer)
    model.config.eos_token_id = None
    tokenizer = copy.deepcopy(env.tokenizer)
    tokenizer.eos_token = None
    assert tokenizer.eos_token_id is None
    return trainer(env, model=model, tokenizer=tokenizer, strategy="multiuat", measure="enteos")


def no_dropout(env: Env) -> UATTrainer:
    model = build_model("tiny", env.tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return trainer(env, model=model, strategy="multiuat", measure="exptp")


def encoder_only():
    """A tiny BERT masked LM: neither sequence-to-sequence nor a causal LM."""
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=32))


def stock_trainer(env: Env, model: Any, **kwargs: Any):
    """``attach_balancing`` on a stock ``Seq2SeqTrainer`` (multiuat), as a user of the callback would call it."""
    from transformers import Seq2SeqTrainer

    from uat_hf.training.balancing import attach_balancing

    stock = Seq2SeqTrainer(model, config(env, strategy="multiuat", measure="exptp"), **kwargs)
    return attach_balancing(stock, env.train, env.dev)


def write_jsonl(env: Env, name: str, rows: list[dict]) -> str:
    path = env.tmp / f"{name}.train.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def load(env: Env, spec: CorpusSpec, **kwargs: Any):
    return load_corpora([spec], env.tokenizer, splits=("train",), cache_dir=str(env.tmp / "cache"), **kwargs)


PAIR = {"translation": {"en": "the court rejected the appeal", "de": "das gericht wies die berufung ab"}}


def missing_target_language(env: Env):
    rows = [PAIR, {"translation": {"en": "the law applies"}}, PAIR]
    return load(env, CorpusSpec("legal", "en", "de", train=write_jsonl(env, "legal", rows)), tags=None)


def missing_source_field(env: Env):
    rows = [{"src": "the market closed", "tgt": "der markt schloss"}, {"tgt": "das gesetz gilt"}]
    spec = CorpusSpec("news", "en", "de", train=write_jsonl(env, "news", rows), source_field="src", target_field="tgt")
    return load(env, spec, tags=None)


def absent_target_field(env: Env):
    rows = [{"src": "the market closed", "tgt": "der markt schloss"}]
    spec = CorpusSpec("news2", "en", "de", train=write_jsonl(env, "news2", rows), source_field="src",
                      target_field="target_text")
    return load(env, spec, tags=None)


def invalid_utf8(env: Env):
    path = env.tmp / "latin1.train.jsonl"
    latin1 = '{"translation": {"en": "caf\u00e9", "de": "Caf\u00e9"}}\n'.encode("latin-1")
    path.write_bytes(json.dumps(PAIR).encode() + b"\n" + latin1)
    return load(env, CorpusSpec("legal", "en", "de", train=str(path)), tags=None)


def two_files_for_one_split(env: Env):
    folder = env.tmp / "ambiguous"
    folder.mkdir(exist_ok=True)
    (folder / "news.train.jsonl").write_text(json.dumps(PAIR) + "\n", encoding="utf-8")
    with gzip.open(folder / "news.train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps(PAIR) + "\n")
    return corpus_specs_from_directory(folder, "en", "de")


def offline_hub_dataset(env: Env):
    return load(env, CorpusSpec("news", "en", "de", path="uat-hf-tests/no-such-dataset"), tags=None)


def unaligned_moses(env: Env):
    (env.tmp / "KDE4.de-en.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (env.tmp / "KDE4.de-en.de").write_text("eins\nzwei\n", encoding="utf-8")
    return load(env, CorpusSpec("kde4", "en", "de", format="moses", train=str(env.tmp / "KDE4.de-en")), tags=None)


def ted_talks_without_the_column(env: Env):
    path = env.tmp / "all_talks_train.tsv"
    path.write_text("talk_name\ten\tde\nt1\thello\thallo\n", encoding="utf-8")
    return load(env, CorpusSpec("kor", "ko", "en", format="ted_talks", train=str(path)), tags=None)


def carve_larger_than_the_corpus(env: Env):
    spec = CorpusSpec("legal", "en", "de", train=write_jsonl(env, "legal-carve", [PAIR] * 3), carve_test=3)
    return load(env, spec, tags=None)


def unknown_language_tag(env: Env):
    spec = CorpusSpec("legal", "en", "de", train=write_jsonl(env, "legal-tag", [PAIR]))
    return load(env, spec, tags={"legal": ">>xx<<"})


def resume(env: Env, case: str, state: dict | None = None, **overrides: Any):
    """Resume, with ``overrides``, from a checkpoint that a multiuat run on news and law (seed 7, measure exptp)
    saved (or one whose balancing state is ``state``): ``UATTrainer.train`` refuses before training starts."""
    folder = env.tmp / f"resume-{case}" / "checkpoint-2"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}), encoding="utf-8")
    saved = trainer(env, strategy="multiuat", measure="exptp", seed=7).balancing
    (folder / BALANCING_STATE_FILE).write_text(json.dumps(state or saved.state_dict()), encoding="utf-8")
    settings = {"strategy": "multiuat", "measure": "exptp", "seed": 7, **overrides}
    settings = {key: value for key, value in settings.items() if value is not None}
    return trainer(env, **settings).train(resume_from_checkpoint=str(folder))


# ---------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    id: str
    bad_input: str  # what the user did, for the doc table
    raised_by: str  # where it fails: always at construction or loading, never in train()
    fragment: str  # must appear in the message (corpus / field / value at fault)
    make: Callable[[Env], Any]
    error: type[Exception] = ValueError


P2 = '{"news": 0.5, "law": 0.5}'
CASES: list[Case] = [
    # --- strategy / measure / knobs (UATConfig, also what the command line builds) ---
    Case("unknown-strategy", "`strategy=\"greedy\"`", "UATConfig",
         "Unknown strategy 'greedy'; choose one of proportional, temperature, uniform, fixed, multiuat, multidds-s",
         lambda e: config(e, strategy="greedy")),
    Case("unknown-measure", "`measure=\"entropy\"`", "UATConfig",
         "Unknown measure 'entropy'; choose one of pretp, exptp, vartp, comev, entsent, enteos",
         lambda e: config(e, measure="entropy")),
    Case("tau-zero", "`strategy=\"temperature\", sampling_temperature=0`", "UATConfig",
         "sampling_temperature must be > 0",
         lambda e: config(e, strategy="temperature", sampling_temperature=0)),
    Case("tau-negative", "`strategy=\"multiuat\", scorer_prior_temperature=-1`", "UATConfig",
         "scorer_prior_temperature must be > 0 (1 = proportional, 5 = temperature, inf = uniform), got -1",
         lambda e: config(e, strategy="multiuat", scorer_prior_temperature=-1.0)),
    Case("tau-nan", "`--strategy temperature --sampling_temperature nan`", "command line",
         "sampling_temperature must be > 0 (1 = proportional, 5 = temperature, inf = uniform), got nan",
         lambda e: parse(e, "--strategy", "temperature", "--sampling_temperature", "nan")),
    Case("tau-for-uniform", "`--strategy uniform --sampling_temperature 2`", "command line",
         "sampling_temperature=2.0 is the τ of strategy 'temperature', but strategy is 'uniform', "
         "whose τ is fixed (inf)",
         lambda e: parse(e, "--strategy", "uniform", "--sampling_temperature", "2")),
    Case("tau-for-multiuat", "`strategy=\"multiuat\", sampling_temperature=5`", "UATConfig",
         "a dynamic strategy's starting prior is scorer_prior_temperature",
         lambda e: config(e, strategy="multiuat", sampling_temperature=5.0)),
    Case("scorer-tau-static",
         "`--strategy temperature --scorer_prior_temperature 1` (a recipe for multiuat, switched)", "command line",
         "scorer_prior_temperature=1.0 sets where the multiuat / multidds-s scorer starts, but strategy "
         "'temperature' has no scorer",
         lambda e: parse(e, "--strategy", "temperature", "--scorer_prior_temperature", "1")),
    Case("s-not-below-max-steps", "`--strategy multiuat --update_every 1000 --max_steps 20`", "command line",
         "update_every=1000 >= max_steps=20: strategy 'multiuat' would never re-balance",
         lambda e: parse(e, "--strategy", "multiuat", "--update_every", "1000", "--max_steps", "20")),
    Case("prior-fit-unknown", "`scorer_prior_fit=\"warm\"`", "UATConfig",
         "scorer_prior_fit must be one of released, exact",
         lambda e: config(e, scorer_prior_fit="warm")),
    Case("health-action-unknown", "`corpus_health_action=\"drop\"`", "UATConfig",
         "corpus_health_action must be one of warn, set_aside, down_weight, got 'drop'",
         lambda e: config(e, corpus_health_action="drop")),
    Case("set-aside-one-check", "`corpus_health_action=\"set_aside\", corpus_health_checks=1`", "UATConfig",
         "corpus_health_action=set_aside needs corpus_health_checks >= 2",
         lambda e: config(e, corpus_health_action="set_aside", corpus_health_checks=1)),
    Case("scorer-lr-zero-released", "`strategy=\"multiuat\", scorer_lr=0` (with the default released prior fit)",
         "UATConfig",
         "scorer_lr=0 cannot fit the scorer to its prior", lambda e: config(e, strategy="multiuat", scorer_lr=0.0)),
    Case("k-zero", "`mc_samples=0` (K)", "UATConfig", "mc_samples must be >= 1, got 0",
         lambda e: config(e, mc_samples=0)),
    Case("s-zero", "`update_every=0` (S)", "UATConfig", "update_every must be >= 1, got 0",
         lambda e: config(e, update_every=0)),
    Case("s-negative", "`--update_every -5` (S)", "command line", "update_every must be >= 1, got -5",
         lambda e: parse(e, "--update_every", "-5")),
    Case("scorer-lr-nan", "`scorer_lr=nan`", "UATConfig", "scorer_lr must be >= 0, got nan",
         lambda e: config(e, scorer_lr=math.nan)),
    Case("max-tokens-zero", "`max_tokens=0`", "UATConfig", "max_tokens must be >= 1 or unset, got 0",
         lambda e: config(e, max_tokens=0)),
    Case("scorer-lr-infinite", "`scorer_lr=inf`", "UATConfig", "scorer_lr must be a finite number >= 0, got inf",
         lambda e: config(e, scorer_lr=math.inf)),
    # --- the Trainer's own numbers (refused by name before the optimizer or scheduler meets them) ---
    Case("lr-negative", "`--learning_rate -1`", "command line", "learning_rate must be > 0, got -1.0",
         lambda e: parse(e, "--learning_rate", "-1")),
    Case("lr-nan", "`learning_rate=nan`", "UATConfig", "learning_rate must be > 0, got nan",
         lambda e: config(e, learning_rate=math.nan)),
    Case("max-steps-below-minus-one", "`--max_steps -2`", "command line", "max_steps must be >= -1, got -2",
         lambda e: parse(e, "--max_steps", "-2")),
    Case("adam-beta-one", "`adam_beta2=1.0`", "UATConfig", "adam_beta2 must be >= 0 and < 1, got 1.0",
         lambda e: config(e, adam_beta2=1.0)),
    Case("grad-norm-negative", "`max_grad_norm=-1`", "UATConfig", "max_grad_norm must be >= 0 or unset, got -1",
         lambda e: config(e, max_grad_norm=-1.0)),
    Case("batch-size-zero", "`--per_device_train_batch_size 0`", "command line",
         "per_device_train_batch_size must be >= 1, got 0",
         lambda e: parse(e, "--per_device_train_batch_size", "0")),
    Case("label-smoothing-one", "`label_smoothing_factor=1`", "UATConfig",
         "label_smoothing_factor must be >= 0 and < 1, got 1", lambda e: config(e, label_smoothing_factor=1)),
    Case("seed-negative", "`--seed -1`", "command line", "seed must be >= 0 and < 4294967296, got -1",
         lambda e: parse(e, "--seed", "-1")),
    Case("group-by-length", '`train_sampling_strategy="group_by_length"`', "UATConfig",
         "train_sampling_strategy='group_by_length' is not used: the corpus sampler draws every training batch",
         lambda e: config(e, train_sampling_strategy="group_by_length")),
    Case("drop-last", "`dataloader_drop_last=True`", "UATConfig",
         "dataloader_drop_last=True is not used: the corpus sampler draws batches from endless per-corpus streams",
         lambda e: config(e, dataloader_drop_last=True)),
    Case("auto-find-batch-size", "`--auto_find_batch_size`", "command line",
         "auto_find_batch_size=True is not used: the corpus sampler builds its batches",
         lambda e: parse(e, "--auto_find_batch_size")),
    # --- hand-given probabilities ---
    Case("probs-negative", "`--corpus_probabilities '{\"news\": -0.5, \"law\": 1.5}'`", "command line",
         "probability of corpus 'news' is negative (-0.5)",
         lambda e: parse(e, "--strategy", "fixed", "--corpus_probabilities", '{"news": -0.5, "law": 1.5}')),
    Case("probs-nan", "`corpus_probabilities={\"news\": nan, \"law\": 0.5}`", "UATConfig",
         "probability of corpus 'news' is nan; it must be finite",
         lambda e: config(e, strategy="fixed", corpus_probabilities={"news": math.nan, "law": 0.5})),
    Case("probs-infinite", "`--corpus_probabilities '{\"news\": Infinity, \"law\": 0}'`", "command line",
         "probability of corpus 'news' is inf",
         lambda e: parse(e, "--strategy", "fixed", "--corpus_probabilities", '{"news": Infinity, "law": 0}')),
    Case("probs-sum", "`corpus_probabilities={\"news\": 0.5, \"law\": 0.4}`", "UATConfig",
         "sum to 0.9, not 1", lambda e: config(e, strategy="fixed", corpus_probabilities={"news": 0.5, "law": 0.4})),
    Case("probs-not-number", "`--corpus_probabilities '{\"news\": \"half\", \"law\": 0.5}'`", "command line",
         "probability of corpus 'news' must be a number, got 'half'",
         lambda e: parse(e, "--strategy", "fixed", "--corpus_probabilities", '{"news": "half", "law": 0.5}')),
    Case("probs-not-json", "`--corpus_probabilities news=0.5,law=0.5`", "command line",
         "corpus_probabilities must be a JSON object",
         lambda e: parse(e, "--strategy", "fixed", "--corpus_probabilities", "news=0.5,law=0.5")),
    Case("probs-not-mapping", "`--corpus_probabilities '[0.5, 0.5]'`", "command line",
         "corpus_probabilities must be a mapping corpus -> probability",
         lambda e: parse(e, "--strategy", "fixed", "--corpus_probabilities", "[0.5, 0.5]")),
    Case("probs-zero-dynamic", "`strategy=\"multiuat\", corpus_probabilities={\"news\": 0, \"law\": 1}`", "UATConfig",
         "corpus_probabilities gives corpus 'news' probability 0 but strategy 'multiuat' starts its scorer",
         lambda e: config(e, strategy="multiuat", corpus_probabilities={"news": 0, "law": 1})),
    Case("probs-and-tau", "`--strategy multiuat --corpus_probabilities ... --scorer_prior_temperature 5`",
         "command line",
         "Give either scorer_prior_temperature or corpus_probabilities, not both",
         lambda e: parse(e, "--strategy", "multiuat", "--corpus_probabilities", P2, "--scorer_prior_temperature",
                         "5")),
    Case("probs-with-uniform", "`--strategy uniform --corpus_probabilities ...`", "command line",
         "corpus_probabilities fixes the mix by hand, but strategy 'uniform' samples with its own prior. "
         "Use strategy 'fixed'",
         lambda e: parse(e, "--strategy", "uniform", "--corpus_probabilities", P2)),
    Case("fixed-without-probs", "`strategy=\"fixed\"` without `corpus_probabilities`", "UATConfig",
         "strategy 'fixed' samples with corpus_probabilities, which is not set",
         lambda e: config(e, strategy="fixed")),
    Case("probs-missing-corpus", "`corpus_probabilities={\"news\": 1.0}` for corpora news, law", "UATTrainer",
         "corpus_probabilities has no probability for training corpus 'law'",
         lambda e: trainer(e, strategy="fixed", corpus_probabilities={"news": 1.0})),
    Case("probs-extra-corpus", "`corpus_probabilities` naming `\"medical\"`, not a training corpus", "UATTrainer",
         "corpus_probabilities names corpus 'medical', which is not a training corpus",
         lambda e: trainer(e, strategy="fixed", corpus_probabilities={"news": 0.5, "law": 0.25, "medical": 0.25})),
    Case("probs-misspelt-corpus", "`corpus_probabilities={\"news\": 0.5, \"lw\": 0.5}` for corpora news, law (a typo)",
         "UATTrainer", "corpus_probabilities names corpus 'lw', which is not a training corpus (training corpora: "
         "['news', 'law'])", lambda e: trainer(e, strategy="fixed", corpus_probabilities={"news": 0.5, "lw": 0.5})),
    # --- corpora given to the trainer ---
    Case("empty-train", "an empty training corpus", "UATTrainer", "The training corpus 'law' is empty",
         lambda e: trainer(e, train=with_empty(e.train, "law"))),
    Case("empty-dev", "an empty dev corpus", "UATTrainer", "The dev corpus 'news' is empty",
         lambda e: trainer(e, dev=with_empty(e.dev, "news"))),
    Case("empty-eval", "an empty evaluation corpus", "UATTrainer", "The evaluation corpus 'news' is empty",
         lambda e: trainer(e, eval_corpora=with_empty(e.dev, "news"))),
    Case("no-train-corpora", "`train_corpora={}`", "UATTrainer", "train_corpora is empty",
         lambda e: trainer(e, train={})),
    Case("train-dataset", "`UATTrainer(model, args, train_dataset=ds)` (the stock Trainer's argument)", "UATTrainer",
         "UATTrainer's train_dataset must be a dict of named corpora, {name: tokenized Dataset, ...}, got Dataset",
         lambda e: UATTrainer(e.model, config(e), train_dataset=e.train["news"], processing_class=e.tokenizer),
         error=TypeError),
    Case("dev-missing", "multiuat: training corpus `law` without a dev set", "UATTrainer",
         "Training corpus 'law' has no dev set", lambda e: trainer(e, dev=without(e.dev, "law"), strategy="multiuat")),
    Case("dev-missing-dds", "multidds-s: training corpus `news` without a dev set", "UATTrainer",
         "Training corpus 'news' has no dev set",
         lambda e: trainer(e, dev=without(e.dev, "news"), strategy="multidds-s")),
    Case("dev-extra", "multiuat: dev set `medical` without a training corpus", "UATTrainer",
         "Dev set 'medical' has no training corpus of the same name",
         lambda e: trainer(e, dev={**e.dev, "medical": e.dev["law"]}, strategy="multiuat")),
    Case("train-untokenized", "a training corpus of raw text (no `input_ids`/`labels`)", "UATTrainer",
         "Training corpus 'law' lacks the column(s) ['input_ids', 'labels']",
         lambda e: trainer(e, train={**e.train, "law": Dataset.from_dict({"source": ["a"], "target": ["b"]})})),
    Case("train-no-labels", "a training corpus without `labels`", "UATTrainer",
         "Training corpus 'news' lacks the column(s) ['labels']",
         lambda e: trainer(e, train={**e.train, "news": e.train["news"].remove_columns("labels")})),
    Case("dev-no-labels", "multiuat: a dev corpus without `labels`", "UATTrainer",
         "Dev corpus 'law' lacks the column(s) ['labels']",
         lambda e: trainer(e, dev={**e.dev, "law": e.dev["law"].remove_columns("labels")}, strategy="multiuat")),
    Case("eval-no-references", "an evaluation corpus with neither `target_text` nor `labels`", "UATTrainer",
         "Evaluation corpus 'news' needs a 'target_text' or 'labels' column",
         lambda e: trainer(e, eval_corpora={"news": e.dev["news"].remove_columns("labels")})),
    Case("max-tokens-too-small", "`max_tokens=16`, longest `law` example 30 tokens", "UATTrainer",
         "max_tokens=16 is smaller than the longest example of corpus 'law' (30 tokens",
         lambda e: trainer(e, max_tokens=16)),
    # --- the model and tokenizer ---
    Case("no-dropout", "multiuat with every dropout rate of the model 0", "UATTrainer",
         "every dropout rate of the model is 0 (config: dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)",
         no_dropout),
    Case("enteos-no-eos", "`measure=\"enteos\"`, `model.config.eos_token_id=None`, tokenizer without EOS",
         "UATTrainer",
         "Measure 'enteos' needs the EOS token id", no_eos),
    Case("encoder-only-model", "an encoder-only model (`BertForMaskedLM`) in `UATTrainer`", "UATTrainer",
         "BertForMaskedLM (model_type 'bert') is neither an encoder-decoder model",
         lambda e: trainer(e, model=encoder_only())),
    Case("encoder-only-stock-trainer", "`attach_balancing` on a stock `Seq2SeqTrainer` training a BERT masked LM",
         "attach_balancing", "BertForMaskedLM (model_type 'bert') is neither an encoder-decoder model",
         lambda e: stock_trainer(e, encoder_only())),
    Case("collator-no-tokenizer", "`attach_balancing`: stock trainer, `default_data_collator`, no `processing_class`",
         "attach_balancing",
         "(default_data_collator) is not a DataCollatorForSeq2Seq and the trainer has no processing_class",
         lambda e: stock_trainer(e, e.model, data_collator=__import__("transformers").default_data_collator)),
    # --- loading corpora from files ---
    Case("row-missing-target", "JSONL row 1 without the target language", "load_corpora",
         "Corpus 'legal' split 'train' row 1: target text (language 'de' in field 'translation') is missing",
         missing_target_language),
    Case("row-missing-source", "JSONL row 1 without the `src` field (`source_field=\"src\"`)", "load_corpora",
         "Corpus 'news' split 'train' row 1: source text (field 'src') is missing", missing_source_field),
    Case("field-absent", "`target_field=\"target_text\"`, no such field in the file", "load_corpora",
         "Corpus 'news2' split 'train': target field 'target_text' not found", absent_target_field),
    Case("invalid-utf8", "a JSONL file with a Latin-1 byte on line 2", "load_corpora",
         "Corpus 'legal' split 'train': '", invalid_utf8),
    Case("two-files-one-split", "`news.train.jsonl` beside `news.train.jsonl.gz` in a corpus directory",
         "corpus_specs_from_directory",
         "has 2 files for corpus 'news' split 'train': 'news.train.jsonl', 'news.train.jsonl.gz'",
         two_files_for_one_split),
    Case("hub-offline", "a corpus `path: uat-hf-tests/no-such-dataset` with `HF_HUB_OFFLINE=1`", "load_corpora",
         "could not load dataset 'uat-hf-tests/no-such-dataset' from the Hugging Face Hub: offline mode is on",
         offline_hub_dataset),
    Case("unknown-language-tag", "language tag `>>xx<<` that the tokenizer lacks", "load_corpora",
         "Language tag '>>xx<<' is not a single token of this tokenizer", unknown_language_tag),
    # --- corpus specs: formats, Hub revisions, carved dev/test sets ---
    Case("unknown-format", "`format: opus` in a corpus spec", "CorpusSpec",
         "Corpus 'emea': format 'opus' is not one of ['moses', 'ted_talks']",
         lambda e: CorpusSpec("emea", "en", "de", format="opus", train="data/EMEA.de-en")),
    Case("revision-without-path", "`revision: refs/convert/parquet` on a spec of local files", "CorpusSpec",
         "Corpus 'news': revision 'refs/convert/parquet' needs path",
         lambda e: CorpusSpec("news", "en", "de", train="news.tsv", revision="refs/convert/parquet")),
    Case("carve-and-dev", "`carve_dev: 2000` and `dev: news.dev.tsv` in one spec", "CorpusSpec",
         "Corpus 'news': carve_dev=2000 carves the dev split out of train, but dev is given too ('news.dev.tsv')",
         lambda e: CorpusSpec("news", "en", "de", train="news.tsv", dev="news.dev.tsv", carve_dev=2000)),
    Case("carve-too-large", "`carve_test: 3` of a 3-pair corpus", "load_corpora",
         "Corpus 'legal': carve_test=3 would take 3 of the 3 pairs", carve_larger_than_the_corpus),
    Case("moses-unaligned", "Moses files `KDE4.de-en.en` (3 lines) and `KDE4.de-en.de` (2 lines)", "load_corpora",
         "Corpus 'kde4' split 'train': the Moses files are not aligned", unaligned_moses),
    Case("ted-talks-no-column", "`format: ted_talks`, `source_lang: ko`, a TSV without a `ko` column",
         "load_corpora", "Corpus 'kor' split 'train': ", ted_talks_without_the_column),
    # --- language codes (NLLB / M2M100 / mBART-50) ---
    Case("code-unknown-scheme", "`language_tags: nlb` (a typo) for language codes", "corpus_language_codes",
         "Unknown language-code scheme 'nlb'",
         lambda e: corpus_language_codes([CorpusSpec("news", "en", "de")], "nlb")),
    Case("code-missing", "`language_tags: mbart50`, a corpus into Klingon (`target_lang: tlh`)",
         "corpus_language_codes", "Corpus 'klingon': target_lang 'tlh' has no mbart50 language code",
         lambda e: corpus_language_codes([CorpusSpec("klingon", "en", "tlh")], "mbart50")),
    Case("code-bad-override", "`language_codes: {de: german}` with `language_tags: nllb`", "corpus_language_codes",
         "language_codes: 'de': 'german' is not a nllb code",
         lambda e: corpus_language_codes([CorpusSpec("news", "en", "de")], "nllb", {"de": "german"})),
    Case("code-tokenizer-without-languages", "`language_tags: nllb` with a Marian tokenizer (no `src_lang`)",
         "check_language_codes", "has none: use the model's own tokenizer",
         lambda e: check_language_codes(e.tokenizer, corpus_language_codes([CorpusSpec("news", "en", "de")],
                                                                            "nllb"))),
    # --- resume: refused before any file of the run changes (uat-train: one error line, exit 2) ---
    Case("resume-other-strategy", "resume a multiuat checkpoint with `strategy=\"multidds-s\"`", "UATTrainer.train",
         "was trained with strategy 'multiuat', this run uses 'multidds-s'",
         lambda e: resume(e, "strategy", strategy="multidds-s", measure=None)),
    Case("resume-other-seed", "resume a checkpoint of seed 7 with `seed=8`", "UATTrainer.train",
         "was trained with seed=7 (this run gives 8)", lambda e: resume(e, "seed", seed=8)),
    Case("resume-other-health-checks", "resume a checkpoint of 3 corpus-health checks with "
         "`corpus_health_checks=6` (a sample per check is held out of training)", "UATTrainer.train",
         "was trained with corpus_health_checks=3 (this run gives 6)",
         lambda e: resume(e, "health-checks", corpus_health_checks=6)),
    Case("resume-other-measure", "resume a `measure=\"exptp\"` checkpoint with `measure=\"vartp\"`",
         "UATTrainer.train", "was trained with measure='exptp' (this run gives 'vartp')",
         lambda e: resume(e, "measure", measure="vartp")),
    Case("resume-other-corpora", "resume a checkpoint of corpora news, law with news alone", "UATTrainer.train",
         "was trained on corpora ['news', 'law'], this run gives ['news']",
         lambda e: resume(e, "corpora", train=without(e.train, "law"), dev=without(e.dev, "law"))),
    Case("resume-old-state", "resume from a checkpoint whose balancing state is `{\"format\": 3}`", "UATTrainer.train",
         "has format 3, this version of uat_hf reads 4", lambda e: resume(e, "old-state", state={"format": 3})),
    Case("resume-torn-state", "resume from a checkpoint whose balancing state is `{\"format\": 4}` (torn)",
         "UATTrainer.train", "lacks distribution, sampler: it is torn",
         lambda e: resume(e, "torn-state", state={"format": 4})),
]


# ---------------------------------------------------------------------------------------------- the doc

DOC_HEADER = """# Validation: bad inputs and the messages they get

Every input below is refused **before step 0** — when `UATConfig` is built (directly, from a recipe or from
the command line through `HfArgumentParser`), when `UATTrainer` is constructed, or when `load_corpora`
reads the data — never in the middle of `train()`. Each message names what is at fault: the corpus, the
field and the value.

This table is generated from the cases in `tests/test_validation.py` and the messages the code really
raises; the test suite compares every row with the raised message, so it cannot drift. After changing a
message, regenerate it with

```
UAT_WRITE_VALIDATION_DOC=1 python -m pytest tests/test_validation.py
```

Each prior knob belongs to one kind of strategy, so that switching `strategy` (on the command line, over a
recipe written for another one) can never silently train a different baseline: `proportional` is τ = 1 and
`uniform` τ = ∞, always; `temperature` is τ = 5 unless `sampling_temperature` says otherwise; `multiuat` and
`multidds-s` start their scorer from τ = 1 unless `scorer_prior_temperature` (or `corpus_probabilities`) says
otherwise. Hand-given probabilities (`corpus_probabilities`, a mapping or a JSON object string such as
`'{"news": 0.7, "law": 0.3}'`) are sampled with throughout by strategy `fixed`, and are the scorer's starting
point for `multiuat`/`multidds-s`. They must name exactly the training corpora, be finite and non-negative and
sum to 1 (within 1e-6); a probability of exactly 0 is allowed for `fixed` only (the scorer's logit would be -inf).

| Case | Bad input | Refused by | Exception | Message |
|---|---|---|---|---|
"""

DOC_FOOTER = """
## Refused when training starts (before the first step)

Some inputs can only be judged once `train()` is called; they are refused there, before any step:

| Bad input | Message | Test |
|---|---|---|
| `resume_from_checkpoint` a folder without `uat_balancing_state.json` | `Cannot resume from checkpoint \
'…/checkpoint-5': '…/uat_balancing_state.json' is missing …` (`allow_inexact_resume=True` accepts it, with a \
warning) | `test_resume.py::test_a_checkpoint_without_the_balancing_state_is_refused_unless_allowed` |
| the same, with the callback on a stock `Trainer` | `Cannot resume exactly at step 5: …/uat_balancing_state.json is \
missing …` | same |
| `resume_from_checkpoint=True` / `"true"` / `"latest"` with no complete checkpoint | `No complete checkpoint found \
in output_dir '…' to resume from ('…/checkpoint-2': '…/uat_balancing_state.json' is missing …). Resume inexactly \
(allow_inexact_resume=True, uat-train --allow_inexact_resume, …)` — or, when every folder is torn, `… Remove the torn \
checkpoint folders and train afresh …` (empty or torn `checkpoint-N` folders are skipped with a warning) | \
`test_checkpoints.py`, `test_resume.py::test_resume_true_skips_empty_and_torn_checkpoints_and_continues_exactly`, \
`test_refusals.py` |
| a checkpoint of another run: another strategy, corpora or setting that decides what the run computes \
(`strategy`, `measure`, `seed`, `data_seed`, `update_every`, `mc_samples`, the scorer's and mixing-law's knobs, \
`max_tokens`, ...), or a balancing state of another format or torn | the `resume-*` rows above; checked before any \
file of the run changes, so the run folder is left byte-identical | \
`test_resume.py::test_a_refused_resume_changes_no_file_of_the_run`, \
`test_refusals.py::test_a_refused_resume_is_one_line_and_leaves_the_run_folder_byte_identical` |
| a checkpoint already at `max_steps` | `Checkpoint … is already at step 5 and max_steps is 5: nothing is left to \
train …` | `test_resume.py::test_resume_from_a_checkpoint_at_max_steps_is_refused_before_any_step` |
| a dynamic strategy trained by epochs whose run is shorter than `update_every` | `update_every=1000 >= max_steps=N \
(the steps this run trains): strategy 'multiuat' would never re-balance …` | \
`test_resume.py::test_dynamic_strategy_that_would_never_update_is_refused_before_the_first_step` |

`uat-train` also refuses, before reading any data, an `output_dir` that is an existing file (`output_dir \
'…/results.txt'
cannot be created as a directory: '…/results.txt' is a file …`; `test_cli_inputs.py`), one that cannot be created
(`output_dir '/proc/x' cannot be created (No such file or directory); give a writable folder.`), a model, tokenizer
or recipe given as a Hub id that cannot be loaded offline (`could not load model 'org/name' from the Hugging Face
Hub: offline mode is on …`; `test_cli_inputs.py`), a `max_source_length` / `max_target_length` above the model's
`max_position_embeddings` (read from the preset or the pretrained model's config, before any data is read), and a
`resume_from_checkpoint` that cannot be met (the messages above, as one `uat-train: error:` line; `test_refusals.py`).

Before the first step, `uat-train` checks that the first checkpoint (weights plus Adam's two moments) and the final
model fit in `output_dir`'s free space: `output_dir '…' has 0.29 MB free, but the first checkpoint (about 0.47 MB:
weights and optimizer state) and the final model (0.16 MB) need about 0.63 MB. Free some space or give an output_dir
on a larger disk.` If the disk fills up later anyway, the run ends (exit code 1) with `output_dir '…' ran out of
space while saving at step 2 (… free; a checkpoint needs about …); the torn '…/checkpoint-2' was removed. Free some
space, then resume with --resume_from_checkpoint latest.` (`test_refusals.py`; those two tests mount a small tmpfs
and are skipped without root).

A torn last line in `balancing_history.jsonl` (a run killed while writing it) is dropped on resume, with a
warning (`The last line of …/balancing_history.jsonl is torn …`), rather than refused. Temporary `.tmp-*.json`
files that a kill during a checkpoint write leaves in `output_dir` or its checkpoint folders are removed on resume,
with a warning. A history file with fewer complete records than the checkpoint's updates is refused (`Cannot
resume exactly: the checkpoint was saved after 3 balancing updates, but '…/balancing_history.jsonl' holds 1
complete records of them …`;
`test_resume.py::test_resume_from_an_older_checkpoint_keeps_only_its_history_and_continues_exactly`).

## Recipe values of the wrong YAML type

A recipe value goes through its flag's type, as the same value on the command line would. A value that
cannot have the field's type is refused before anything loads, and the message names the recipe, the field
and the type (see `docs/usage.md`):

| Bad input | Message | Test |
|---|---|---|
| `update_every: 2.5`, `max_steps: 4.9` | `uat-train: error: recipe r.yaml: update_every must be an integer,\
 got 2.5 (float).` |\
 `test_cli_parser.py::test_a_recipe_value_of_the_wrong_yaml_type_is_refused_naming_field_and_type` |
| `mc_samples: true` | `… mc_samples must be an integer, got True (bool). YAML reads yes/no/true/false as\
 booleans: quote the value.` | same |
| `mix_corpora: 1` | `… mix_corpora must be a bool (true or false), got 1 (int).` | same |
| `eval_strategy: no` (unquoted, so a YAML boolean) | `… eval_strategy must be one of ['no', 'steps',\
 'epoch'], got False (bool). …` | same |

## Nothing lost, nothing silent

A corpus name becomes a file name (`hypotheses/<corpus>.txt`), so every name must be a safe file name: letters,
digits, `.`, `_` and `-`, not `.` or `..` (`uat_hf.utils.names.check_corpus_name`, used wherever names are
declared: corpus specs, `corpus_dir` file names, the dict keys given to `UATTrainer`, and `write_hypotheses`).
A recipe may not give a key twice, and a single-string field may not be given a list. Training stops at the
first non-finite loss or gradient norm (`allow_nonfinite_loss=True` trains on), and a run that its time budget
(`max_train_minutes`) cut short says so: `eval_results.json` gets `stopped_early: true`, `steps_done` and
`steps_planned`, and the results table's header and the model card a `STOPPED EARLY` note.

| Bad input | Message | Test |
|---|---|---|
| `corpus_specs: [{name: ../../escaped_by_name, ...}]` | `uat-train: error: corpus_specs[0] name: corpus name \
'../../escaped_by_name' is not a safe file name; corpus names become file names (e.g. hypotheses/<name>.txt), \
so use only letters, digits, '.', '_' and '-' (no path separators, not '.' or '..').` | \
`test_nothing_silent.py::test_a_corpus_spec_named_with_a_path_is_one_error_line_before_anything_is_written` |
| a `corpus_dir` file `de news.train.jsonl.gz` | `corpus_dir '…', file 'de news.train.jsonl.gz': corpus name \
'de news' is not a safe file name; …` | \
`test_nothing_silent.py::test_a_corpus_dir_file_name_that_is_not_a_safe_name_is_refused_naming_the_file` |
| `UATTrainer(train_corpora={"../../escaped_by_name": ds, ...})` | `UATTrainer training corpora: corpus name \
'../../escaped_by_name' is not a safe file name; …` (`CorpusSpec(name=...)`: `CorpusSpec name: …`; \
`write_hypotheses`: `hypotheses: …`) | \
`test_nothing_silent.py::test_uat_trainer_refuses_a_corpus_key_that_is_a_path` |
| `--learning_rate 1e30 --max_grad_norm 0 --max_steps 30` (the loss turns nan) | `uat-train: error: Training \
stopped at step 2 of 30: the training loss is nan (learning_rate 1e+30, max_grad_norm 0); training on would \
only give non-finite weights, so no final model was saved. Lower learning_rate, or clip gradients with \
max_grad_norm > 0, and train again (or resume from an earlier checkpoint); allow_nonfinite_loss=True trains on \
regardless.` (exit code 1; `UATTrainer.train` raises `NonFiniteLossError` before that step's update and \
checkpoint) | `test_nothing_silent.py::test_a_nan_loss_stops_uat_train_naming_the_step_and_saves_no_model` |
| `learning_rate` twice in one recipe | `uat-train: error: r.yaml: key 'learning_rate' is given twice (lines \
14 and 25); YAML would silently keep the last value. Keep one of them.` (at any depth, e.g. inside a corpus \
spec) | `test_nothing_silent.py::test_a_key_given_twice_in_a_recipe_is_refused_naming_the_key_and_the_file` |
| `corpus_dir: [a, b]` | `uat-train: error: corpus_dir must be a single string, got list ['a', 'b']. For \
several corpus folders, list each corpus in corpus_specs (name, source_lang, target_lang and its \
train/dev/test files) instead.` | `test_nothing_silent.py::test_corpus_dir_given_as_a_list_is_one_error_line` \
|
| `corpus_probabilities` naming `frr`, corpora `de`, `fr` | `uat-train: error: corpus_probabilities names \
corpus 'frr', which is not a training corpus (training corpora: ['de', 'fr']).` (an unknown name is reported \
before the corpus it leaves without a probability) | \
`test_nothing_silent.py::test_corpus_probabilities_naming_an_unknown_corpus_names_it_and_the_known_ones` |

## Safe loading

`tests/test_validation.py::test_package_loads_nothing_unsafely` scans the package source and fails on any of:

* YAML read with anything but `yaml.safe_load` / `yaml.safe_load_all` (recipes can never execute code);
* `pickle`, `cPickle`, `dill`, `joblib`, `cloudpickle`, `torch.save`, or `allow_pickle=True`: our own state
  files (`uat_balancing_state.json`, `balancing_history.jsonl`, `metric_signatures.json`) are JSON;
* `torch.load(...)` without `weights_only=True`;
* `trust_remote_code=True`: models and tokenizers are loaded with `trust_remote_code=False`, and
  `load_tokenizer` / `build_model` refuse a request for remote code.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _portable(message: str, env: Env) -> str:
    """The message with this run's temporary folder and working directory written as <tmp> and <cwd>."""
    return message.replace(str(env.tmp), "<tmp>").replace(os.getcwd(), "<cwd>")


def _doc_row(case: Case, message: str, error: Exception) -> str:
    return (f"| `{case.id}` | {_cell(case.bad_input)} | `{case.raised_by}` | `{type(error).__name__}` "
            f"| `{_cell(message)}` |")


def _doc_messages() -> dict[str, str]:
    """Case id → message, read back from the table of docs/validation.md."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `([\w-]+)` \|.*\| `(.*)` \|$", line)
        if match:
            rows[match.group(1)] = match.group(2).replace("\\|", "|")
    return rows


@pytest.fixture(scope="module")
def doc_rows():
    """The rows raised in this run; written to docs/validation.md when UAT_WRITE_VALIDATION_DOC=1."""
    rows: dict[str, str] = {}
    yield rows
    if WRITE_DOC and len(rows) == len(CASES):
        table = "\n".join(rows[case.id] for case in CASES)
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(DOC_HEADER + table + "\n" + DOC_FOOTER, encoding="utf-8")


# ---------------------------------------------------------------------------------------------- tests


def test_cases_are_unique():
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_with_a_named_culprit(case: Case, env: Env, doc_rows: dict):
    with pytest.raises(case.error) as raised:
        case.make(env)
    message = _portable(str(raised.value), env)
    assert case.fragment in message
    doc_rows[case.id] = _doc_row(case, message, raised.value)
    if not WRITE_DOC:
        documented = _doc_messages()
        assert case.id in documented, f"{case.id} is missing from {DOC}; regenerate it (see this module's docstring)"
        assert documented[case.id] == _cell(message).replace("\\|", "|"), (
            f"{DOC} is stale for {case.id}; regenerate it"
        )


@pytest.mark.skipif(WRITE_DOC, reason="the doc is being regenerated")
def test_doc_lists_exactly_the_cases():
    documented = _doc_messages()
    assert list(documented) == [case.id for case in CASES]
    for case in CASES:
        assert case.fragment in documented[case.id]


# --- hand-given probabilities: accepted inputs


def test_corpus_probabilities_from_the_command_line(env: Env):
    args = parse(env, "--corpus_probabilities", '{"news": 0.25, "law": 0.75}', "--strategy", "fixed")
    assert args.corpus_probabilities == {"news": 0.25, "law": 0.75}
    # Within 1e-6 of 1 is accepted.
    args = parse(env, "--corpus_probabilities", '{"news": 0.3333333, "law": 0.6666666}', "--strategy", "fixed")
    assert args.corpus_probabilities == {"news": 0.3333333, "law": 0.6666666}


def test_static_strategy_samples_with_the_given_probabilities(env: Env):
    t = trainer(env, strategy="fixed", corpus_probabilities={"law": 1.0, "news": 0.0})
    np.testing.assert_array_equal(t.corpus_sampler.probabilities, [0.0, 1.0])  # in train_corpora order
    drawn = {corpus_of(t.corpus_sampler, batch[0]) for batch in t.corpus_sampler}
    assert drawn == {"law"}


def test_hand_given_probabilities_are_checked_once_at_the_boundary(env: Env, monkeypatch):
    """The values when the settings are made (UATConfig), the names once the corpora are known: one check each."""
    import uat_hf.training.uat_config as uat_config

    checks = []
    check = uat_config.check_corpus_probabilities
    monkeypatch.setattr(uat_config, "check_corpus_probabilities", lambda *a, **k: checks.append(a) or check(*a, **k))
    t = trainer(env, strategy="fixed", corpus_probabilities={"law": 0.25, "news": 0.75})
    assert t.corpus_distribution.as_dict() == {"news": 0.75, "law": 0.25} and len(checks) == 1
    # The unknown name is reported (a typo, usually), not the training corpus it leaves without a probability.
    with pytest.raises(ValueError, match="names corpus 'other', which is not a training corpus"):
        trainer(env, strategy="fixed", corpus_probabilities={"law": 0.25, "other": 0.75})


@pytest.mark.parametrize("strategy", ["multiuat", "multidds-s"])
def test_dynamic_strategy_starts_its_scorer_from_the_given_probabilities(env: Env, strategy: str):
    t = trainer(env, strategy=strategy, measure="exptp", corpus_probabilities={"news": 0.2, "law": 0.8})
    np.testing.assert_array_equal(t.corpus_distribution.prior, [0.2, 0.8])
    np.testing.assert_array_equal(t.corpus_sampler.probabilities, [0.2, 0.8])  # sampled with until the first update
    # The authors' prior fit (the default) stops at MSE(softmax(ψ), q) <= 1e-8; prior_fit="exact" hits q itself.
    assert np.mean((t.corpus_distribution.proposer.scorer.probabilities - [0.2, 0.8]) ** 2) <= RELEASED_FIT_TOLERANCE
    exact = trainer(env, strategy=strategy, measure="exptp", corpus_probabilities={"news": 0.2, "law": 0.8},
                    scorer_prior_fit="exact")
    np.testing.assert_allclose(exact.corpus_distribution.proposer.scorer.probabilities, [0.2, 0.8], atol=1e-12)
    assert t.corpus_distribution.proposer.scorer.prior_fit == "released"
    assert exact.corpus_distribution.proposer.scorer.prior_fit == "exact"


# --- safe loading


_FORBIDDEN_TEXT = [
    (re.compile(r"\byaml\.(load|load_all|full_load|full_load_all|unsafe_load|unsafe_load_all)\s*\("),
     "yaml.load without safe_"),
    (re.compile(r"\bLoader\s*=\s*yaml\.(Loader|FullLoader|UnsafeLoader)"), "an unsafe YAML Loader"),
    (re.compile(r"\b(c?[Pp]ickle|dill|joblib|cloudpickle)\b"), "pickle (state files must be JSON)"),
    (re.compile(r"\btorch\.save\s*\("), "torch.save (pickle; state files must be JSON)"),
    (re.compile(r"allow_pickle\s*=\s*True"), "allow_pickle=True"),
    (re.compile(r"trust_remote_code\s*=\s*True"), "trust_remote_code=True"),
]


def _unsafe_torch_loads(tree: ast.AST, source: str) -> list[tuple[int, str]]:
    """``torch.load(...)`` / ``load(...)`` imported from torch without a literal ``weights_only=True``."""
    torch_load_names = {"torch.load"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch":
            torch_load_names |= {alias.asname or alias.name for alias in node.names if alias.name == "load"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in torch_load_names:
            safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords)
            if not safe:
                found.append((node.lineno, ast.get_source_segment(source, node) or "torch.load(...)"))
    return found


def test_package_loads_nothing_unsafely():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    problems = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for lineno, line in enumerate(source.splitlines(), 1):
            for pattern, what in _FORBIDDEN_TEXT:
                if pattern.search(line):
                    problems.append(f"{where}:{lineno}: {what}: {line.strip()}")
        for lineno, call in _unsafe_torch_loads(ast.parse(source), source):
            problems.append(f"{where}:{lineno}: torch.load without weights_only=True: {call}")
    assert not problems, "Unsafe loading in the package:\n" + "\n".join(problems)


def test_the_audit_catches_what_it_should():
    bad = ("import torch\nfrom torch import load as tl\nx = torch.load(p)\ny = tl(p, weights_only=False)\n"
           "z = torch.load(p, weights_only=True)\n")
    assert [line for line, _ in _unsafe_torch_loads(ast.parse(bad), bad)] == [3, 4]
    hits = [what for text in ("yaml.load(f)", "import pickle", "trust_remote_code=True", "yaml.safe_load(f)")
            for pattern, what in _FORBIDDEN_TEXT if pattern.search(text)]
    assert len(hits) == 3


def test_balancing_state_is_json(env: Env, tmp_path: Path):
    sampler = CorpusBatchSampler.from_datasets(env.train, max_tokens=64)
    callback = CorpusBalancingCallback(sampler)
    callback.save(str(tmp_path / BALANCING_STATE_FILE))
    state = json.loads((tmp_path / BALANCING_STATE_FILE).read_text(encoding="utf-8"))
    assert state["sampler"]["corpora"] == {"news": 6, "law": 4}
