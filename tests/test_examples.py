"""The examples run end to end with tiny settings, so they cannot drift away from the library."""

from __future__ import annotations

import difflib
import json
import os
import resource
import runpy
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from uat_hf.cli.evaluate import main as evaluate_main
from uat_hf.evaluation.plotting import PROBABILITIES_PNG, REWARDS_PNG
from uat_hf.utils.checkpoints import HISTORY_FILE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY_NOTEBOOK = {
    "UAT_NOTEBOOK_STEPS": "4",
    "UAT_NOTEBOOK_MODEL": "tiny",
    "UAT_NOTEBOOK_MODEL_OVERRIDES": "{}",
    "UAT_NOTEBOOK_TRAIN_EXAMPLES": "200",
    "UAT_NOTEBOOK_EVAL_EXAMPLES": "6",
    "UAT_NOTEBOOK_VOCAB_SIZE": "600",
    "UAT_NOTEBOOK_MC_SAMPLES": "2",
    "UAT_NOTEBOOK_UPDATE_EVERY": "2",
    "UAT_NOTEBOOK_MAX_LENGTH": "16",
}


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    for key, value in {**TINY_NOTEBOOK, "UAT_NOTEBOOK_OUTPUT_DIR": str(tmp_path / "run")}.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    assert "parameters" in notebook.cells[2].metadata.get("tags", [])
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the failing cell, if any cell fails

    stdout = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs
                     if o.output_type == "stream" and o.name == "stdout")
    assert "p after training" in stdout and "mean" in stdout
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert any("image/png" in o.get("data", {}) for cell in code_cells for o in cell.outputs)
    history = [json.loads(line) for line in (tmp_path / "run" / HISTORY_FILE).read_text().splitlines()]
    assert [record["step"] for record in history] == [2, 4]


def run_notebook(tmp_path, monkeypatch, settings):
    """Execute the quickstart headless with these UAT_NOTEBOOK_* settings (the others unset: its defaults); returns
    the executed notebook and the CPU seconds (user + system) of its kernel, a child of this process reaped when
    the client shuts it down."""
    for key in TINY_NOTEBOOK:
        monkeypatch.delenv(key, raising=False)
    for key, value in settings.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the failing cell, if any cell fails
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return notebook, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.slow
def test_quickstart_notebook_runs_with_its_defaults(tmp_path, monkeypatch):
    """The notebook as a reader runs it, with its defaults: 200 steps, 8 balancing updates, 40 test sentences per
    domain. It prints the kernel's CPU time, the measurement examples/README.md reports (1.4 CPU-minutes); a
    speed target is a measurement, not an assertion."""
    notebook, cpu_seconds = run_notebook(tmp_path, monkeypatch, {"UAT_NOTEBOOK_OUTPUT_DIR": str(tmp_path / "run")})
    print(f"quickstart with its defaults: {cpu_seconds:.0f} CPU seconds in the kernel")
    history = [json.loads(line) for line in (tmp_path / "run" / HISTORY_FILE).read_text().splitlines()]
    assert [record["step"] for record in history] == list(range(25, 201, 25))


def test_quickstart_defaults_are_the_timed_demo_model(monkeypatch):
    """The notebook says its defaults take under 2 CPU-minutes because they train the demo recipe's model with its
    batch size for 200 steps on one torch thread and translate 40 sentences per domain (measured by the slow test
    above, examples/README.md); keep them so."""
    for key in TINY_NOTEBOOK:
        monkeypatch.delenv(key, raising=False)
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    defaults: dict = {}
    exec(notebook.cells[2].source, defaults)
    demo = yaml.safe_load((EXAMPLES.parent / "recipes" / "demo.yaml").read_text())
    assert defaults["MODEL"] == demo["model_name_or_path"] and defaults["MODEL_OVERRIDES"] == demo["model_overrides"]
    assert defaults["MAX_TOKENS"] == demo["max_tokens"] and defaults["STEPS"] <= 200
    assert defaults["TRAIN_EXAMPLES"] <= 1000 and defaults["EVAL_EXAMPLES"] <= 40 and defaults["THREADS"] == 1


