"""Evaluate a saved translation model on named test sets, as the paper reports it.

MultiUAT's claims are per-corpus: BLEU on every language or domain, their unweighted mean, the same on
out-of-domain sets, and whether a difference to a baseline is significant. This module does that outside
training, for any saved seq2seq model (a ``UATTrainer`` output dir, a ``Helsinki-NLP/opus-mt-*``
checkpoint): load the model and tokenizer, translate each test set in length-sorted batches, score with
sacreBLEU/chrF on detokenized text (:mod:`uat_hf.metrics`), and test a system against a baseline's
hypotheses with sacrebleu's own paired tests (bootstrap resampling or approximate randomization).

Test sets are read from a directory in the bundled layout (``NAME.{train,dev,test}.jsonl.gz``); only the
evaluated split needs to exist, so out-of-domain sets without training data can sit beside the others.
Sources get the same target-language tags as in training (:func:`uat_hf.preprocessing.corpus_tags`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel, PreTrainedTokenizerBase

from .corpora import load_corpus_split
from .corpus_specs import SPLITS, CorpusSpec, corpus_specs_from_directory
from .hub_errors import is_hub_id
from .metrics import translation_scores
from .names import check_unique_names
from .packing import longest_first
from .preprocessing import PreprocessingConfig, add_language_tags, corpus_tags, preprocess
from .tokenization import load_tokenizer

__all__ = [
    "SIGNIFICANCE_TESTS",
    "EvalSet",
    "eval_set_specs",
    "hypothesis_path",
    "load_eval_sets",
    "load_translation_model",
    "paired_significance",
    "read_hypotheses",
    "score_eval_sets",
    "translate",
    "write_hypotheses",
]

logger = logging.getLogger(__name__)

#: sacrebleu's paired tests: ``bs`` paired bootstrap resampling (1000 resamples by default, as Koehn
#: 2004), ``ar`` approximate randomization (10000 trials by default).
SIGNIFICANCE_TESTS = ("bs", "ar")
HYPOTHESIS_SUFFIX = ".txt"


@dataclass
class EvalSet:
    """One named evaluation set: sources as the model reads them (tags included) and raw references."""

    name: str
    sources: list[str]
    references: list[str]


def load_translation_model(
    model_name_or_path: str, tokenizer_name_or_path: str | None = None, *, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A seq2seq model and its tokenizer from a local directory or a Hub id, in eval mode on ``device``.

    ``device`` defaults to CUDA when available. Remote code is never executed.
    """
    if not Path(model_name_or_path).is_dir() and not is_hub_id(model_name_or_path):
        raise FileNotFoundError(
            f"Model {model_name_or_path!r} is neither a model directory (save_pretrained / trainer.save_model "
            "output) nor a Hub model id (e.g. 'Helsinki-NLP/opus-mt-en-de')."
        )
    tokenizer_source = tokenizer_name_or_path or model_name_or_path
    try:
        tokenizer = load_tokenizer(tokenizer_source)
    except (OSError, ValueError) as error:
        raise FileNotFoundError(
            f"Could not load a tokenizer from {tokenizer_source!r} ({error}). Save the tokenizer beside the model "
            "(trainer.save_model does so when the trainer has processing_class) or pass its location separately."
        ) from error
    model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, trust_remote_code=False)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        raise ValueError(
            f"The tokenizer of {tokenizer_source!r} has {len(tokenizer)} tokens but the model only "
            f"{model.get_input_embeddings().num_embeddings} embeddings: they do not belong together."
        )
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    return model.to(device).eval(), tokenizer


def eval_set_specs(
    directory: str | Path,
    split: str = "test",
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    corpora: Sequence[str] | None = None,
    direction: str = "multi-domain",
) -> list[CorpusSpec]:
    """Specs for the ``split`` files of a directory in the bundled layout (``NAME.<split>.jsonl.gz``).

    Language pairs follow ``direction`` as in :func:`uat_hf.corpus_specs.corpus_specs_from_directory`, but only
    the evaluated split must exist, so a test-only (out-of-domain) corpus needs no training file.
    ``corpora`` picks and orders NAMEs (default: every NAME with a ``split`` file, sorted).
    """
    specs = corpus_specs_from_directory(
        directory, source_lang, target_lang, corpora=corpora, direction=direction, required_split=split
    )
    for spec in specs:  # only the evaluated split is read
        for other in SPLITS:
            if other != split:
                setattr(spec, other, None)
    return specs


