"""An audit report kept beside the prepared data it describes, so that a run that reads its preparation cache
reads its audit too instead of measuring the corpora again.

One report per key (the audit's version, the sample's seed and size, whether the failing pairs were marked): a JSON
file of :meth:`~.corpus_audit.AuditReport.to_dict` and, for the marks, an ``.npz`` of packed bits. Each file is
written under a temporary name and renamed, so that a reader sees a complete file or none.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

import numpy as np

from .corpus_audit import AuditReport

logger = logging.getLogger(__name__)

__all__ = ["load_report", "report_name", "save_report"]


#: Raised whenever a signal, threshold or estimate of the audit changes, so that a cached report of an older audit
#: is never read (2: the order signal; 3: the marks of the pairs the models were fitted on, cross-fitted; 4: the
#: short signal; 5: the script signal; 6: the swap signal; 7: the case signal).
AUDIT_VERSION = 8


def report_name(seed: int, sample: int, failing: bool) -> str:
    return f"audit-v{AUDIT_VERSION}-seed{seed}-sample{sample}" + ("-failing" if failing else "")


def save_report(folder: Path, name: str, report: AuditReport) -> None:
    """Write ``report`` as ``folder/<name>.json`` (and ``<name>.npz`` when it marks failing pairs). A folder that
    cannot be written is reported and skipped: the next run audits again."""
    marks = {corpus: audit.failing for corpus, audit in report.corpora.items() if audit.failing is not None}
    try:
        if marks:
            packed = {corpus: np.packbits(failing) for corpus, failing in marks.items()}
            sizes = {f"{corpus}.size": np.array(len(failing)) for corpus, failing in marks.items()}
            _atomic(folder / f"{name}.npz", lambda path: np.savez(path, **packed, **sizes))
        text = json.dumps(report.to_dict(), indent=1)
        _atomic(folder / f"{name}.json", lambda path: Path(path).write_text(text, encoding="utf-8"))
    except OSError as error:
        logger.warning("Could not keep the corpus audit in %s (%s); the next run audits again.", folder, error)


def load_report(folder: Path, name: str) -> AuditReport | None:
    """The report :func:`save_report` wrote as ``name``, with its failing marks; ``None`` when there is none or it
    cannot be read."""
    path = folder / f"{name}.json"
    if not path.is_file():
        return None
    try:
        report = AuditReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if (folder / f"{name}.npz").is_file():
            with np.load(folder / f"{name}.npz") as marks:
                for corpus, audit in report.corpora.items():
                    if corpus in marks:
                        size = int(marks[f"{corpus}.size"])
                        audit.failing = np.unpackbits(marks[corpus], count=size).astype(bool)
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("The corpus audit kept in %s cannot be read (%s); auditing again.", path, error)
        return None
    return report


def _atomic(path: Path, write) -> None:
    temporary = path.parent / f".{uuid.uuid4().hex}.{path.name}"  # the same suffix: np.savez adds none
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
