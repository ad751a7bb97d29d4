"""Evaluate a saved translation model on named test sets, as the paper reports it.

MultiUAT's claims are per-corpus: BLEU on every language or domain, their unweighted mean, the same on
out-of-domain sets, and whether a difference to a baseline is significant. This module holds what that needs
around the translating itself, for any saved seq2seq model (a ``UATTrainer`` output dir, a
``Helsinki-NLP/opus-mt-*`` checkpoint): loading the model and tokenizer, finding test sets, hypothesis files,
and sacrebleu's own paired tests (bootstrap resampling or approximate randomization). Translating and scoring
is :meth:`uat_hf.training.uat_trainer.UATTrainer.translate`, the same path as evaluation during training.

Test sets are read from a directory in the bundled layout (``NAME.{train,dev,test}.jsonl.gz``); only the
evaluated split needs to exist, so out-of-domain sets without training data can sit beside the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel, PreTrainedTokenizerBase

from ..data.corpus_specs import SPLITS, CorpusSpec, corpus_specs_from_directory
from ..data.tokenization import load_tokenizer
from ..models.causal_presets import is_causal_checkpoint, load_causal_model
from ..utils.hub_errors import is_hub_id
from ..utils.names import check_corpus_name

__all__ = [
    "SIGNIFICANCE_TESTS",
    "eval_set_specs",
    "hypothesis_path",
    "load_translation_model",
    "paired_significance",
    "read_hypotheses",
    "source_length_limit",
    "write_hypotheses",
]

logger = logging.getLogger(__name__)

#: sacrebleu's paired tests: ``bs`` paired bootstrap resampling (1000 resamples by default, as Koehn
#: 2004), ``ar`` approximate randomization (10000 trials by default).
SIGNIFICANCE_TESTS = ("bs", "ar")
HYPOTHESIS_SUFFIX = ".txt"


def load_translation_model(
    model_name_or_path: str, tokenizer_name_or_path: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A seq2seq or decoder-only model (told apart by its config; a saved LoRA adapter is merged into its base
    model) and its tokenizer, from a local directory or a Hub id (remote code is never executed)."""
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
    if is_causal_checkpoint(model_name_or_path):
        model = load_causal_model(model_name_or_path)
    else:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, trust_remote_code=False)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        raise ValueError(
            f"The tokenizer of {tokenizer_source!r} has {len(tokenizer)} tokens but the model only "
            f"{model.get_input_embeddings().num_embeddings} embeddings: they do not belong together."
        )
    return model, tokenizer


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

    Language pairs follow ``direction`` as in :func:`uat_hf.data.corpus_specs.corpus_specs_from_directory`, but only
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
    return Path(directory) / f"{check_corpus_name(corpus, 'hypotheses')}{HYPOTHESIS_SUFFIX}"


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
            "outputs of the same test set (same eval_split and max_eval_examples)."
        )
    return lines


def source_length_limit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, requested: int | None) -> int:
    """How many source tokens to keep: ``requested``, never beyond the model's positions or the tokenizer's
    maximum (512 when neither says)."""
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
