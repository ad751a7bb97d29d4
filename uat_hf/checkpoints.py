"""Checkpoint folders that a resumed run can trust.

A run killed while saving (out of disk, pre-empted, Ctrl-C) leaves a ``checkpoint-N`` folder that is empty
or torn. The stock ``get_last_checkpoint`` picks the highest N whatever it holds, so resume then fails, or
worse, continues from half a state. Here a checkpoint counts as complete only when the files written last
are there and parse: the Trainer's ``trainer_state.json`` (written after the weights, optimizer and RNG
states) and the balancing state (``UATTrainer`` writes it before the Trainer's state; under a stock trainer
the callback's ``on_save`` writes it after). Our own files are written atomically (a temporary file renamed
over the target), so they are either whole or absent.

The names of the files a balancing run writes are defined here, in a module that imports neither torch nor
the Trainer, so that readers of a run's output (:mod:`uat_hf.plotting`) stay light.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from typing import Any

logger = logging.getLogger(__name__)

#: The sampler and scorer state, one JSON file per checkpoint folder.
BALANCING_STATE_FILE = "uat_balancing_state.json"
#: One JSON record per balancing update (step, rewards, p, ...), appended in the training ``output_dir``.
HISTORY_FILE = "balancing_history.jsonl"
#: Words that ask ``train(resume_from_checkpoint=...)`` for the last complete checkpoint of ``output_dir``.
LATEST = ("true", "latest")

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def write_json_atomically(path: str, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` so that a reader sees the old file, the new one, or none: never a
    torn one (the text goes to a temporary file in the same folder, which then replaces ``path``)."""
    folder = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def checkpoint_problem(folder: str, *, needs_balancing_state: bool = True) -> str | None:
    """Why ``folder`` cannot be resumed from exactly (a sentence naming the file), or ``None`` if it can."""
    from transformers.trainer import TRAINER_STATE_NAME  # here: transformers.trainer imports torch

    if not os.path.isdir(folder):
        return f"{folder!r} is not a directory"
    required = [TRAINER_STATE_NAME] + ([BALANCING_STATE_FILE] if needs_balancing_state else [])
    for name in required:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return f"{path!r} is missing (the save was interrupted, or the run did not use uat-hf's balancing)"
        try:
            with open(path, encoding="utf-8") as f:
                json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"{path!r} is torn or unreadable ({error})"
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
