"""End to end: benchmarks/reproduction.py on the bundled sample, tiny model, a few steps.

Checks what the study depends on: per-run results JSON, the results page with both setups, a PNG of p over
training for the dynamic strategy, and that a second invocation skips finished runs instead of retraining.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from uat_hf.corpora import BUNDLED_DIR

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduction.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("reproduction_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reproduction():
    return _load_script()


def _argv(tmp_path: Path) -> list[str]:
    return [
        "--data-dir", str(BUNDLED_DIR / "multidomain-en-de"), "--setup", "multidomain",
        "--out", str(tmp_path / "out"), "--docs", str(tmp_path / "docs" / "results.md"),
        "--preset", "tiny", "--steps", "6", "--update-every", "3", "--save-every", "3",
        "--strategies", "proportional", "multiuat-enteos", "--seeds", "1",
        "--max-train-examples", "120", "--eval-sentences", "6", "--vocab-size", "400",
        "--max-tokens", "600", "--mc-samples", "2", "--dev-batch-tokens", "200", "--max-new-tokens", "12",
        "--max-length", "48", "--significance-samples", "50",
    ]


def test_end_to_end_then_skip(reproduction, tmp_path, capsys):
    argv = _argv(tmp_path)
    assert reproduction.main(argv) == 0
    first = capsys.readouterr().out
    assert "Estimated total" in first

    out = tmp_path / "out" / "multidomain"
    results = {}
    for strategy in ("proportional", "multiuat-enteos"):
        path = out / strategy / "seed1" / "results.json"
        assert path.is_file(), f"no results for {strategy}"
        data = json.loads(path.read_text())
        results[strategy] = (path, path.stat().st_mtime_ns, data)
        assert data["strategy"] == strategy and data["seed"] == 1
        assert set(data["test"]) == {"software", "descriptions", "bible", "dictionary"}
        assert data["steps_done"] == 6
        assert data["train_seconds"] > 0 and data["machine"]["torch"]
        assert abs(sum(data["final_probabilities"].values()) - 1) < 1e-6
        assert not list((out / strategy / "seed1").glob("checkpoint-*")), "checkpoints of a finished run are removed"
        hyps = (out / strategy / "seed1" / "hyp" / "bible.txt").read_text().splitlines()
        assert len(hyps) == 6
    # The static run keeps its prior; the dynamic one recorded its updates (steps 3 and 6).
    static = results["proportional"][2]
    assert static["initial_probabilities"] == static["final_probabilities"]
    history = (out / "multiuat-enteos" / "seed1" / "balancing_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [3, 6]
    # One tokenizer per setup, shared by the runs.
    assert (out / "prepared" / "tokenizer" / "tokenizer.json").is_file()

    page = (tmp_path / "docs" / "results.md").read_text()
    png = tmp_path / "docs" / "figures" / "multidomain_multiuat-enteos_p.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "figures/multidomain_multiuat-enteos_p.png" in page
    assert "MultiUAT (enteos)" in page and "proportional (τ=1)" in page
    assert "paired bootstrap" in page and "concatenation" in page
    assert "Multilingual X→English" in page and "Not run yet" in page  # the other setup is marked missing
    assert "## Machine" in page and "torch" in page

    # Second invocation: nothing is retrained (results untouched), the page is rebuilt.
    assert reproduction.main(argv) == 0
    second = capsys.readouterr().out
    assert second.count("finished earlier, skipping") == 2
    assert "training (6 steps" not in second
    for path, mtime, _ in results.values():
        assert path.stat().st_mtime_ns == mtime
    assert "reusing the prepared tokenizer" in second

    # An interrupted run (a checkpoint, no results.json) resumes from that checkpoint instead of starting over:
    # simulated by a run stopped after its step-4 checkpoint (results.json removed), then continued to step 6.
    run = out / "multiuat-enteos" / "seed1"
    shutil.rmtree(run)
    short = list(argv)
    short[short.index("--steps") + 1] = "4"  # update_every must stay below max_steps
    assert reproduction.main(short + ["--strategies", "multiuat-enteos", "--keep-checkpoints"]) == 0
    assert [c.name for c in run.glob("checkpoint-*")] == ["checkpoint-4"]
    (run / "results.json").unlink()
    capsys.readouterr()
    assert reproduction.main(argv + ["--strategies", "multiuat-enteos"]) == 0
    assert "resuming from the last checkpoint" in capsys.readouterr().out
    data = json.loads((run / "results.json").read_text())
    assert data["resumed"] is True and data["steps_done"] == 6
    history = (run / "balancing_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [3, 6]

    # A missing seed is marked on the page, not silently dropped.
    assert reproduction.main(argv[:-2] + ["--significance-samples", "50", "--dry-run", "--seeds", "1", "2"]) == 0
    page = (tmp_path / "docs" / "results.md").read_text()
    assert "(1/2)" in page and "proportional/seed2" in page


def test_changed_data_settings_are_refused(reproduction, tmp_path):
    argv = _argv(tmp_path) + ["--dry-run"]
    assert reproduction.main(argv) == 0
    changed = [a if a != "400" else "500" for a in argv]  # another vocabulary = another tokenizer
    with pytest.raises(SystemExit, match="other data settings"):
        reproduction.main(changed)


def test_strategy_names(reproduction):
    assert reproduction.parse_strategy("temperature") == {"strategy": "temperature"}
    assert reproduction.parse_strategy("multiuat-exptp") == {"strategy": "multiuat", "measure": "exptp"}
    assert reproduction.canonical_strategy("multiuat") == "multiuat-enteos"
    with pytest.raises(SystemExit):
        reproduction.parse_strategy("multiuat-bogus")
    assert reproduction.normalized_entropy([0.25] * 4) == pytest.approx(1.0)
    assert reproduction.normalized_entropy([1.0, 0.0]) == pytest.approx(0.0)


def test_runs_unpacked_without_prepared_data_are_prepared_again(reproduction, tmp_path, capsys):
    """An archive of finished runs keeps meta.json and the test sets, not the tokenizer and tokenized data; the data
    directory may also sit elsewhere. Preparing again must give the same corpora and vocabulary, or refuse."""
    argv = _argv(tmp_path) + ["--dry-run"]
    assert reproduction.main(argv) == 0
    prepared = tmp_path / "out" / "multidomain" / "prepared"
    meta = json.loads((prepared / "meta.json").read_text())
    tokenizer = (prepared / "tokenizer" / "tokenizer.json").read_text()
    for folder in ("tokenizer", "train", "dev"):
        shutil.rmtree(prepared / folder)
    moved = tmp_path / "moved-data"
    shutil.copytree(BUNDLED_DIR / "multidomain-en-de", moved)
    moved_argv = list(argv)
    moved_argv[moved_argv.index("--data-dir") + 1] = str(moved)
    capsys.readouterr()
    assert reproduction.main(moved_argv) == 0
    assert "preparing them again" in capsys.readouterr().out
    assert (prepared / "tokenizer" / "tokenizer.json").read_text() == tokenizer
    again = json.loads((prepared / "meta.json").read_text())
    keys = ("corpora", "train_sizes", "vocab_size")
    assert {k: again[k] for k in keys} == {k: meta[k] for k in keys}
    assert (prepared / "train" / "bible").is_dir()

    # Other data under the same runs: refused before anything is written.
    shutil.rmtree(prepared / "tokenizer")
    bible = moved / "bible.train.jsonl.gz"
    bible.unlink()
    shutil.copy(BUNDLED_DIR / "multidomain-en-de" / "dictionary.train.jsonl.gz", bible)
    with pytest.raises(SystemExit, match="other .*than the finished runs"):
        reproduction.main(moved_argv)
    assert json.loads((prepared / "meta.json").read_text()) == again
    assert not (prepared / "tokenizer").exists()
