"""The named corpora a :class:`~uat_hf.training.uat_trainer.UATTrainer` is given, in either spelling, checked once.

A Transformers user passes data as ``train_dataset=`` / ``eval_dataset=``, and the Trainer itself already takes a
dict for ``eval_dataset`` (one evaluation per name). So ``UATTrainer`` takes dicts of named corpora under those
keywords too; ``train_corpora`` / ``eval_corpora`` are the same slots under the names this library used first.

The dev sets are the one input without a stock keyword: balancing measures the model on a trusted dev set per
training corpus (``dev_corpora``). When none is given, each training corpus's dev set is the evaluation set of the
same name. That is the setting of a run that has one held-out set per corpus, and its trade-off: the sets that
steer the mix also choose the best checkpoint and give the reported scores, so those scores are slightly
optimistic for the learned strategies; keep a separate test set (``predict``) for numbers you publish.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datasets import Dataset

from ..data.streams import is_stream
from ..utils.names import check_corpus_name

__all__ = ["named_corpora"]


def named_corpora(
    train_corpora: Mapping[str, Dataset] | None,
    dev_corpora: Mapping[str, Dataset] | None,
    eval_corpora: Mapping[str, Dataset] | None,
    stock: dict[str, Any],
) -> tuple[dict[str, Dataset] | None, dict[str, Dataset], dict[str, Dataset]]:
    """(train, dev, eval) corpora from the trainer's keywords; ``stock`` (the keyword arguments meant for the
    Trainer) loses ``train_dataset`` and ``eval_dataset``. ``train`` is ``None`` for an evaluation-only trainer.
    Each name and corpus is checked here, before anything is built."""
    train = _one_of("train_dataset", stock.pop("train_dataset", None), "train_corpora", train_corpora)
    evaluation = _one_of("eval_dataset", stock.pop("eval_dataset", None), "eval_corpora", eval_corpora)
    dev = dict(dev_corpora) if dev_corpora is not None else None
    if dev is None:
        dev = {name: dataset for name, dataset in (evaluation or {}).items() if train is None or name in train}
    evaluation = dict(evaluation) if evaluation is not None else dict(dev)
    train = dict(train) if train is not None else None
    for kind, corpora in (("training", train or {}), ("dev", dev), ("evaluation", evaluation)):
        for name, dataset in corpora.items():
            check_corpus_name(name, f"UATTrainer {kind} corpora")
            if not is_stream(dataset) and len(dataset) == 0:  # a stream's emptiness shows when read
                raise ValueError(f"The {kind} corpus {name!r} is empty; check its data files and filters.")
    return train, dev, evaluation


def _one_of(stock_name: str, stock_value: Any, own_name: str, own_value: Any) -> Mapping[str, Dataset] | None:
    if stock_value is not None and own_value is not None:
        raise TypeError(f"UATTrainer got both {stock_name} and {own_name}, which are the same slot: pass one.")
    value = own_value if own_value is not None else stock_value
    if value is not None and not isinstance(value, Mapping):
        given = stock_name if stock_value is not None else own_name
        raise TypeError(
            f"UATTrainer's {given} must be a dict of named corpora, {{name: tokenized Dataset, ...}}, got "
            f"{type(value).__name__}: it balances and scores corpora by name. With a single dataset, pass "
            f"{{'all': dataset}} or use Seq2SeqTrainer.")
    return value
