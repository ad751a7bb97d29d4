"""Checkpoint folders that a resumed run can trust.

A run killed while saving (out of disk, pre-empted, Ctrl-C) leaves a ``checkpoint-N`` folder that is empty
or torn. The stock ``get_last_checkpoint`` picks the highest N whatever it holds, so resume then fails, or
worse, continues from half a state. Here a checkpoint counts as complete only when the files written last
are there and parse: the Trainer's ``trainer_state.json`` (written after the weights, optimizer and RNG
states) and the balancing state (written after it by the balancing callback's ``on_save``, under
``UATTrainer`` and a stock trainer alike). Our own files are written atomically (a temporary file renamed
over the target), so they are either whole or absent; a kill mid-write leaves a ``.tmp-*.json`` that a resume
removes. What a checkpoint will take on disk is estimated here too, so that a disk too small for it is refused
before training and a save that a full disk cut short is removed rather than left torn.

Which checkpoint a run resumes from is decided in one place, :func:`resolve_resume_checkpoint`, for
``UATTrainer.train`` and ``uat-train`` alike.

The balancing history lives in one file, ``output_dir/balancing_history.jsonl``, written only through
:class:`HistoryFile`. A checkpoint does not copy it (it would grow with every update, by N² numbers per
update for MultiDDS-S): the balancing state records how many updates it has seen, and a resume keeps exactly
that many records of the file, however many a later checkpoint or a kill left behind.

The names of the files a balancing run writes are defined here, in a module that imports neither torch nor
the Trainer, so that readers of a run's output (:mod:`uat_hf.evaluation.plotting`) stay light.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from typing import Any

logger = logging.getLogger(__name__)

#: The sampler and scorer state, one JSON file per checkpoint folder.
BALANCING_STATE_FILE = "uat_balancing_state.json"
#: A streamed run's sampler state of one rank (``{rank}``: its process index): each rank reads its own shard.
STREAM_STATE_FILE = "uat_stream_state-{rank}.json"
#: One JSON record per balancing update (step, rewards, p, ...), appended in the training ``output_dir``.
HISTORY_FILE = "balancing_history.jsonl"
#: The mix a run ended with, in its output_dir: {"corpora": [...], "probabilities": [...]} in one order, so that
#: ``interleave_datasets([datasets[c] for c in mix["corpora"]], probabilities=mix["probabilities"])`` takes it.
FINAL_MIX_FILE = "final_mix.json"
#: The name of the Trainer's own state file, the last one it writes into a checkpoint folder.
TRAINER_STATE_FILE = "trainer_state.json"
#: Words that ask ``train(resume_from_checkpoint=...)`` for the last complete checkpoint of ``output_dir``.
LATEST = ("true", "latest")

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TEMPORARY_PREFIX, _TEMPORARY_SUFFIX = ".tmp-", ".json"
#: What a checkpoint holds besides weights and optimizer state (RNG, scheduler, arguments, tokenizer, JSON).
_CHECKPOINT_EXTRA_BYTES = 64 * 1024


def write_json_atomically(path: str, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` so that a reader sees the old file, the new one, or none: never a
    torn one (the text goes to a temporary file in the same folder, which then replaces ``path``)."""
    _write_text_atomically(path, json.dumps(value))


def checkpoint_problem(folder: str, *, needs_balancing_state: bool = True) -> str | None:
    """Why ``folder`` cannot be resumed from exactly (a sentence naming the file), or ``None`` if it can."""
    if not os.path.isdir(folder):
        return f"{folder!r} is not a directory"
    required = [TRAINER_STATE_FILE] + ([BALANCING_STATE_FILE] if needs_balancing_state else [])
    for name in required:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return f"{path!r} is missing (the save was interrupted, or the run did not use uat-hf's balancing)"
        try:
            with open(path, encoding="utf-8") as f:
                json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"{path!r} is torn or unreadable ({error})"
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            problem = _safetensors_problem(os.path.join(folder, name))
            if problem is not None:
                return problem
    return None


def _safetensors_problem(path: str) -> str | None:
    """Why the weights file ``path`` is torn (a kill or a full disk while saving), from its header alone: a
    safetensors file is an 8-byte header length, the JSON header, then the tensors up to the last end offset."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or not 0 < length <= size - 8:
                return f"{path!r} is torn (its header does not fit in its {size} bytes)"
            header = json.loads(f.read(length))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        return f"{path!r} is torn or unreadable ({error})"
    if 8 + length + end > size:
        return f"{path!r} is truncated ({size} of its {8 + length + end} bytes)"
    return None


def checkpoint_folders(output_dir: str) -> list[str]:
    """The ``checkpoint-N`` folders of ``output_dir``, highest N first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := _CHECKPOINT.match(name))]
    return [os.path.join(output_dir, name) for _, name in sorted(found, reverse=True)
            if os.path.isdir(os.path.join(output_dir, name))]


