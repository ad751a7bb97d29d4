"""A user's ``compute_metrics`` under a multi-corpus trainer: run per corpus beside the trainer's own scores.

``UATTrainer`` evaluates each named corpus with the Trainer's own loop, so a ``compute_metrics`` given to it
(for instance the one of Transformers' ``run_translation.py`` example) runs once per corpus and its keys come
out as ``eval_<corpus>_<key>``; :func:`user_metric_means` adds their unweighted means over corpora,
``eval_mean_<key>``, as the trainer does for its own. The trainer fills ``<corpus>_bleu``, ``<corpus>_chrf``
(and the other ``corpus_metrics``) itself, so a key of the user's that would overwrite one of them is kept
beside it under :data:`USER_PREFIX` (run_translation's ``bleu`` becomes ``eval_<corpus>_user_bleu``): both are
reported, neither is lost. :func:`probe_compute_metrics` calls it once on two rows of an evaluation corpus when
the trainer is built, so that an error in it shows then, not at the first evaluation hours into training.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from datasets import Dataset
from transformers import EvalPrediction

from ..utils.columns import IGNORE_INDEX
from .metrics import macro_means

__all__ = ["USER_PREFIX", "kept_apart", "probe_compute_metrics", "recorded_metric_keys", "user_metric_means"]

logger = logging.getLogger(__name__)

#: What a user's metric key gets in front when the trainer computes a metric of the same name.
USER_PREFIX = "user_"
PROBE_ROWS = 2


def kept_apart(metrics: Mapping[str, Any], taken: Collection[str]) -> dict[str, Any]:
    """``metrics`` (what a ``compute_metrics`` returned) with each key in ``taken`` (the trainer's own) prefixed
    with :data:`USER_PREFIX`, as often as it takes to be free."""
    kept: dict[str, Any] = {}
    for key, value in metrics.items():
        name = key
        while name in taken or (name != key and name in metrics):
            name = USER_PREFIX + name
        kept[name] = value
    return kept


def probe_compute_metrics(compute_metrics: Callable[..., Mapping[str, Any]], corpora: Mapping[str, Dataset],
                          pad_token_id: int, taken: Collection[str], *, include_inputs: bool = False
                          ) -> list[str] | None:
    """Call ``compute_metrics`` once, as an evaluation will, on :data:`PROBE_ROWS` rows of the first corpus with
    labels (their references standing in for the translations); returns the keys it will report under (``None``:
    no corpus to probe with), and says which are kept apart from the trainer's own ``taken`` ones. An error of
    ``compute_metrics`` on the probe is raised now, naming the probe, rather than at the first evaluation."""
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
    kept = kept_apart(metrics, taken)
    for key, kept_key in zip(metrics, kept):
        if key != kept_key:
            logger.info("compute_metrics returns %r, which UATTrainer scores itself per corpus (eval_%s_%s); yours is "
                        "reported beside it as eval_%s_%s.", key, name, key, name, kept_key)
    return list(kept)


@contextlib.contextmanager
def recorded_metric_keys(trainer: Any, taken: Collection[str]) -> Iterator[list[str]]:
    """Within the block, every call of ``trainer.compute_metrics`` returns its keys :func:`kept_apart` from the
    trainer's own ``taken`` ones, and the keys are appended to the list yielded (the Trainer prefixes them, so
    they cannot be told apart from its own keys afterwards)."""
    user = trainer.compute_metrics
    keys: list[str] = []
    if user is None:
        yield keys
        return

    def recording(*args: Any, **kwargs: Any) -> Mapping[str, Any]:
        metrics = kept_apart(user(*args, **kwargs), taken)
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
