"""``uat-train``: recipe + command-line parsing, an end-to-end run on bundled data, and early input errors."""

from __future__ import annotations

import json

import pytest
import yaml

from uat_hf.cli import train as cli
from uat_hf.cli.parsing import recipe_to_dataclasses
from uat_hf.cli.recipe import RECIPE_FILE, Recipe

# A tiny but real run: 2 bundled domains for training, a third domain as an evaluation-only corpus.
TINY = {
    "strategy": "multiuat",
    "mc_samples": 2,
    "update_every": 1,
    "dev_batch_tokens": 200,
    "corpus_dir": "bundled:multidomain-en-de",
    "direction": "multi-domain",
    "source_lang": "en",
    "target_lang": "de",
    "corpora": ["bible", "dictionary"],
    "eval_corpus_specs": [
        {"name": "software_ood", "source_lang": "en", "target_lang": "de",
         "test": "bundled:multidomain-en-de/software.test.jsonl.gz"},
    ],
    "max_train_examples": 80,
    "max_eval_examples": 6,
    "max_source_length": 32,
    "max_target_length": 32,
    "model_name_or_path": "tiny",
    "vocab_size": 300,
    "max_steps": 2,
    "max_tokens": 400,
    "learning_rate": "3e-3",
    "logging_steps": 1,
    "save_strategy": "no",
    "eval_strategy": "no",
    "generation_num_beams": 1,
    "generation_max_length": 8,
    "per_device_eval_batch_size": 8,
    "use_cpu": True,
    "seed": 0,
    "report_to": "none",
    "disable_tqdm": True,
}


def write_recipe(path, **changes):
    fields = {**TINY, **changes}
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path


def test_command_line_beats_the_recipe(tmp_path):
    config = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"), learning_rate="1e-3", mc_samples=4)
    training, data, model, run, effective = cli.parse_arguments(
        ["--config", str(config), "--learning_rate", "0.01", "--strategy", "temperature", "--corpora", "software",
         "--vocab_size", "500", "--max_train_minutes", "2"]
    )
    assert training.learning_rate == 0.01 and training.strategy == "temperature"
    assert data.corpora == ["software"] and model.vocab_size == 500 and run.max_train_minutes == 2
    assert training.mc_samples == 4 and data.max_train_examples == 80  # recipe values not overridden stay
    # The effective recipe holds both, in plain YAML types, and reparses to the same arguments.
    assert effective["learning_rate"] == 0.01 and effective["mc_samples"] == 4 and effective["corpora"] == ["software"]
    again = recipe_to_dataclasses(Recipe(effective))
    assert again[0].learning_rate == 0.01 and again[1].corpora == ["software"]


def test_a_recipe_directory_works_like_a_file(tmp_path):
    config = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"))
    Recipe.from_pretrained(config).save_pretrained(tmp_path / "recipe_dir")
    from_file = cli.parse_arguments(["--config", str(config)])
    from_dir = cli.parse_arguments(["--config", str(tmp_path / "recipe_dir")])
    for a, b in zip(from_file[:4], from_dir[:4]):
        assert a == b
    assert from_file[4] == from_dir[4]


