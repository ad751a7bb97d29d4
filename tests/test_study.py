"""The study path: the library pieces a study needs (``train_fraction``, ``strategy: multiuat-<measure>``,
``uat-train`` rerun on a run whose training finished), and the driver and report of ``benchmarks/``."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from uat_hf.cli import train as cli
from uat_hf.cli.arguments import DataArguments
from uat_hf.cli.train_data import keep_fraction
from uat_hf.uat_config import UATConfig

BUNDLED = {"corpus_dir": "bundled:multidomain-en-de", "source_lang": "en", "target_lang": "de"}


# ----------------------------------------------------------------------------------- strategy: multiuat-<measure>


def test_multiuat_measure_spelling_is_strategy_plus_measure(tmp_path):
    config = UATConfig(output_dir=str(tmp_path), strategy="multiuat-entsent")
    assert (config.strategy, config.measure) == ("multiuat", "entsent")
    assert UATConfig(output_dir=str(tmp_path), strategy="multiuat-exptp", measure="exptp").measure == "exptp"
    assert UATConfig(output_dir=str(tmp_path), strategy="multiuat").measure == "enteos"  # the default measure


def test_multiuat_measure_spelling_refuses_another_measure_and_unknown_ones(tmp_path):
    with pytest.raises(ValueError, match="names measure 'entsent', but measure is 'enteos'"):
        UATConfig(output_dir=str(tmp_path), strategy="multiuat-entsent", measure="enteos")
    with pytest.raises(ValueError, match="Unknown measure 'bogus' \\(from strategy 'multiuat-bogus'\\)"):
        UATConfig(output_dir=str(tmp_path), strategy="multiuat-bogus")


def test_uat_train_saves_the_two_fields_a_multiuat_measure_strategy_stands_for(tmp_path):
    training, *_, effective = cli.parse_arguments(
        ["--output_dir", str(tmp_path), "--strategy", "multiuat-exptp", *_flags(BUNDLED)])
    assert (training.strategy, training.measure) == ("multiuat", "exptp")
    assert (effective["strategy"], effective["measure"]) == ("multiuat", "exptp")  # what recipe.yaml will say


# ----------------------------------------------------------------------------------- train_fraction


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, math.nan])
def test_train_fraction_outside_zero_one_is_refused(fraction):
    with pytest.raises(ValueError, match=r"train_fraction must be in \(0, 1\]"):
        DataArguments(**BUNDLED, train_fraction=fraction)


def test_train_fraction_and_max_train_examples_together_are_refused():
    with pytest.raises(ValueError, match="train_fraction .* or max_train_examples .* not both"):
        DataArguments(**BUNDLED, train_fraction=0.5, max_train_examples=100)


def test_keep_fraction_keeps_size_ratios_the_same_rows_for_any_seed_and_nested_subsets():
    from datasets import Dataset

    corpora = {name: Dataset.from_dict({"row": list(range(size))}) for name, size in (("big", 4000), ("small", 1000))}
    half, tenth = keep_fraction(corpora, 0.5), keep_fraction(corpora, 0.1)
    assert {n: len(d) for n, d in half.items()} == {"big": 2000, "small": 500}
    assert {n: len(d) for n, d in tenth.items()} == {"big": 400, "small": 100}
    rows = half["big"]["row"]
    assert rows == sorted(rows) and rows != list(range(2000))  # a random subset, in file order, not a prefix
    assert keep_fraction(corpora, 0.5)["big"]["row"] == rows  # the same rows every time
    assert set(tenth["big"]["row"]) <= set(rows)  # a smaller fraction keeps a subset of a larger one
    assert len(keep_fraction({"one": corpora["small"].select([0])}, 0.01)["one"]) == 1  # never empty


# ----------------------------------------------------------------------------------- uat-train on a finished run

TINY = {
    **BUNDLED,
    "strategy": "multiuat-entsent", "mc_samples": 2, "update_every": 1, "dev_batch_tokens": 200,
    "corpora": ["bible", "dictionary"], "train_fraction": 0.02, "max_eval_examples": 4,
    "max_source_length": 32, "max_target_length": 32, "model_name_or_path": "tiny", "vocab_size": 300,
    "tokenizer_max_sentences": 300, "max_steps": 3, "max_tokens": 400, "learning_rate": 3e-3, "logging_steps": 1,
    "save_strategy": "steps", "save_steps": 2, "eval_strategy": "no", "generation_num_beams": 1,
    "generation_max_length": 8, "per_device_eval_batch_size": 8, "use_cpu": True, "seed": 0, "report_to": "none",
    "disable_tqdm": True,
}


def _flags(fields: dict) -> list[str]:
    return [item for key, value in fields.items() for item in (f"--{key}", str(value))]


def test_uat_train_rerun_after_training_finished_evaluates_the_last_checkpoint(tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "run"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**TINY, "output_dir": str(out)}))
    assert cli.main(["--config", str(recipe)]) == 0
    first = capsys.readouterr().out
    # train_fraction 0.02 of bible (8,867 pairs after cleaning) and dictionary (4,527): ratios kept, sizes printed
    assert "train_fraction 0.02: bible keeps 177 of 8867" in first and "dictionary keeps 91 of 4527" in first
    saved = yaml.safe_load((out / "recipe.yaml").read_text())
    assert (saved["strategy"], saved["measure"]) == ("multiuat", "entsent")
    scores = json.loads((out / "eval_results.json").read_text())
    history = (out / "balancing_history.jsonl").read_text()
    log_history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert (out / "checkpoint-3").is_dir()  # the Trainer saves at max_steps

    # The evaluation is "interrupted": its outputs and the final model are gone, the checkpoint at step 3 stays.
    for name in ("eval_results.json", "model.safetensors", "trainer_state.json"):
        (out / name).unlink()
    assert cli.main(["--config", str(recipe), "--resume_from_checkpoint", "latest"]) == 0
    second = capsys.readouterr().out
    assert "checkpoint-3 is already at max_steps=3: training is done, evaluating its model" in second
    again = json.loads((out / "eval_results.json").read_text())
    assert _scores(again) == _scores(scores) and "eval_bible_loss" in scores  # the loss tells the weights apart
    final, checkpoint = load_file(out / "model.safetensors"), load_file(out / "checkpoint-3" / "model.safetensors")
    assert all(torch.equal(final[key], checkpoint[key]) for key in checkpoint)
    # The log history as the checkpoint saved it: every training entry, but not the run's summary (train_loss),
    # which the Trainer logs after its last save and writes to train_results.json.
    assert "train_loss" in log_history[-1]
    assert json.loads((out / "trainer_state.json").read_text())["log_history"] == log_history[:-1]
    assert (out / "balancing_history.jsonl").read_text() == history


def _scores(metrics: dict) -> dict:
    """The metrics that do not depend on timing."""
    return {k: v for k, v in metrics.items() if not k.endswith(("runtime", "per_second", "preparation_time"))}
