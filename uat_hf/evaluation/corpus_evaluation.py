"""Per-corpus BLEU/chrF and their macro mean for a stock ``Seq2SeqTrainer``.

``UATTrainer.evaluate`` scores each named corpus and adds ``eval_mean_bleu`` / ``eval_mean_chrf``. A stock
``Seq2SeqTrainer`` balanced with :func:`~uat_hf.training.balancing.attach_balancing` has no such mean: given a dict
of eval datasets it evaluates them one by one, and each evaluation's metrics lack the others, so
``metric_for_best_model="mean_bleu"`` (``EarlyStoppingCallback``, ``load_best_model_at_end``) fails with a
``KeyError``. :class:`CorpusEvaluation` gives it the same numbers in one evaluation: one dataset, the
corpora concatenated, and a ``compute_metrics`` that splits the generated translations back by corpus::

    evaluation = CorpusEvaluation(dev_corpora, tokenizer)
    trainer = Seq2SeqTrainer(model, args, eval_dataset=evaluation.dataset, compute_metrics=evaluation, ...)

Scores are computed as :meth:`UATTrainer.translate <uat_hf.training.uat_trainer.UATTrainer.translate>` computes
them (:func:`~uat_hf.evaluation.metrics.translation_scores` on detokenized text, against the raw ``target_text``
when the corpus has it), so they mean the same on both trainers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from datasets import Dataset, concatenate_datasets
from transformers import EvalPrediction
from transformers.trainer_utils import PredictionOutput

from ..sampling.packing import example_lengths, longest_first
from ..utils.columns import MODEL_COLUMNS, REFERENCE_COLUMN
from .metrics import check_corpus_metrics, detokenize, macro_means, translation_scores
from .user_metrics import kept_apart

__all__ = ["CorpusEvaluation", "corpus_references", "in_original_order", "longest_source_first_order"]


def corpus_references(dataset: Dataset, tokenizer: Any, name: str | None = None) -> list[str]:
    """The reference translations of a tokenized corpus: its raw ``target_text``, else its decoded labels."""
    if REFERENCE_COLUMN in dataset.column_names:
        return list(dataset[REFERENCE_COLUMN])
    if "labels" not in dataset.column_names:
        which = f"Evaluation corpus {name!r}" if name is not None else "An evaluation corpus"
        raise ValueError(f"{which} needs a {REFERENCE_COLUMN!r} or 'labels' column (has {dataset.column_names}).")
    return detokenize(tokenizer, dataset["labels"])


class CorpusEvaluation:
    """An ``eval_dataset`` and a ``compute_metrics`` that give ``<corpus>_bleu``, ``<corpus>_chrf``, ``mean_bleu``
    and ``mean_chrf`` (the Trainer prefixes ``eval_``) in one evaluation.

    Args:
        corpora: name → tokenized dataset (:func:`corpus_references`: a ``target_text`` column, when present, gives
            the references; otherwise the labels are decoded).
        tokenizer: decodes the translations.
        bleu_tokenize: sacreBLEU's tokenizer (``UATConfig.bleu_tokenize``).
        metrics: the sacreBLEU metrics per corpus (``UATConfig.corpus_metrics``; BLEU and chrF always).
        compute_metrics: a ``compute_metrics`` of your own (run_translation's, ...), run on each corpus's rows beside
            these: its keys come out per corpus and as means, a key of the same name as one of these as ``user_<key>``
            (:mod:`~uat_hf.evaluation.user_metrics`).

    The trainer must generate (``predict_with_generate=True``, the ``UATConfig`` default) and keep the rows in
    order (the Trainer's evaluation does).

    Evaluated on one dataset of its own, as the Trainer evaluates each dataset of a dict
    (``trainer.evaluate({"news": ..., "law": ...})``) or ``trainer.predict(dataset)`` does, it gives that dataset's
    ``bleu`` and ``chrf`` (the Trainer prefixes ``eval_<key>_``): the corpus whose labels the rows carry is found
    and scored against its references; rows of none of the corpora are scored against their decoded labels.
    """

    def __init__(self, corpora: Mapping[str, Dataset], tokenizer: Any, *, bleu_tokenize: str = "13a",
                 metrics: Sequence[str] = ("bleu", "chrf"),
                 compute_metrics: Callable[[EvalPrediction], Mapping[str, Any]] | None = None) -> None:
        if not corpora:
            raise ValueError("CorpusEvaluation needs at least one named evaluation corpus.")
        for name, dataset in corpora.items():
            if "input_ids" not in dataset.column_names or len(dataset) == 0:
                raise ValueError(f"Evaluation corpus {name!r} " + ("is empty." if len(dataset) == 0 else "lacks the "
                                 "column 'input_ids'; tokenize it first (uat_hf.data.corpora.tokenize_corpus)."))
        self.tokenizer = tokenizer
        self.bleu_tokenize = bleu_tokenize
        self.metrics = check_corpus_metrics(metrics)
        self.compute_metrics = compute_metrics
        self.names = list(corpora)
        self.references = {name: corpus_references(dataset, tokenizer, name) for name, dataset in corpora.items()}
        self.bounds = np.cumsum([0] + [len(dataset) for dataset in corpora.values()])
        self._labels = {name: dataset["labels"] if "labels" in dataset.column_names else None
                        for name, dataset in corpora.items()}
        self._label_texts: dict[str, list[str]] = {}
        parts = [d.select_columns([c for c in MODEL_COLUMNS if c in d.column_names]) for d in corpora.values()]
        #: The corpora concatenated in order: the trainer's ``eval_dataset``.
        self.dataset = concatenate_datasets(parts) if len(parts) > 1 else parts[0]

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        generated = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        if len(generated) != self.bounds[-1]:
            return self._one_dataset(generated, prediction.label_ids)
        hypotheses = detokenize(self.tokenizer, generated)
        per_corpus = {}
        for i, name in enumerate(self.names):
            rows = slice(self.bounds[i], self.bounds[i + 1])
            scores, _ = translation_scores(hypotheses[rows], self.references[name], bleu_tokenize=self.bleu_tokenize,
                                           metrics=self.metrics)
            per_corpus[name] = {**scores, **self._user_metrics(generated[rows], prediction.label_ids, rows)}
        metrics = {f"{name}_{key}": value for name, scores in per_corpus.items() for key, value in scores.items()}
        keys = list(dict.fromkeys(key for scores in per_corpus.values() for key in scores))
        metrics.update(macro_means(metrics, self.names, prefix="", keys=keys))
        return metrics

    def _user_metrics(self, generated: np.ndarray, label_ids: np.ndarray | None, rows: slice) -> dict[str, Any]:
        """The user's ``compute_metrics`` on the rows of one corpus, its keys kept apart from the trainer's."""
        if self.compute_metrics is None:
            return {}
        labels = label_ids[rows] if label_ids is not None else None
        return kept_apart(self.compute_metrics(EvalPrediction(predictions=generated, label_ids=labels)), self.metrics)

    def _one_dataset(self, generated: np.ndarray, label_ids: np.ndarray | None) -> dict[str, float]:
        """``bleu`` and ``chrf`` of the translations of one dataset other than :attr:`dataset`: against the
        references of the corpus whose labels its rows carry, else against its decoded labels."""
        if generated.ndim != 2 or label_ids is None or len(label_ids) != len(generated):
            raise ValueError(
                f"Got {len(generated)} translations for the {self.bounds[-1]} rows of {self.names}, and no labels to "
                "tell their corpus by: evaluate on CorpusEvaluation.dataset, or on a dict of its tokenized corpora "
                "(with labels), with predict_with_generate=True."
            )
        labels = detokenize(self.tokenizer, label_ids)
        same = [name for name, rows in self._labels.items() if rows is not None and len(rows) == len(labels)]
        references = next((self.references[name] for name in same if self._label_text(name) == labels), labels)
        scores, _ = translation_scores(detokenize(self.tokenizer, generated), references,
                                       bleu_tokenize=self.bleu_tokenize, metrics=self.metrics)
        return {**scores, **self._user_metrics(generated, label_ids, slice(None))}

    def _label_text(self, name: str) -> list[str]:
        if name not in self._label_texts:
            self._label_texts[name] = detokenize(self.tokenizer, self._labels[name])
        return self._label_texts[name]


def longest_source_first_order(dataset: Dataset) -> list[int]:
    """:func:`~uat_hf.sampling.packing.longest_first` order of source length (a generation batch decodes until its
    longest sentence ends). Corpus-level BLEU and chrF do not depend on the order."""
    if "input_ids" not in dataset.column_names:
        return list(range(len(dataset)))
    return [int(i) for i in longest_first(example_lengths(dataset, columns=("input_ids",)))]


def in_original_order(output: PredictionOutput, order: list[int]) -> PredictionOutput:
    """``output`` of the rows ``order`` of a dataset, put back in the dataset's own row order."""
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[np.asarray(order, dtype=np.int64)] = np.arange(len(order))

    def restore(array: Any) -> Any:
        if isinstance(array, tuple):
            return tuple(restore(a) for a in array)
        # A gather over several processes pads the end with repeats: cut them before restoring the order.
        if isinstance(array, np.ndarray) and len(array) >= len(order):
            return array[: len(order)][inverse]
        return array

    return PredictionOutput(restore(output.predictions), restore(output.label_ids), output.metrics)
