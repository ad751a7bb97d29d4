"""``uat-train`` refusals that used to end in a traceback, a bare errno or silence (issue 24, "Clear refusals,
nothing lost"): every one is a single ``uat-train: error:`` line naming the field or folder, and nothing torn
is left behind.

Everything is real: one tiny multiuat run on the bundled data writes the checkpoints the resume tests start
from; the full-disk tests put ``output_dir`` on a real tmpfs of a few hundred KB (they need root to mount it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess

import pytest
from test_cli_inputs import RUN, error_of, write_recipe

from uat_hf.cli import train as cli
from uat_hf.data.corpora import BUNDLED_DIR
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE, checkpoint_bytes

BUNDLED_DDTP = BUNDLED_DIR / "multilingual-ddtp"
# Two steps of multiuat (an update after each), a checkpoint after each step.
SAVED = {**RUN, "strategy": "multiuat", "measure": "exptp", "update_every": 1, "mc_samples": 2,
         "save_strategy": "steps", "save_steps": 1}


def run_cli(tmp_path, capsys, output_dir, argv=(), **changes) -> tuple[int, str, str]:
    recipe = write_recipe(tmp_path, {**SAVED, "output_dir": str(output_dir), **changes})
    code = cli.main(["--config", str(recipe), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The output_dir of a finished 2-step run: checkpoint-1, checkpoint-2, the history and the final model."""
    folder = tmp_path_factory.mktemp("trained")
    out = folder / "out"
    assert cli.main(["--config", str(write_recipe(folder, {**SAVED, "output_dir": str(out)}))]) == 0
    assert len((out / HISTORY_FILE).read_text().splitlines()) == 2
    return out


def copy_of(trained, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    return out


# --- impossible numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--learning_rate", "-1", "learning_rate must be > 0, got -1.0."),
    ("--learning_rate", "0", "learning_rate must be > 0, got 0.0."),
    ("--max_steps", "-2", "max_steps must be >= -1, got -2."),
    ("--adam_beta2", "1", "adam_beta2 must be >= 0 and < 1, got 1.0."),
])
def test_impossible_numbers_are_refused_naming_the_field(tmp_path, capsys, flag, value, message):
    code, out, err = run_cli(tmp_path, capsys, tmp_path / "out", [flag, value])
    assert error_of(code, err) == message
    assert not (tmp_path / "out").exists()  # refused while parsing, before anything is written


# --- output_dir --------------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_an_output_dir_that_cannot_be_created_names_the_field(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, "/proc/x")
    assert error_of(code, err) == ("output_dir '/proc/x' cannot be created (No such file or directory); give a "
                                   "writable folder.")
    assert "[uat-hf] corpora:" not in err  # before any corpus is read


# --- resume ------------------------------------------------------------------------------------------------


def test_resume_latest_without_the_balancing_state_is_one_line_suggesting_allow_inexact_resume(
        trained, tmp_path, capsys):
    out = copy_of(trained, tmp_path)
    for step in (1, 2):
        (out / f"checkpoint-{step}" / BALANCING_STATE_FILE).unlink()
    code, stdout, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", "latest"], max_steps=3)
    message = error_of(code, err)
    assert message.startswith(f"No complete checkpoint found in output_dir '{out}' to resume from (")
    assert f"'{out / 'checkpoint-2'}': '{out / 'checkpoint-2' / BALANCING_STATE_FILE}' is missing" in message
    assert "--allow_inexact_resume" in message and "\n" not in message
    assert "[uat-hf] corpora:" not in err  # refused before any data is read
    # A named checkpoint folder gets the same suggestion.
    code, _, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", str(out / "checkpoint-1")],
                           max_steps=3)
    message = error_of(code, err)
    assert message.startswith(f"Cannot resume from checkpoint '{out / 'checkpoint-1'}': ")
    assert "--allow_inexact_resume" in message


def test_resume_latest_from_only_torn_checkpoints_is_one_line_naming_them(trained, tmp_path, capsys):
    out = copy_of(trained, tmp_path)
    for step in (1, 2):  # as a full disk leaves them: the Trainer's state, written last, is missing
        (out / f"checkpoint-{step}" / "trainer_state.json").unlink()
    code, stdout, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", "latest"], max_steps=3)
    message = error_of(code, err)
    assert f"'{out / 'checkpoint-2' / 'trainer_state.json'}' is missing" in message
    assert "Remove the torn checkpoint folders" in message and "allow_inexact_resume" not in message
    assert "[uat-hf] corpora:" not in err


