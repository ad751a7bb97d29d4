"""One parser for the three tools: a quick ``--help``, typed recipe values, a saved recipe that repeats the run,
and ``uat-evaluate --config`` reading a recipe's test sets as ``uat-train`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from uat_hf.cli import evaluate, train
from uat_hf.cli.recipe import Recipe
from uat_hf.cli.train_data import build_specs, evaluation_specs

RECIPES = sorted((Path(__file__).parent.parent / "recipes").glob("*.yaml"))
ROOT = str(Path(__file__).parent.parent)


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


# ------------------------------------------------------------------------------------------------ --help


@pytest.mark.parametrize("tool, argv, flag", [("train", ["--help"], "--corpus_dir"),
                                             ("plot", ["--help"], "--plot_dir"),
                                             ("evaluate", ["--help"], "--torch_num_threads")])
def test_help_imports_neither_torch_nor_the_models(tool, argv, flag):
    """--help answers from the argument classes alone: torch, the models and datasets (about a second of a 2 s help
    on its own; docs/benchmarks.md) are not imported."""
    code = (f"import sys\nfrom uat_hf.cli.{tool} import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in sys.modules if m in ('torch', 'datasets') "
            "or m.startswith('transformers.models')))")
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout[-300:]
    assert flag in done.stdout


def test_uat_train_help_is_our_fields_and_one_line_for_the_trainers():
    done = run_python("from uat_hf.cli.train import main\nmain(['--help'])")
    text = done.stdout
    assert "--strategy" in text and "--corpus_dir" in text and "--learning_rate" not in text
    assert "uat-train --help-all" in " ".join(text.split())
    assert len(text.splitlines()) < 400  # was 783 with the Trainer's fields


def test_uat_plot_draws_a_run_without_torch(tmp_path):
    history = {"step": 10, "strategy": "multiuat", "measure": "enteos", "rewards": {"a": 0.2, "b": 0.4},
               "probabilities": {"a": 0.6, "b": 0.4}, "seconds": 0.1}
    (tmp_path / "balancing_history.jsonl").write_text(json.dumps(history) + "\n")
    done = run_python("import sys\nfrom uat_hf.cli.plot import main\n"
                      f"main([{str(tmp_path)!r}])\nprint('TORCH', 'torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert "TORCH False" in done.stdout and list(tmp_path.glob("*.png"))


# ------------------------------------------------------------------------------------------------ YAML types


def write_recipe(path: Path, **changes) -> Path:
    fields = {"corpus_dir": "bundled:multidomain-en-de", "source_lang": "en", "target_lang": "de",
              "strategy": "multiuat", "max_steps": 10, "update_every": 2, "report_to": "none", **changes}
    path.write_text(yaml.safe_dump(fields))
    return path


@pytest.mark.parametrize("field, value, expected", [
    ("update_every", 2.5, "update_every must be an integer, got 2.5 (float)"),
    ("max_steps", 4.9, "max_steps must be an integer, got 4.9 (float)"),
    ("mc_samples", True, "mc_samples must be an integer, got True (bool)"),
    ("mix_corpora", 1, "mix_corpora must be a bool (true or false), got 1 (int)"),
    ("eval_strategy", False, "eval_strategy must be one of"),  # YAML's unquoted `no`
    ("max_train_examples", [3], "max_train_examples must be an integer"),
])
def test_a_recipe_value_of_the_wrong_yaml_type_is_refused_naming_field_and_type(tmp_path, capsys, field, value,
                                                                                 expected):
    config = write_recipe(tmp_path / "r.yaml", **{field: value})
    assert train.main(["--config", str(config), "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("uat-train: error:") and expected in err, err
    assert str(config) in err


def test_recipe_values_of_a_fitting_yaml_type_are_converted_as_the_command_line_does(tmp_path):
    config = write_recipe(tmp_path / "r.yaml", learning_rate=1, warmup_steps="3", mix_corpora=True,
                          scorer_lr="1e-3")
    training, *_ = train.parse_arguments(["--config", str(config), "--output_dir", str(tmp_path / "out")])
    assert training.learning_rate == 1.0 and isinstance(training.learning_rate, float)
    assert training.warmup_steps == 3 and training.mix_corpora is True and training.scorer_lr == 1e-3


# ------------------------------------------------------------------------------------------------ saved recipe


def test_the_saved_recipe_holds_what_the_run_needs_with_paths_that_resolve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpora").mkdir()
    for name in ("bible", "software"):
        (tmp_path / "corpora" / f"{name}.train.jsonl").write_text('{"source": "a", "target": "b"}\n')
    config = write_recipe(tmp_path / "r.yaml", corpus_dir="corpora", model_name_or_path="small",
                          eval_strategy="no")
    *_, recipe = train.parse_arguments(["--config", str(config), "--output_dir", "runs/x", "--seed", "7"])
    # Only what was set (recipe and command line) or differs from a default: no Trainer defaults.
    assert set(recipe) == {"corpus_dir", "source_lang", "target_lang", "strategy", "max_steps", "update_every",
                           "report_to", "model_name_or_path", "eval_strategy", "output_dir", "seed"}
    assert recipe["corpus_dir"] == str(tmp_path / "corpora")  # absolute: resolves from any directory
    assert recipe["output_dir"] == str(tmp_path / "runs" / "x")
    assert recipe["model_name_or_path"] == "small" and recipe["seed"] == 7
    saved = Recipe(recipe).save_pretrained(tmp_path / "saved")
    monkeypatch.chdir(tmp_path / "saved")
    again = train.parse_arguments(["--config", str(saved)])
    first = train.parse_arguments(["--config", str(config), "--output_dir", str(tmp_path / "runs" / "x"),
                                   "--seed", "7", "--corpus_dir", str(tmp_path / "corpora")])
    assert again[:4] == first[:4]


# ------------------------------------------------------------------------------------------------ uat-evaluate


def resolved(specs):
    return [(s.name, s.source_lang, s.target_lang, s.format, s.path, s.split_location("test"), s.revision,
             s.data_files, s.max_examples) for s in specs]


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_uat_evaluate_config_resolves_the_test_sets_uat_train_evaluates(recipe, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    trained = train.parse_arguments(["--config", str(recipe)])
    data_train = trained[1]
    data_eval, evaluate_args = evaluate.parse_arguments([str(model), "--config", str(recipe)])
    # uat-train's final evaluation: its training corpora that have eval_split, then eval_corpus_specs.
    specs, eval_only = build_specs(data_train)
    split = data_train.eval_split
    train_sets = [s for s in specs if s.split_location(split) is not None] + eval_only
    in_domain, ood = evaluation_specs(data_eval)
    assert resolved(in_domain + ood) == resolved(train_sets)
    assert data_eval.language_tags == data_train.language_tags
    assert data_eval.language_codes == data_train.language_codes
    assert evaluate_args.generation_num_beams == trained[0].generation_num_beams
    assert evaluate_args.model_name_or_path == str(model)  # the recipe's model is what training started from
