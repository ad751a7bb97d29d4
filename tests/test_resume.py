"""Exact resume: an interrupted run continued from its checkpoint equals the uninterrupted run."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from uat_hf.models.presets import build_model
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE as STATE_FILE
from uat_hf.utils.checkpoints import HISTORY_FILE


class RecordingTrainer(UATTrainer):
    """Remembers a fingerprint of every batch it trains on (which examples, in which order)."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained_batches = getattr(self, "trained_batches", [])
        self.trained_batches.append(inputs["input_ids"].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def run(tmp_path, corpora, tokenizer, output, resume=None, max_steps=11, mix=False, **settings):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    args = UATConfig(
        output_dir=str(output), strategy="multiuat", measure="exptp", update_every=3,
        scorer_lr=1e-2, scorer_steps=20, max_steps=max_steps, max_tokens=300, learning_rate=2e-3, warmup_steps=2,
        save_strategy="steps", save_steps=5, report_to=[], use_cpu=True, seed=7, disable_tqdm=True,
        logging_steps=100, mix_corpora=mix, mix_pool_batches=2, **{"mc_samples": 2, **settings},
    )
    trainer = RecordingTrainer(model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                               processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume)
    history = [json.loads(line) for line in (output / HISTORY_FILE).read_text().splitlines()]
    return trainer, history


@pytest.mark.parametrize("mix", [False, True], ids=["batch-level", "instance-level"])
def test_resume_mid_epoch_between_updates_continues_exactly(tmp_path, corpora, tokenizer, mix):
    full, full_history = run(tmp_path, corpora, tokenizer, tmp_path / "full", mix=mix)
    # Interrupted run: the same run stopped after step 5 (a checkpoint between the updates at 3 and 6).
    partial_dir = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-5", partial_dir / "checkpoint-5")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, partial_dir / HISTORY_FILE)  # holds records past step 5
    saved = json.loads((partial_dir / "checkpoint-5" / STATE_FILE).read_text())
    # p changed mid-epoch before the save
    assert saved["distribution"]["update_count"] == 1 and saved["sampler"]["schedule"]
    assert "history" not in json.dumps(saved)  # the history lives in balancing_history.jsonl only

    resumed, resumed_history = run(tmp_path, corpora, tokenizer, partial_dir, resume=True, mix=mix)

    assert resumed.trained_batches == full.trained_batches[5:]  # same corpus choices and examples
    assert [h["step"] for h in full_history] == [3, 6, 9]
    for a, b in zip(full_history, resumed_history):
        assert (a["step"], a["probabilities"], a["multiuat"]["rewards"]) == (b["step"], b["probabilities"],
                                                                              b["multiuat"]["rewards"])
    assert len(resumed_history) == len(full_history)
    assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()
    assert without_seconds(resumed.corpus_distribution.history) == without_seconds(full.corpus_distribution.history)
    assert resumed.corpus_sampler.state_dict() == full.corpus_sampler.state_dict()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_resume_with_adaptive_k_continues_exactly(tmp_path, corpora, tokenizer):
    """Adaptive K's stopping decisions depend only on seeded masks and seeded dev batches, so they resume too."""
    adaptive = {"mc_samples": 6, "mc_min_samples": 2, "mc_tolerance": 0.5}
    full, full_history = run(tmp_path, corpora, tokenizer, tmp_path / "full", **adaptive)
    shutil.copytree(tmp_path / "full" / "checkpoint-5", tmp_path / "partial" / "checkpoint-5")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, tmp_path / "partial" / HISTORY_FILE)
    resumed, resumed_history = run(tmp_path, corpora, tokenizer, tmp_path / "partial", resume=True, **adaptive)
    own = [h["multiuat"] for h in full_history]
    assert all(set(h["mc_samples_per_corpus"]) <= {2, 4, 6} for h in own)
    assert all(h["mc_samples_used"] == np.mean(h["mc_samples_per_corpus"]) for h in own)
    assert without_seconds(resumed_history) == without_seconds(full_history)
    assert resumed.trained_batches == full.trained_batches[5:]
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def without_seconds(history):
    """History records without their timings, the one thing two runs of the same sequence do not share."""
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


def test_resume_from_an_older_checkpoint_keeps_only_its_history_and_continues_exactly(tmp_path, corpora, tokenizer):
    """Checkpoints hold no history, only its length: resumed in place from checkpoint-5 while checkpoint-10 and
    the records of steps 6 and 9 are still there, the history file is cut back to the step-3 record and
    the run rewrites the rest exactly. A history file that lacks a checkpoint's records refuses the resume."""
    full, full_history = run(tmp_path, corpora, tokenizer, tmp_path / "full")
    assert "history" not in (tmp_path / "full" / "checkpoint-10" / STATE_FILE).read_text()

    again, again_history = run(tmp_path, corpora, tokenizer, tmp_path / "full",
                               resume=str(tmp_path / "full" / "checkpoint-5"))
    assert again.trained_batches == full.trained_batches[5:]
    assert without_seconds(again_history) == without_seconds(full_history)
    assert without_seconds(again.corpus_distribution.history) == without_seconds(full_history)
    assert again.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()

    history = tmp_path / "full" / HISTORY_FILE
    history.write_text(history.read_text().splitlines(keepends=True)[0])  # only the step-3 record is left
    with pytest.raises(ValueError, match=r"saved after 3 balancing updates, but .*balancing_history.jsonl.* holds 1"):
        run(tmp_path, corpora, tokenizer, tmp_path / "full", resume=str(tmp_path / "full" / "checkpoint-10"),
            max_steps=12)
    assert len(history.read_text().splitlines()) == 1  # the refusal leaves the file as it was