def test_resume_removes_stray_temporary_files_and_warns_about_a_torn_history_line(trained, tmp_path, capsys,
                                                                                 caplog):
    out = copy_of(trained, tmp_path)
    shutil.rmtree(out / "checkpoint-2")
    strays = [out / "checkpoint-1" / ".tmp-k1ll3d.json", out / ".tmp-x.json"]  # a kill mid write_json_atomically
    for stray in strays:
        stray.write_text('{"sampler": ', encoding="utf-8")
    history = out / HISTORY_FILE
    lines = history.read_text(encoding="utf-8").splitlines(keepends=True)
    history.write_text(lines[0] + lines[1][:30], encoding="utf-8")  # killed while appending the step-2 record
    with caplog.at_level(logging.WARNING, logger="uat_hf"):
        code, _, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", "latest"])
    assert code == 0, err
    assert not any(stray.exists() for stray in strays)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"The last line of {history} is torn" in w for w in warnings), warnings
    assert [line.split('"step": ')[1][0] for line in history.read_text().splitlines()] == ["1", "2"]


# --- the model's length limit ------------------------------------------------------------------------------


def test_a_pretrained_models_length_limit_is_checked_before_the_data_is_read(trained, tmp_path, capsys):
    code, stdout, err = run_cli(tmp_path, capsys, tmp_path / "out", model_name_or_path=str(trained),
                                max_source_length=100_000)
    assert "max_source_length=100000 exceeds the model's max_position_embeddings" in error_of(code, err)
    assert "[uat-hf] corpora:" not in err


# --- disk space --------------------------------------------------------------------------------------------


def test_the_checkpoint_estimate_is_close_to_a_real_checkpoint(trained):
    from transformers import AutoModelForSeq2SeqLM

    folder = trained / "checkpoint-1"
    real = sum(f.stat().st_size for f in folder.iterdir())
    estimate = checkpoint_bytes(AutoModelForSeq2SeqLM.from_pretrained(folder))
    assert 0.8 * real <= estimate <= 1.25 * real, (estimate, real)