def last_complete_checkpoint(output_dir: str, *, needs_balancing_state: bool = True) -> str | None:
    """The highest-step checkpoint of ``output_dir`` that :func:`checkpoint_problem` accepts; incomplete ones
    above it are skipped with a warning that says why."""
    for folder in checkpoint_folders(output_dir):
        problem = checkpoint_problem(folder, needs_balancing_state=needs_balancing_state)
        if problem is None:
            return folder
        logger.warning("Skipping checkpoint %s: %s.", folder, problem)
    return None


def resolve_resume_checkpoint(output_dir: str, resume: str | bool | None, *, exact: bool = True) -> str | None:
    """The checkpoint folder that ``resume_from_checkpoint`` asks for, or ``None`` when it asks for none.

    ``True`` and the words of :data:`LATEST` mean the last complete checkpoint of ``output_dir``. A request that
    cannot be met exactly raises ``ValueError`` with one line that names the folder, says what is wrong with it
    and what to do (``allow_inexact_resume`` where only the balancing state is missing), so that callers can
    refuse it before any data is read rather than inside ``train()``."""
    if resume is None or resume is False or resume == "":
        return None
    inexact = " (allow_inexact_resume=True, uat-train --allow_inexact_resume, accepts one without {})"
    inexact = inexact.format(BALANCING_STATE_FILE)
    if resume is True or str(resume).strip().lower() in LATEST:
        folder = last_complete_checkpoint(output_dir, needs_balancing_state=exact)
        if folder is not None:
            return folder
        folders = checkpoint_folders(output_dir)
        if not folders:
            raise ValueError(f"No checkpoint-N folder in output_dir {output_dir!r} to resume from; train without "
                             "resume_from_checkpoint to start afresh, or give the output_dir of the run to resume.")
        problems = "; ".join(f"{f!r}: {checkpoint_problem(f, needs_balancing_state=exact)}" for f in folders)
        usable = exact and last_complete_checkpoint(output_dir, needs_balancing_state=False) is not None
        raise ValueError(
            f"No complete checkpoint found in output_dir {output_dir!r} to resume from ({problems}). "
            + (f"Resume inexactly{inexact}, or train afresh." if usable
               else "Remove the torn checkpoint folders and train afresh (without resume_from_checkpoint).")
        )
    problem = checkpoint_problem(str(resume), needs_balancing_state=exact)
    if problem is not None:
        usable = exact and checkpoint_problem(str(resume), needs_balancing_state=False) is None
        raise ValueError(
            f"Cannot resume from checkpoint {resume!r}: {problem}. Give a complete checkpoint folder, or "
            f"resume_from_checkpoint=latest for the last complete one in output_dir{inexact if usable else ''}."
        )
    return str(resume)


def remove_stray_temporaries(output_dir: str) -> list[str]:
    """Delete the temporary files that :func:`write_json_atomically` leaves when the process is killed
    mid-write (``.tmp-*.json`` in ``output_dir`` and its checkpoint folders); returns their paths. Only the
    process that saves may call it, before training starts, when nothing is being written."""
    removed = []
    for folder in [output_dir, *checkpoint_folders(output_dir)]:
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name.startswith(_TEMPORARY_PREFIX) and name.endswith(_TEMPORARY_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(folder, name))
                    removed.append(os.path.join(folder, name))
    if removed:
        logger.warning("Removed %d temporary file(s) that an interrupted save left behind: %s.", len(removed),
                       ", ".join(removed))
    return removed


def remove_torn_checkpoint(folder: str) -> bool:
    """Delete ``folder`` if a save into it was cut short (the Trainer's state, written last, is missing or torn);
    a torn checkpoint is never resumed from, and it holds the space a next run needs. Returns whether it did."""
    if not os.path.isdir(folder) or checkpoint_problem(folder, needs_balancing_state=False) is None:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    logger.warning("Removed the torn checkpoint %s (its save was cut short).", folder)
    return True