def load_eval_sets(
    specs: Sequence[CorpusSpec],
    split: str = "test",
    *,
    tags: str | Mapping[str, str | None] | None = "auto",
    max_sentences: int | None = None,
) -> dict[str, EvalSet]:
    """Read, clean (empty pairs only, as for every dev/test set) and tag the ``split`` of each spec.

    ``tags`` is decided over all ``specs`` together (see :func:`uat_hf.preprocessing.corpus_tags`): pass the
    in-domain and out-of-domain specs in one call so they are tagged as the model was trained.
    ``max_sentences`` keeps the first N pairs of each set (quick checks; report full sets).
    """
    check_unique_names((spec.name for spec in specs), "Test set names must be unique; repeated: {repeated}.")
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1 (or None for whole sets), got {max_sentences}.")
    tag_of = corpus_tags(specs, tags)
    sets = {}
    for spec in specs:
        pairs = preprocess(load_corpus_split(spec, split), PreprocessingConfig(), corpus=spec.name, split=split)
        pairs = add_language_tags(pairs, target_tag=tag_of[spec.name])
        if max_sentences is not None:
            pairs = pairs.select(range(min(max_sentences, len(pairs))))
        sets[spec.name] = EvalSet(spec.name, list(pairs["source"]), list(pairs["target"]))
    return sets


def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    *,
    batch_size: int = 32,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    max_source_length: int | None = None,
) -> list[str]:
    """Detokenized translations of ``sources``, in their order.

    Batches are formed from length-sorted sources (less padding, same outputs) and generated on the
    model's device. ``num_beams`` / ``max_new_tokens`` default to the model's generation config. Sources
    are truncated to ``max_source_length`` tokens, never beyond the model's position embeddings.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    max_source_length = _source_limit(model, tokenizer, max_source_length)
    generate_kwargs: dict = {} if num_beams is None else {"num_beams": num_beams}
    if max_new_tokens is not None:
        # max_length=None: the model's stored max_length no longer competes with max_new_tokens.
        generate_kwargs.update(max_new_tokens=max_new_tokens, max_length=None)
    encoded = tokenizer(list(sources), truncation=True, max_length=max_source_length)["input_ids"]
    lengths = [len(ids) for ids in encoded]
    order = longest_first(lengths).tolist()
    device = next(model.parameters()).device
    hypotheses: list[str] = [""] * len(sources)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                inputs = tokenizer([sources[i] for i in chunk], truncation=True, max_length=max_source_length,
                                   padding=True, return_tensors="pt").to(device)
                output = model.generate(**inputs, **generate_kwargs)
                for i, text in zip(chunk, tokenizer.batch_decode(output, skip_special_tokens=True)):
                    hypotheses[i] = text.strip()
    finally:
        model.train(was_training)
    return hypotheses


def score_eval_sets(
    hypotheses: Mapping[str, Sequence[str]], eval_sets: Mapping[str, EvalSet], *, bleu_tokenize: str = "13a"
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """BLEU and chrF per test set (``{name: {"bleu", "chrf"}}``) and the sacreBLEU signatures."""
    per_corpus: dict[str, dict[str, float]] = {}
    signatures: dict[str, str] = {}
    for name, eval_set in eval_sets.items():
        per_corpus[name], signatures = translation_scores(hypotheses[name], eval_set.references,
                                                          bleu_tokenize=bleu_tokenize)
    return per_corpus, signatures


def paired_significance(
    hypotheses: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str],
    *,
    test: str = "bs",
    n_samples: int = 0,
    seed: int = 12345,
    bleu_tokenize: str = "13a",
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Is ``hypotheses`` significantly different from ``baseline`` on BLEU and chrF? (sacrebleu PairedTest)

    ``test``: ``"bs"`` (paired bootstrap resampling) or ``"ar"`` (approximate randomization);
    ``n_samples`` 0 means sacrebleu's default (1000 / 10000). The resampling is seeded with ``seed``
    (recorded in the signature), so a run is reproducible.

    Returns ``({"bleu": {"system", "baseline", "p_value"}, "chrf": {...}}, signatures)``. Two-sided
    p-values. Identical outputs get ``p_value`` 1.0: sacrebleu counts only resamples whose difference
    strictly exceeds the observed one, which for identical systems yields 1/(n+1) and would call a
    system significantly different from itself.
    """
    if test not in SIGNIFICANCE_TESTS:
        raise ValueError(f"Unknown significance test {test!r}; use 'bs' (paired bootstrap) or 'ar' (approximate "
                         "randomization).")
    if seed < 1:
        raise ValueError(f"seed must be a positive integer (sacrebleu treats 0 as 'do not seed'), got {seed}.")
    if not len(hypotheses) == len(baseline) == len(references):
        raise ValueError(
            f"Paired test needs one hypothesis per reference from both systems; got {len(hypotheses)} system, "
            f"{len(baseline)} baseline and {len(references)} references."
        )
    metrics = {"bleu": BLEU(tokenize=bleu_tokenize), "chrf": CHRF()}
    with _sacrebleu_seed(seed):
        paired = PairedTest([("baseline", list(baseline)), ("system", list(hypotheses))], metrics,
                            [list(references)], test_type=test, n_samples=n_samples)
    signatures, scores = paired()
    # scores: {"System": [...], <metric name>: [baseline Result, system Result]} in the order of `metrics`.
    metric_names = [key for key in scores if key != "System"]
    identical = list(hypotheses) == list(baseline)
    results = {}
    for key, metric_name in zip(metrics, metric_names):
        base, system = scores[metric_name]
        results[key] = {
            "system": float(system.score),
            "baseline": float(base.score),
            "p_value": 1.0 if identical else float(system.p_value),
        }
    return results, {key: str(signatures[name]) for key, name in zip(metrics, metric_names)}


