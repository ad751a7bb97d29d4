"""Checkpoint folders a resumed run can trust: atomic state files, and torn or empty folders skipped."""

from __future__ import annotations

import json
import os

import pytest

from uat_hf.checkpoints import (
    BALANCING_STATE_FILE,
    checkpoint_problem,
    last_complete_checkpoint,
    write_json_atomically,
)


def make_checkpoint(folder, *, trainer_state="{}", balancing_state="{}"):
    folder.mkdir(parents=True)
    if trainer_state is not None:
        (folder / "trainer_state.json").write_text(trainer_state)
    if balancing_state is not None:
        (folder / BALANCING_STATE_FILE).write_text(balancing_state)
    return folder


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary_file(tmp_path):
    """A save that dies half way (here: a value json cannot write, after part of the text is out) must not
    leave a torn state file behind, as a full disk would with a plain open-and-write."""
    path = tmp_path / BALANCING_STATE_FILE
    write_json_atomically(str(path), {"update_count": 1})
    with pytest.raises(TypeError):
        write_json_atomically(str(path), {"update_count": 2, "scorer": object()})
    assert json.loads(path.read_text()) == {"update_count": 1}
    assert os.listdir(tmp_path) == [BALANCING_STATE_FILE]


def test_the_last_complete_checkpoint_skips_empty_torn_and_partial_folders(tmp_path):
    make_checkpoint(tmp_path / "checkpoint-10")
    (tmp_path / "checkpoint-40").mkdir()  # killed right after mkdir
    make_checkpoint(tmp_path / "checkpoint-30", trainer_state='{"global_st')  # torn trainer state
    make_checkpoint(tmp_path / "checkpoint-20", balancing_state=None)  # killed before the callback saved
    (tmp_path / "checkpoint-50").write_text("not a folder")
    assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")
    # Without the need for the balancing state (an explicitly inexact resume) the partial one is fine.
    assert last_complete_checkpoint(str(tmp_path), needs_balancing_state=False) == str(tmp_path / "checkpoint-20")
    assert last_complete_checkpoint(str(tmp_path / "nothing-here")) is None


def test_checkpoint_problems_name_the_file(tmp_path):
    torn = make_checkpoint(tmp_path / "checkpoint-3", trainer_state="{")
    assert "trainer_state.json' is torn or unreadable" in checkpoint_problem(str(torn))
    partial = make_checkpoint(tmp_path / "checkpoint-4", balancing_state=None)
    assert f"{BALANCING_STATE_FILE}' is missing" in checkpoint_problem(str(partial))
    assert checkpoint_problem(str(make_checkpoint(tmp_path / "checkpoint-5"))) is None