def read_history(path: str) -> tuple[list[dict[str, Any]], bool]:
    """The records of the balancing history at ``path`` (none when it does not exist), and whether its last line
    was torn (a run killed while appending it: left out). A malformed line before the last is no kill's doing:
    ``ValueError`` naming it. The one reader of a history file, for resuming and for every tool."""
    if not os.path.isfile(path):
        return [], False
    with open(path, "rb") as f:
        lines = [(number, line) for number, line in enumerate(f.read().splitlines(), start=1) if line.strip()]
    records = []
    for index, (number, line) in enumerate(lines):
        try:
            records.append(json.loads(line))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            if index == len(lines) - 1:
                return records, True
            raise ValueError(f"{path}:{number} is not a JSON record ({error}); is this a balancing history?") from None
    return records, False


def warn_if_history_torn(path: str) -> bool:
    """Warn (and return ``True``) when the last line of the balancing history at ``path`` is torn: a run killed
    while appending it. The resumed run rewrites the file from its checkpoint, which drops that line."""
    torn = read_history(path)[1]
    if torn:
        logger.warning("The last line of %s is torn (a run was killed while writing it); it is dropped, and the "
                       "file keeps the records of the checkpoint's balancing updates.", path)
    return torn


def model_bytes(model: Any) -> int:
    """Bytes of ``model``'s weights and buffers as saved (tied weights once)."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def checkpoint_bytes(model: Any) -> int:
    """About how many bytes one checkpoint of ``model`` takes: weights, Adam's two moments per trainable weight,
    and the small files beside them."""
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return model_bytes(model) + 2 * trainable + _CHECKPOINT_EXTRA_BYTES


def free_bytes(path: str) -> int:
    """Free bytes on the file system of ``path`` (its nearest existing folder)."""
    while not os.path.exists(path):
        path = os.path.dirname(os.path.abspath(path))
    return shutil.disk_usage(path).free


def megabytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def checkpoint_step(folder: str) -> int:
    """The global step a Trainer checkpoint was saved at (0 if it has no trainer state)."""
    path = os.path.join(folder, TRAINER_STATE_FILE)
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return int(json.load(f).get("global_step", 0))


class HistoryFile:
    """``balancing_history.jsonl`` of one run: the only writer of the file.

    Args:
        path: the file (``output_dir/balancing_history.jsonl``).
        writes: whether this process writes it (the one that saves); other ranks only read it.
    """

    def __init__(self, path: str, *, writes: bool = True) -> None:
        self.path = path
        self.writes = writes

    def append(self, record: dict[str, Any]) -> None:
        """Add one update's record (a line of JSON; the file is closed again, so a kill loses no finished line)."""
        if self.writes:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def records(self, count: int, source: str | None = None) -> list[dict[str, Any]]:
        """The first ``count`` records of ``source`` (default: this file), read only. Fewer than ``count``
        complete records: the history of the checkpoint is lost, and an exact resume is refused."""
        source = self.path if source is None else source
        records = _read_records(source, count) if count > 0 else []
        if count > 0 and self.writes:
            warn_if_history_torn(source)
        if len(records) < count:
            raise ValueError(
                f"Cannot resume exactly: the checkpoint was saved after {count} balancing updates, but {source!r} "
                f"holds {len(records)} complete records of them. Put back that run's {HISTORY_FILE} (it lies in "
                "the output_dir the checkpoint was saved in), or start a new run."
            )
        return records

    def keep(self, records: list[dict[str, Any]]) -> None:
        """Make this file hold exactly ``records`` (no file for none).

        Records past them (written after the checkpoint being resumed, by a later checkpoint's run or before a
        kill) and a line torn by a kill are dropped."""
        if self.writes and records:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            _write_text_atomically(self.path, "".join(json.dumps(record) + "\n" for record in records))
        elif self.writes and os.path.exists(self.path):
            os.remove(self.path)  # no record yet: no file

    def restore(self, count: int, source: str | None = None) -> list[dict[str, Any]]:
        """The first ``count`` records of ``source`` (:meth:`records`), which this file then holds exactly
        (:meth:`keep`)."""
        records = self.records(count, source)
        self.keep(records)
        return records


def _read_records(path: str, count: int) -> list[dict[str, Any]]:
    """Up to ``count`` complete records from the start of a history file (:func:`read_history`)."""
    return read_history(path)[0][:count]


def _write_text_atomically(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX, suffix=_TEMPORARY_SUFFIX, dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def read_stream_state(folder: str, rank: int) -> dict:
    """The stream sampler state rank ``rank`` saved in checkpoint ``folder``."""
    path = os.path.join(folder, STREAM_STATE_FILE.format(rank=rank))
    if not os.path.isfile(path):
        raise ValueError(f"Cannot resume the streamed corpora of process {rank}: {path} is missing. Resume on as many "
                         "processes as the run that saved the checkpoint, from a checkpoint every process saved.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
