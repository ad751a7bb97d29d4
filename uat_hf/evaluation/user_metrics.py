"""A user's ``compute_metrics`` under a multi-corpus trainer: run per corpus, averaged over corpora, checked early.

``UATTrainer`` evaluates each named corpus with the Trainer's own loop, so a ``compute_metrics`` given to it
(for instance the one of Transformers' ``run_translation.py`` example) runs once per corpus and its keys come
out as ``eval_<corpus>_<key>``; :func:`user_metric_means` adds their unweighted means over corpora,
``eval_mean_<key>``, as the trainer does for BLEU and chrF. The trainer fills ``<corpus>_bleu`` /
``<corpus>_chrf`` itself (:data:`TRANSLATION_METRICS`), so a ``compute_metrics`` returning one of those keys
would overwrite, or be overwritten by, the trainer's score. :func:`probe_compute_metrics` calls it once on
two rows of an evaluation corpus when the trainer is built, so that such a key is refused then, not at the
first evaluation hours into training.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from datasets import Dataset
from transformers import EvalPrediction

from ..utils.columns import IGNORE_INDEX
from .metrics import macro_means

__all__ = ["TRANSLATION_METRICS", "probe_compute_metrics", "recorded_metric_keys", "refuse_clashing_keys",
           "user_metric_means"]

#: The per-corpus scores UATTrainer computes itself (:func:`~uat_hf.evaluation.metrics.translation_scores`).
TRANSLATION_METRICS = ("bleu", "chrf")
PROBE_ROWS = 2


def refuse_clashing_keys(keys: Sequence[str], example: str) -> None:
    """Raise if ``keys`` (what a ``compute_metrics`` returned) hold a key the trainer fills itself."""
    clash = [key for key in keys if key in TRANSLATION_METRICS]
    if clash:
        raise ValueError(
            f"compute_metrics returned {clash}, which UATTrainer fills itself with the sacreBLEU scores of each "
            f"corpus ({example}_{clash[0]}) and their mean (eval_mean_{clash[0]}). Remove that key from your "
            "compute_metrics (the BLEU of Transformers' run_translation.py is the same corpus BLEU), or rename it "
            f"(e.g. 'my_{clash[0]}') so that both are reported; its other keys are reported per corpus and as means."
        )


def probe_compute_metrics(compute_metrics: Callable[..., Mapping[str, Any]], corpora: Mapping[str, Dataset],
                          pad_token_id: int, *, include_inputs: bool = False) -> list[str] | None:
    """Call ``compute_metrics`` once, as an evaluation will, on :data:`PROBE_ROWS` rows of the first corpus with
    labels (their references standing in for the translations), and refuse a key the trainer fills itself;
    returns the keys (``None``: no corpus to probe with). An error of ``compute_metrics`` on the probe is
    raised now, naming the probe, rather than at the first evaluation."""
    name, dataset = next(((n, d) for n, d in corpora.items() if "labels" in d.column_names and len(d)), (None, None))
    if dataset is None:
        return None
    rows = dataset.select(range(min(PROBE_ROWS, len(dataset))))
    labels = _padded(rows["labels"], IGNORE_INDEX)
    predictions = np.where(labels == IGNORE_INDEX, pad_token_id, labels)
    inputs = _padded(rows["input_ids"], pad_token_id) if include_inputs else None
    try:
        metrics = compute_metrics(EvalPrediction(predictions=predictions, label_ids=labels, inputs=inputs))
    except Exception as error:
        raise ValueError(
            f"compute_metrics failed when UATTrainer tried it, before training, on {len(rows)} rows of evaluation "
            f"corpus {name!r} (generated ids as an evaluation passes them: their labels, -100 replaced by the pad "
            f"id): {error}"
        ) from error
    if not isinstance(metrics, Mapping):
        raise TypeError(f"compute_metrics must return a dict of metric name → value, got {type(metrics).__name__}.")
    refuse_clashing_keys(list(metrics), f"eval_{name}")
    return list(metrics)


@contextlib.contextmanager
def recorded_metric_keys(trainer: Any) -> Iterator[list[str]]:
    """Within the block, the keys every call of ``trainer.compute_metrics`` returns are appended to the list
    yielded (the Trainer prefixes them, so they cannot be told apart from its own keys afterwards)."""
    user = trainer.compute_metrics
    keys: list[str] = []
    if user is None:
        yield keys
        return

    def recording(*args: Any, **kwargs: Any) -> Mapping[str, Any]:
        metrics = user(*args, **kwargs)
        keys.extend(key for key in metrics if key not in keys)
        return metrics

    trainer.compute_metrics = recording
    try:
        yield keys
    finally:
        trainer.compute_metrics = user


def user_metric_means(metrics: Mapping[str, Any], keys_by_corpus: Mapping[str, Sequence[str]],
                      prefix: str) -> dict[str, float]:
    """``<prefix>_mean_<key>`` of each key a ``compute_metrics`` returned for every corpus (``<prefix>_<corpus>_
    <key>``): :func:`~uat_hf.evaluation.metrics.macro_means` of those keys."""
    names = list(keys_by_corpus)
    first = keys_by_corpus[names[0]] if names else ()
    common = [key for key in first if all(key in keys_by_corpus[n] for n in names)]
    return macro_means(metrics, names, prefix, common)





def _padded(rows: Sequence[Sequence[int]], value: int) -> np.ndarray:
    width = max(len(row) for row in rows)
    return np.array([list(row) + [value] * (width - len(row)) for row in rows], dtype=np.int64)