def test_end_to_end_run_writes_results_model_tokenizer_and_recipe(tmp_path, capsys):
    Recipe({**TINY, "output_dir": str(tmp_path / "out")}).save_pretrained(tmp_path / "recipe_dir")
    assert cli.main(["--config", str(tmp_path / "recipe_dir"), "--max_steps", "3"]) == 0
    out_dir = tmp_path / "out"
    results = json.loads((out_dir / "eval_results.json").read_text())
    for name in ("bible", "dictionary", "software_ood"):
        assert 0.0 <= results[f"eval_{name}_bleu"] <= 100.0
        assert 0.0 <= results[f"eval_{name}_chrf"] <= 100.0
    for key in ("eval_mean_bleu", "eval_mean_chrf", "eval_in_domain_mean_bleu", "eval_out_of_domain_mean_bleu"):
        assert key in results
    assert results["eval_in_domain_mean_bleu"] == pytest.approx(
        (results["eval_bible_bleu"] + results["eval_dictionary_bleu"]) / 2
    )
    # the last corpus-health check of the training corpora, at the last step
    health = results["corpus_health"]
    assert health["step"] == 3 and set(health["corpora"]) == {"bible", "dictionary"} and health["warnings"] == []
    assert all(entry["dev_loss"] > 0 and entry["train_loss"] > 0 for entry in health["corpora"].values())
    # Model, tokenizer (with nothing missing to reload), the effective recipe with the override, a model card.
    from uat_hf.data.tokenization import load_tokenizer
    from uat_hf.models.presets import build_model

    tokenizer = load_tokenizer(str(out_dir))
    assert len(tokenizer) <= 300
    model = build_model(str(out_dir), tokenizer)
    assert model.config.encoder_layers == 1
    saved = Recipe.from_pretrained(out_dir)
    assert saved["max_steps"] == 3 and saved["corpus_dir"] == "bundled:multidomain-en-de"
    assert (out_dir / "README.md").is_file() and (out_dir / RECIPE_FILE).is_file()
    state = json.loads((out_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 3

    printed = capsys.readouterr().out
    assert "in-domain" in printed and "out-of-domain" in printed and "mean" in printed
    assert "sacreBLEU bleu signature: nrefs:1" in printed and "first 6 sentences" in printed

    # The test translations lie beside eval_results.json, as uat-evaluate writes them, so that uat-evaluate's
    # --compare takes a training run's folder; and uat-evaluate --config reads the run's test sets (the
    # eval_corpus_specs one included) and generation settings as uat-train did: the same scores.
    from uat_hf.cli import evaluate

    for name in ("bible", "dictionary", "software_ood"):
        assert len((out_dir / "hypotheses" / f"{name}.txt").read_text(encoding="utf-8").splitlines()) == 6
    evaluate.main([str(out_dir), "--config", str(out_dir), "--max_eval_examples", "6", "--output_dir",
                   str(tmp_path / "eval"), "--compare", str(out_dir / "hypotheses")])
    scored = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert set(scored["scores"]) == {"bible", "dictionary"} and set(scored["ood_scores"]) == {"software_ood"}
    for name, scores in {**scored["scores"], **scored["ood_scores"]}.items():
        assert scores["bleu"] == pytest.approx(results[f"eval_{name}_bleu"]), name
        compared = scored["significance"]["corpora"][name]["bleu"]
        assert compared["baseline"] == pytest.approx(compared["system"]), name


def test_a_time_budget_leaves_the_step_schedule_alone_while_the_run_keeps_pace(tmp_path):
    """A budget the run stays within must not touch the learning rate, so the run reproduces step for step."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    config = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"), max_steps=6, warmup_steps=2,
                          lr_scheduler_type="linear", eval_corpus_specs=[], max_eval_examples=2)
    assert cli.main(["--config", str(config), "--max_train_minutes", "30"]) == 0
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    logged = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=6)
    expected = []
    for _ in range(6):  # the Trainer logs the rate each step trained with
        expected.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    assert state["global_step"] == 6
    assert logged == pytest.approx(expected, rel=1e-12, abs=0)


def test_a_time_budget_only_stops_and_resume_gets_the_rest_of_it(tmp_path, capsys):
    """The budget never steers the learning rate; the time it has used is checkpointed, so a resumed run gets
    what is left of it (not a fresh budget), and `--resume_from_checkpoint True` skips a torn checkpoint."""
    out = tmp_path / "out"
    config = write_recipe(tmp_path / "r.yaml", output_dir=str(out), max_steps=4, warmup_steps=0,
                          lr_scheduler_type="linear", save_strategy="steps", save_steps=2, eval_corpus_specs=[],
                          max_eval_examples=2)
    assert cli.main(["--config", str(config), "--max_train_minutes", "30", "--max_steps", "4"]) == 0
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    spent = saved["stateful_callbacks"]["TimeBudgetCallback"]["args"]["spent_seconds"]
    assert spent > 0
    (out / "checkpoint-4" / "trainer_state.json").unlink()  # a save torn by a kill: resume must skip it
    (out / "checkpoint-9").mkdir()  # an empty folder left by a kill while saving
    capsys.readouterr()

    # A budget already used up by the first two steps: the resumed run stops after its first step (step 3).
    budget_minutes = spent / 2 / 60
    assert cli.main(["--config", str(config), "--max_train_minutes", repr(budget_minutes),
                     "--resume_from_checkpoint", "True", "--max_steps", "4"]) == 0
    printed = capsys.readouterr().err  # uat-hf's progress messages
    assert "time budget" in printed and "reached at step 3" in printed
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    # The learning rate of step 3 is the linear schedule's for 4 steps, untouched by the clock.
    rates = {entry["step"]: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}
    assert rates[3] == pytest.approx(3e-3 * (4 - 2) / 4, rel=1e-12)


@pytest.mark.parametrize(
    "changes, argv, message",
    [
        ({}, ["--strategy", "sometimes"], "Unknown strategy 'sometimes'"),
        ({"direction": "sideways"}, [], "direction must be one of"),
        ({}, ["--eval_split", "validation"], "eval_split must be one of"),
        ({"learning_rat": 0.1}, [], "'learning_rat' (did you mean 'learning_rate'?)"),
        ({}, ["--corpora", "bible", "poetry"], "Corpus 'poetry' not found"),
        ({}, ["--model_name_or_path", "huge"], "model_name_or_path 'huge' is not a preset"),
        ({}, ["--corpus_dir", "no/such/dir"], "corpus_dir 'no/such/dir' is not a directory"),
        ({}, ["--max_source_length", "4096"], "max_source_length=4096 exceeds the model's max_position_embeddings"),
        ({"corpus_specs": [{"name": "x", "source_lang": "en", "target_lang": "de", "colour": "red"}]}, [],
         "unknown field(s) ['colour']"),
        ({}, ["--max_train_minutes", "0"], "max_train_minutes must be > 0"),
    ],
)
def test_bad_input_fails_before_training_and_names_the_field(tmp_path, capsys, monkeypatch, changes, argv, message):
    from uat_hf.training.uat_trainer import UATTrainer  # uat_hf.cli.train imports it when it runs, not at import time

    monkeypatch.setattr(UATTrainer, "train", lambda *a, **k: pytest.fail("training started"))
    fields = {**TINY, "output_dir": str(tmp_path / "out"), **changes}
    if "corpus_specs" in changes:
        fields.pop("corpus_dir")
        fields.pop("corpora")
    config = tmp_path / "r.yaml"
    config.write_text(yaml.safe_dump(fields))
    assert cli.main(["--config", str(config), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("uat-train: error:") and message in err
    assert not (tmp_path / "out" / "eval_results.json").exists()


def test_argparse_type_errors_name_the_flag(tmp_path, capsys):
    config = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--config", str(config), "--mc_samples", "many"])
    assert exit_info.value.code == 2
    assert "--mc_samples/--mc-samples: invalid int value: 'many'" in capsys.readouterr().err


def test_help_lists_the_three_groups(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "--config" in text
    assert "data (uat_hf.cli.DataArguments)" in text and "model (uat_hf.cli.ModelArguments)" in text
