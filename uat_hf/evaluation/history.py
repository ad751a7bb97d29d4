"""Reading a run's balancing history (``balancing_history.jsonl``): the one reader every tool goes through.

The callback writes one record per balancing update (a static strategy: one, at the start), built in one
place (:meth:`~uat_hf.sampling.distribution.CorpusDistribution.measured`): the same top-level fields for every
strategy (:data:`COMMON_FIELDS`: the step, the strategy, the prior in the first record, p as
``probabilities``, why an update was skipped, its seconds) and the strategy's own fields under its name
(MultiUAT's ``rewards`` and ``measure``, MultiDDS-S's ``cosine``, mixing-law's ``law``, ...). Histories written
before that layout (the study's archives) kept every field at the top level; :func:`strategy_fields` reads
both, so the plots and the benchmarks need not know which they hold.

NumPy and the standard library only: a history can be read without torch or matplotlib.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..utils.checkpoints import HISTORY_FILE, read_history

logger = logging.getLogger(__name__)

__all__ = ["COMMON_FIELDS", "HistorySource", "load_history", "strategy_fields", "update_records"]

#: The top-level fields of every record, whatever the strategy.
COMMON_FIELDS = ("step", "strategy", "prior", "probabilities", "skipped", "seconds")

HistorySource = str | Path | Iterable[Mapping[str, Any]]


def strategy_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """The strategy's own fields of a history record: those under its name, or, in a record written before they
    were (its fields at the top level), every field but :data:`COMMON_FIELDS`."""
    own = record.get(str(record.get("strategy")))
    if isinstance(own, Mapping):
        return dict(own)
    return {key: value for key, value in record.items() if key not in COMMON_FIELDS}


def update_records(history: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The records of balancing updates: all but a static strategy's record of its p at step 0 (updates come
    after an optimizer step)."""
    return [dict(record) for record in history if int(record["step"]) > 0]


def load_history(history_or_output_dir: HistorySource) -> list[dict[str, Any]]:
    """The update records of a run, in file order.

    Accepts a run's output dir (holding ``balancing_history.jsonl``), the path of a history file, or the
    records themselves (a list of dicts, returned as a list). Raises ``FileNotFoundError`` when there is
    no history and ``ValueError`` when it holds no record or a malformed line.
    """
    if not isinstance(history_or_output_dir, (str, Path)):
        records = [dict(record) for record in history_or_output_dir]
        if not records:
            raise ValueError("The balancing history is empty: there is nothing to plot.")
        return records
    path = Path(history_or_output_dir)
    if path.is_dir():
        path = path / HISTORY_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"No balancing history at {str(path)!r}. {HISTORY_FILE} is written into the training output_dir when "
            "training starts (a static strategy records its p once) and at each balancing update of a dynamic "
            "strategy (multiuat or multidds-s), of mixing-law or of one of your own. Point at the output_dir of a run "
            "that started training with this version of uat-hf."
        )
    records, torn = read_history(str(path))
    if torn:
        logger.warning("The last line of %s is torn (a run killed while writing it): it is left out.", path)
    if not records:
        raise ValueError(
            f"{str(path)!r} holds no update record yet: the run has not reached its first balancing update."
        )
    for number, record in enumerate(records, start=1):
        if "step" not in record or "probabilities" not in record:
            raise ValueError(f"Record {number} of {str(path)!r} lacks 'step' or 'probabilities'; is this a balancing "
                             "history?")
    return records