@pytest.fixture
def small_disk(tmp_path):
    """A mount point; ``small_disk(kb)`` mounts a tmpfs of that size on it (unmounted after the test)."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = []

    def mount(kb: int):
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "--lazy", str(point)], check=True)  # a closed file may linger


def test_a_disk_too_small_for_the_first_checkpoint_is_refused_before_training(tmp_path, capsys, small_disk):
    out = small_disk(300) / "out"
    code, stdout, err = run_cli(tmp_path, capsys, out)
    message = error_of(code, err)
    assert message.startswith(f"output_dir '{out}' has 0.")
    assert "the first checkpoint (about 0.4" in message and "Free some space" in message
    assert not list(out.glob("checkpoint-*"))


def test_a_disk_that_fills_up_mid_run_ends_in_one_line_and_leaves_no_torn_checkpoint(tmp_path, capsys, small_disk):
    out = small_disk(700) / "out"  # the first checkpoint fits, the second does not
    code, stdout, err = run_cli(tmp_path, capsys, out)
    assert code == 1 and "Traceback" not in err
    message = err.split("uat-train: error: ", 1)[1].strip()
    assert message.startswith(f"output_dir '{out}' ran out of space while saving at step 2 (")
    assert f"the torn '{out / 'checkpoint-2'}' was removed" in message
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]


def tree_hashes(folder):
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("argv", "changes", "message"), [
    (["--strategy", "multidds-s"], {"measure": None},
     "was trained with strategy 'multiuat', this run uses 'multidds-s'"),
    (["--seed", "1"], {}, "was trained with seed=0 (this run gives 1)"),
    (["--measure", "vartp"], {}, "was trained with measure='exptp' (this run gives 'vartp')"),
    (["--mc_samples", "3"], {}, "was trained with mc_samples=2 (this run gives 3)"),
    (["--corpora", "de"], {}, "was trained on corpora ['de', 'fr'], this run gives ['de']"),
    (["--max_train_examples", "30"], {}, "The checkpoint's prior is"),
    ([], {"state": {"format": 3}}, "has format 3, this version of uat_hf reads 4"),
    ([], {"state": {"format": 4, "sampler": {}}}, "lacks distribution: it is torn or was not written by uat_hf"),
], ids=["strategy", "seed", "measure", "mc_samples", "corpora", "prior", "old-format-state", "torn-state"])
def test_a_refused_resume_is_one_line_and_leaves_the_run_folder_byte_identical(trained, tmp_path, capsys, argv,
                                                                              changes, message):
    """Resume never changes a file of the run (the history, the tokenizer) until the checkpoint, its state and the
    recipe have all been checked."""
    out = copy_of(trained, tmp_path)
    changes = dict(changes)
    state = changes.pop("state", None)
    if state is not None:
        (out / "checkpoint-2" / BALANCING_STATE_FILE).write_text(json.dumps(state))
    before = tree_hashes(out)
    code, stdout, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", "latest", *argv], max_steps=4,
                                **changes)
    error = error_of(code, err)
    assert message in error and "\n" not in error
    assert str(out / "checkpoint-2") in error or "format" in error or "prior" in error
    assert tree_hashes(out) == before


def test_a_strategy_path_that_is_not_a_class_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(tmp_path, capsys, tmp_path / "out", strategy="json:dumps")
    assert "must be a subclass of uat_hf.strategies.base.BalancingStrategy" in error_of(code, err)
    assert not (tmp_path / "out").exists()


def test_an_unknown_corpus_in_corpus_probabilities_is_refused_before_anything_is_written(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, tmp_path / "out", strategy="fixed",
                             corpus_probabilities={"de": 0.5, "nope": 0.5})
    assert "corpus_probabilities names corpus 'nope'" in error_of(code, err)
    assert not (tmp_path / "out").exists()  # no tokenizer, no empty folder
    assert "tokenizer:" not in out  # refused before the tokenizer was trained


def test_a_refusal_leaves_an_output_dir_that_existed_as_it_was(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code, _, err = run_cli(tmp_path, capsys, tmp_path / "out", strategy="json:dumps")
    error_of(code, err)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_truncated_checkpoint_weights_are_skipped_by_latest_and_refused_by_name(trained, tmp_path, capsys, caplog):
    """A kill or a full disk while the weights were written leaves a short model.safetensors: "latest" skips that
    checkpoint with a warning, as it skips a torn state, and naming it is one error line (it was a traceback)."""
    out = copy_of(trained, tmp_path)
    weights = out / "checkpoint-2" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    code, _, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", str(out / "checkpoint-2")],
                           max_steps=3)
    message = error_of(code, err)
    assert f"'{weights}' is truncated" in message and "\n" not in message and "Traceback" not in err
    with caplog.at_level(logging.WARNING, logger="uat_hf"):
        code, _, err = run_cli(tmp_path, capsys, out, ["--resume_from_checkpoint", "latest"], max_steps=3)
    assert code == 0, err
    assert any(f"Skipping checkpoint {out / 'checkpoint-2'}: '{weights}' is truncated" in r.getMessage()
               for r in caplog.records)
    assert [json.loads(line)["step"] for line in (out / HISTORY_FILE).read_text().splitlines()] == [1, 2, 3]


def test_an_empty_streamed_training_file_is_one_line_naming_it(tmp_path, capsys):
    import gzip

    corpora = tmp_path / "corpora"
    corpora.mkdir()
    for name in ("de", "fr"):
        for split in ("train", "dev", "test"):
            source = BUNDLED_DDTP / f"{name}.{split}.jsonl.gz"
            if source.exists():
                shutil.copy(source, corpora / source.name)
    with gzip.open(corpora / "fr.train.jsonl.gz", "wt"):
        pass  # a compressed file of no rows
    code, _, err = run_cli(tmp_path, capsys, tmp_path / "out", corpus_dir=str(corpora), streaming=True,
                           dedupe=False)
    assert error_of(code, err) == (f"Corpus 'fr' split 'train': file '{corpora / 'fr.train.jsonl.gz'}' holds no "
                                   "pairs; give it its training pairs, or leave the corpus out.")
    assert not (tmp_path / "out").exists()