def hypothesis_path(directory: str | Path, corpus: str) -> Path:
    """Where the hypotheses of ``corpus`` live in a hypotheses folder: ``<directory>/<corpus>.txt``."""
    return Path(directory) / f"{corpus}{HYPOTHESIS_SUFFIX}"


def write_hypotheses(directory: str | Path, corpus: str, hypotheses: Sequence[str]) -> Path:
    """One hypothesis per line (newlines inside a hypothesis become spaces, so lines stay aligned)."""
    path = hypothesis_path(directory, corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(" ".join(h.splitlines()) + "\n" for h in hypotheses), encoding="utf-8")
    return path


def read_hypotheses(directory: str | Path, corpus: str, expected: int | None = None) -> list[str]:
    """The hypotheses of ``corpus`` from a folder written by :func:`write_hypotheses` (or by hand)."""
    path = hypothesis_path(directory, corpus)
    if not path.is_file():
        present = (sorted(p.name for p in Path(directory).glob(f"*{HYPOTHESIS_SUFFIX}"))
                   if Path(directory).is_dir() else [])
        raise FileNotFoundError(
            f"No hypotheses for corpus {corpus!r}: expected {str(path)!r} with one translation per line "
            f"(files present: {present})."
        )
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if expected is not None and len(lines) != expected:
        raise ValueError(
            f"{str(path)!r} has {len(lines)} lines but the {corpus!r} test set has {expected} sentences; compare "
            "outputs of the same test set (same split and --max-sentences)."
        )
    return lines


def _source_limit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, requested: int | None) -> int:
    limits = [requested, getattr(model.config, "max_position_embeddings", None)]
    if tokenizer.model_max_length < 1_000_000:  # transformers' "no limit" is a huge sentinel
        limits.append(tokenizer.model_max_length)
    return min((limit for limit in limits if limit), default=512)


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacrebleu's PairedTest reads its seed from ``SACREBLEU_SEED`` when constructed."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = previous