def test_training_script_runs_under_accelerate_launch(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(EXAMPLES / "accelerate_configs" / "single_cpu.yaml"), str(EXAMPLES / "train_multiuat.py"),
        # uat-train's own flags over its demo recipe (the script's default), shrunk to a tiny model and 4 steps.
        "--output_dir", str(out), "--model_name_or_path", "tiny", "--model_overrides", "{}",
        "--max_train_examples", "200", "--max_eval_examples", "6", "--vocab_size", "600", "--max_source_length", "32",
        "--max_target_length", "32", "--max_steps", "4", "--update_every", "2", "--mc_samples", "2",
        "--max_tokens", "400", "--generation_max_length", "8", "--generation_num_beams", "1",
        "--disable_tqdm", "true", "--seed", "0",
    ]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "test results (per corpus)" in result.stdout and "mean" in result.stdout
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())  # the demo recipe, with the flags on top
    assert recipe["strategy"] == "multiuat" and recipe["measure"] == "entsent" and recipe["max_steps"] == 4
    history = [json.loads(line) for line in (out / HISTORY_FILE).read_text().splitlines()]
    assert [record["step"] for record in history] == [2, 4]
    for name in ("model.safetensors", "tokenizer.json", "eval_results.json", PROBABILITIES_PNG, REWARDS_PNG):
        assert (out / name).is_file(), name

    # What the script saved is what uat-evaluate loads.
    evaluate_main([
        str(out), "--corpus_dir", "bundled:multidomain-en-de", "--source_lang", "en", "--target_lang", "de",
        "--corpora", "bible", "--max_eval_examples", "3", "--max_new_tokens", "4",
        "--output_dir", str(tmp_path / "eval"),
    ])
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert set(results["scores"]) == {"bible"} and results["sentences"] == {"bible": 3}


@pytest.mark.parametrize("name", ["single_cpu", "multi_gpu", "multi_node"])
def test_accelerate_configs_are_valid(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(EXAMPLES / "accelerate_configs" / f"{name}.yaml"))
    assert config.num_processes >= 1 and config.machine_rank == 0
    assert config.use_cpu == (name == "single_cpu")


def _run_script(path: Path, argv: list[str], monkeypatch) -> dict:
    monkeypatch.setattr(sys, "argv", [str(path), *argv])
    namespace = runpy.run_path(str(path), run_name="run_translation_example")
    return namespace["main"]()


def test_run_translation_switches_to_uat_trainer_by_three_lines_and_runs_both_ways(tmp_path, tokenizer, tiny_model,
                                                                                     monkeypatch):
    """The README's claim for a run_translation-style script: the stock script and its UATTrainer twin differ in
    the import, the arguments class and the trainer call only; both run as written on named corpora, and the twin
    trains with the balancing, steered and judged by the per-corpus dev sets given as eval_dataset."""
    stock, uat = (EXAMPLES / "run_translation_stock.py").read_text(), (EXAMPLES / "run_translation.py").read_text()
    code = [text[text.index("from __future__"):].splitlines() for text in (stock, uat)]
    changed = [line for line in difflib.ndiff(*code) if line.startswith("+ ")]
    assert changed == ["+ from uat_hf import UATConfig, UATTrainer",
                       "+     parser = HfArgumentParser((ScriptArguments, UATConfig))",
                       "+     trainer = UATTrainer(model, args, train_dataset=train, **common)"]
    model_dir = tmp_path / "model"
    tiny_model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    common = ["--model_name_or_path", str(model_dir), "--corpora", "bible", "software", "--max_train_samples", "60",
              "--max_eval_samples", "6", "--max_source_length", "24", "--max_target_length", "8", "--use_cpu",
              "--report_to", "none", "--per_device_train_batch_size", "4", "--disable_tqdm", "true"]
    stock_metrics = _run_script(EXAMPLES / "run_translation_stock.py", [
        *common, "--output_dir", str(tmp_path / "stock"), "--max_steps", "2", "--predict_with_generate"], monkeypatch)
    assert {"eval_bible_bleu", "eval_software_gen_len"} <= set(stock_metrics)  # the stock Trainer, one eval per name
    metrics = _run_script(EXAMPLES / "run_translation.py", [
        *common, "--output_dir", str(tmp_path / "uat"), "--max_steps", "4", "--strategy", "multiuat",
        "--mc_samples", "2", "--update_every", "2", "--eval_strategy", "steps", "--eval_steps", "2",
        "--save_steps", "2", "--load_best_model_at_end", "--metric_for_best_model", "mean_bleu"], monkeypatch)
    for name in ("bible", "software"):  # the trainer's sacreBLEU and the script's own BLEU, kept apart
        assert {f"eval_{name}_bleu", f"eval_{name}_user_bleu", f"eval_{name}_gen_len"} <= set(metrics)
    assert {"eval_mean_bleu", "eval_mean_user_bleu", "eval_mean_gen_len"} <= set(metrics)
    history = [json.loads(line) for line in (tmp_path / "uat" / HISTORY_FILE).read_text().splitlines()]
    assert [entry["step"] for entry in history] == [2, 4]  # MultiUAT measured the dev sets taken from eval_dataset