def test_resume_with_other_strategy_is_refused(tmp_path, corpora, tokenizer):
    run(tmp_path, corpora, tokenizer, tmp_path / "a", max_steps=5)
    model = build_model("tiny", tokenizer)
    args = UATConfig(output_dir=str(tmp_path / "a"), strategy="uniform", max_steps=8, max_tokens=300, report_to=[],
                     use_cpu=True, seed=7, disable_tqdm=True)
    trainer = UATTrainer(model, args, train_corpora=corpora["train"], processing_class=tokenizer)
    with pytest.raises(ValueError, match="trained with strategy 'multiuat'"):
        trainer.train(resume_from_checkpoint=True)


def test_resume_from_a_checkpoint_at_max_steps_is_refused_before_any_step(tmp_path, corpora, tokenizer):
    """The stock loop would train step max_steps + 1 after such a resume; the trainer says so instead."""
    run(tmp_path, corpora, tokenizer, tmp_path / "done", max_steps=5)
    with pytest.raises(ValueError, match=r"already at step 5 and max_steps is 5: nothing is left to train"):
        run(tmp_path, corpora, tokenizer, tmp_path / "done", resume=True, max_steps=5)
    more, _ = run(tmp_path, corpora, tokenizer, tmp_path / "done", resume=True, max_steps=6)
    assert more.state.global_step == 6 and len(more.trained_batches) == 1


