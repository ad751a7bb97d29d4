"""Checkpoint folders a resumed run can trust: atomic state files, and torn or empty folders skipped."""

from __future__ import annotations

import inspect
import json
import os

import pytest

from uat_hf.utils.checkpoints import (
    BALANCING_STATE_FILE,
    HISTORY_FILE,
    HistoryFile,
    checkpoint_problem,
    checkpoint_step,
    last_complete_checkpoint,
    resolve_resume_checkpoint,
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


def test_resolve_resume_checkpoint_is_the_one_place_that_picks_the_checkpoint(tmp_path):
    """UATTrainer.train and uat-train ask the same function which checkpoint to resume (and load a finished one
    with UATTrainer.load_checkpoint); the balancing callback's on_save is the only writer of the balancing state
    and its on_log the only path of the balance numbers (UATTrainer does not override the save; its log only adds the
    true throughput to the final entry)."""
    from transformers import Seq2SeqTrainer

    from uat_hf.training.uat_trainer import UATTrainer

    make_checkpoint(tmp_path / "checkpoint-10", trainer_state='{"global_step": 10}')
    make_checkpoint(tmp_path / "checkpoint-20", trainer_state='{"global_step": 20}', balancing_state=None)
    for latest in (True, "latest", " TRUE "):
        assert resolve_resume_checkpoint(str(tmp_path), latest) == str(tmp_path / "checkpoint-10")
    assert resolve_resume_checkpoint(str(tmp_path), "latest", exact=False) == str(tmp_path / "checkpoint-20")
    assert resolve_resume_checkpoint(str(tmp_path), None) is None
    assert resolve_resume_checkpoint(str(tmp_path), False) is None
    assert checkpoint_step(resolve_resume_checkpoint(str(tmp_path), str(tmp_path / "checkpoint-10"))) == 10
    with pytest.raises(ValueError, match=rf"Cannot resume from checkpoint .*checkpoint-20.*{BALANCING_STATE_FILE}"):
        resolve_resume_checkpoint(str(tmp_path), str(tmp_path / "checkpoint-20"))
    # UATTrainer.train and uat-train ask resolve_resume_checkpoint; the callback's on_save alone writes the state
    assert UATTrainer._save_checkpoint is Seq2SeqTrainer._save_checkpoint
    assert "self.balancing" not in inspect.getsource(UATTrainer.log) and callable(UATTrainer.load_checkpoint)


def test_the_history_file_keeps_exactly_the_records_of_the_checkpoint(tmp_path):
    path = tmp_path / HISTORY_FILE
    history = HistoryFile(str(path))
    for step in (3, 6, 9):
        history.append({"step": step})
    assert history.restore(2) == [{"step": 3}, {"step": 6}]  # the step-9 record came after the checkpoint
    assert path.read_text().splitlines() == ['{"step": 3}', '{"step": 6}']
    path.write_text(path.read_text() + '{"step": 9, "probab')  # a kill mid-line
    assert history.restore(2) == [{"step": 3}, {"step": 6}]
    with pytest.raises(ValueError, match=r"saved after 3 balancing updates, but .* holds 2 complete records"):
        history.restore(3)
    reader = HistoryFile(str(tmp_path / "other" / HISTORY_FILE), writes=False)  # a rank that does not save
    assert reader.restore(1, source=str(path)) == [{"step": 3}] and not (tmp_path / "other").exists()
    reader.append({"step": 12})
    assert not (tmp_path / "other").exists()
    assert history.restore(0) == [] and not path.exists()  # a new run into an old output_dir: no record, no file


def test_one_history_reader_drops_a_torn_last_line_and_refuses_a_malformed_one(tmp_path, caplog):
    """Resuming and plotting read a history the same way (they used to differ: uat-plot refused a run killed while
    appending its last record, the resume dropped that line)."""
    import json
    import logging

    from uat_hf.evaluation.history import load_history
    from uat_hf.utils.checkpoints import HISTORY_FILE, HistoryFile, read_history

    records = [{"step": s, "strategy": "multiuat", "probabilities": {"a": 0.5, "b": 0.5}} for s in (1, 2)]
    path = tmp_path / HISTORY_FILE
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 3, "prob', encoding="utf-8")
    assert read_history(str(path)) == (records, True)
    with caplog.at_level(logging.WARNING, logger="uat_hf"):
        assert load_history(tmp_path) == records
    assert "is torn" in caplog.text
    assert HistoryFile(str(path), writes=False).records(2) == records
    path.write_text(json.dumps(records[0]) + "\nnot json\n" + json.dumps(records[1]) + "\n", encoding="utf-8")
    for read in (lambda: load_history(tmp_path), lambda: HistoryFile(str(path), writes=False).records(5)):
        with pytest.raises(ValueError, match=rf"{HISTORY_FILE}:2 is not a JSON record"):
            read()