def test_resume_true_skips_empty_and_torn_checkpoints_and_continues_exactly(tmp_path, corpora, tokenizer):
    """A kill while saving leaves an empty or torn ``checkpoint-N``; resume falls back to the last complete one,
    and a history line torn by the kill does not stop it."""
    full, full_history = run(tmp_path, corpora, tokenizer, tmp_path / "full")
    partial_dir = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-5", partial_dir / "checkpoint-5")
    (partial_dir / "checkpoint-10").mkdir()  # killed right after creating the folder
    shutil.copytree(tmp_path / "full" / "checkpoint-10", partial_dir / "checkpoint-8")
    state = partial_dir / "checkpoint-8" / "trainer_state.json"
    state.write_text(state.read_text()[:100])  # killed while writing the trainer state
    lines = (tmp_path / "full" / HISTORY_FILE).read_text().splitlines(keepends=True)
    (partial_dir / HISTORY_FILE).write_text(lines[0] + lines[1][:40])  # killed mid-line

    resumed, resumed_history = run(tmp_path, corpora, tokenizer, partial_dir, resume="latest")

    assert resumed.trained_batches == full.trained_batches[5:]
    drop_seconds = [{k: v for k, v in h.items() if k != "seconds"} for h in full_history]
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in resumed_history] == drop_seconds
    for p, q in zip(full.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_a_checkpoint_without_the_balancing_state_is_refused_unless_allowed(tmp_path, corpora, tokenizer):
    run(tmp_path, corpora, tokenizer, tmp_path / "a", max_steps=5)
    (tmp_path / "a" / "checkpoint-5" / STATE_FILE).unlink()
    with pytest.raises(ValueError, match=rf"Cannot resume from checkpoint .*checkpoint-5.*{STATE_FILE}.* is missing"):
        run(tmp_path, corpora, tokenizer, tmp_path / "a", resume=str(tmp_path / "a" / "checkpoint-5"), max_steps=8)
    with pytest.raises(ValueError, match="No complete checkpoint found"):
        run(tmp_path, corpora, tokenizer, tmp_path / "a", resume=True, max_steps=8)

    # The callback on its own (as on a stock Trainer) refuses it too, before the first step.
    trainer, _ = run(tmp_path, corpora, tokenizer, tmp_path / "b", max_steps=5)
    (tmp_path / "b" / "checkpoint-5" / STATE_FILE).unlink()
    trainer.state.global_step = 5
    with pytest.raises(ValueError, match=rf"Cannot resume exactly at step 5: .*{STATE_FILE} is missing"):
        trainer.balancing.on_train_begin(trainer.args, trainer.state, trainer.control)

    # An explicit opt-in resumes anyway (inexactly), with a warning.
    model = build_model("tiny", tokenizer)
    args = UATConfig(output_dir=str(tmp_path / "a"), strategy="multiuat", measure="exptp", mc_samples=2,
                     update_every=3, max_steps=7, max_tokens=300, save_strategy="no", report_to=[], use_cpu=True,
                     seed=7, disable_tqdm=True, allow_inexact_resume=True)
    trainer = UATTrainer(model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    assert trainer.train(resume_from_checkpoint=True).global_step == 7


def test_dynamic_strategy_that_would_never_update_is_refused_before_the_first_step(tmp_path, corpora, tokenizer):
    """With epochs instead of max_steps the number of steps is only known when training starts."""
    model = build_model("tiny", tokenizer)
    small = {name: ds.select(range(30)) for name, ds in corpora["train"].items()}
    args = UATConfig(output_dir=str(tmp_path / "e"), strategy="multiuat", measure="exptp", mc_samples=2,
                     update_every=1000, num_train_epochs=1, max_tokens=300, save_strategy="no", report_to=[],
                     use_cpu=True, disable_tqdm=True)
    trainer = RecordingTrainer(model, args, train_corpora=small, dev_corpora=corpora["dev"],
                               processing_class=tokenizer)
    with pytest.raises(ValueError, match=r"update_every=1000 >= max_steps=\d+ \(the steps this run trains\)"):
        trainer.train()
    assert not getattr(trainer, "trained_batches", [])


def tree_hashes(folder):
    """Every file under ``folder`` by relative path → its sha256: a refused resume must leave them all as they were."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("change", "message"), [
    ({"strategy": "uniform"}, r"trained with strategy 'multiuat', this run uses 'uniform'"),
    ({"seed": 8}, r"trained with seed=7 \(this run gives 8\)"),
    ({"measure": "vartp"}, r"trained with measure='exptp' \(this run gives 'vartp'\)"),
    ({"update_every": 2}, r"trained with update_every=3 \(this run gives 2\)"),
    ({"corpora": ["bible", "software"]}, r"trained on corpora \[.*\], this run gives \['bible', 'software'\]"),
    ({"state": {"format": 3}}, r"has format 3, this version of uat_hf reads 4"),
    ({"state": {"format": 4}}, r"lacks distribution, sampler: it is torn"),
    ({"corpus_health_holdout": 0.1}, r"trained with corpus_health_holdout=0.02 \(this run gives 0.1\)"),
    ({"saved_without": "corpus_health_holdout"}, r"corpus_health_holdout=0.0 \(this run gives 0.02\)"),
], ids=["strategy", "seed", "measure", "update_every", "corpora", "old-format-state", "torn-state", "holdout",
        "saved-before-holdout"])
def test_a_refused_resume_changes_no_file_of_the_run(tmp_path, corpora, tokenizer, change, message):
    """Resume checks the checkpoint, its state and the settings before it cuts the history: a refusal is a
    ValueError raised before training starts, and every file of output_dir is byte-identical afterwards."""
    out = tmp_path / "run"
    run(tmp_path, corpora, tokenizer, out, max_steps=11)  # history: steps 3, 6, 9; checkpoints 5 and 10
    change = dict(change)
    if "state" in change:
        (out / "checkpoint-5" / STATE_FILE).write_text(json.dumps(change.pop("state")))
    if "saved_without" in change:  # a checkpoint from before the setting existed: it held nothing out
        state = json.loads((out / "checkpoint-5" / STATE_FILE).read_text())
        del state["settings"][change.pop("saved_without")]
        (out / "checkpoint-5" / STATE_FILE).write_text(json.dumps(state))
    names = change.pop("corpora", None)
    train = {n: corpora["train"][n] for n in names} if names else corpora["train"]
    dev = {n: corpora["dev"][n] for n in names} if names else corpora["dev"]
    before = tree_hashes(out)
    settings = dict(output_dir=str(out), strategy="multiuat", measure="exptp", update_every=3, scorer_lr=1e-2,
                    scorer_steps=20, max_steps=14, max_tokens=300, learning_rate=2e-3, warmup_steps=2, mc_samples=2,
                    save_strategy="steps", save_steps=5, report_to=[], use_cpu=True, seed=7, disable_tqdm=True,
                    logging_steps=100, mix_pool_batches=2)
    settings.update(change)
    if settings["strategy"] == "uniform":
        settings = {k: v for k, v in settings.items() if k not in ("measure", "scorer_lr", "scorer_steps")}
    trainer = RecordingTrainer(build_model("tiny", tokenizer), UATConfig(**settings), train_corpora=train,
                               dev_corpora=dev, processing_class=tokenizer)
    with pytest.raises(ValueError, match=message):
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-5"))
    assert not getattr(trainer, "trained_batches", [])
    assert tree_hashes(out) == before


def test_a_resume_reads_and_checks_the_checkpoint_once(tmp_path, corpora, tokenizer, monkeypatch):
    """UATTrainer.train checks the checkpoint before any file changes and hands the checked state to the balancing
    callback, which restores from it: the state file is read once (it was read and checked twice)."""
    from uat_hf.training import resume_check

    run(tmp_path, corpora, tokenizer, tmp_path / "full", max_steps=6)
    partial = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-5", partial / "checkpoint-5")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, partial / HISTORY_FILE)
    reads = []
    original = resume_check.read_state
    monkeypatch.setattr(resume_check, "read_state", lambda folder: reads.append(folder) or original(folder))
    resumed, history = run(tmp_path, corpora, tokenizer, partial, resume=True, max_steps=6)
    assert reads == [str(partial / "checkpoint-5")] and [h["step"] for h in history] == [3, 6]
