"""Balancing plots: written from synthetic histories and from a real short MultiDDS-S run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from uat_hf.cli.plot import main as plot_main
from uat_hf.evaluation.plotting import (
    COSINE_PNG,
    PROBABILITIES_PNG,
    REWARDS_PNG,
    average_cosine,
    corpus_curves,
    load_history,
    plot_cosine_heatmap,
    plot_probabilities,
    plot_run,
)
from uat_hf.utils.checkpoints import HISTORY_FILE

NAMES = ["software", "bible", "dictionary"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plotting_and_the_run_file_names_load_without_torch():
    """Reading a run's output needs neither torch nor the Trainer: uat_hf imports its names lazily, the file
    names live in uat_hf.utils.checkpoints, and plotting imports no callback."""
    code = ("import sys, uat_hf.evaluation.plotting, uat_hf.utils.checkpoints; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def record(step, p, cosine=None, **extra):
    """A history record as the distribution writes it: the common fields, the strategy's own under its name."""
    own = {"measure": "enteos", "rewards": dict(zip(NAMES, [0.3, 0.5, 0.2]))}
    rec = {"step": step, "strategy": "multiuat", "probabilities": dict(zip(NAMES, p)), "seconds": 0.1, **extra}
    if cosine is not None:
        rec["strategy"] = "multidds-s"
        own = {"rewards": own["rewards"], "cosine": np.asarray(cosine).tolist()}
    rec[rec["strategy"]] = own
    return rec


def write_history(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / HISTORY_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def assert_png(path, min_side=200):
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width = imread(path).shape[:2]
    assert height >= min_side and width >= min_side


def test_probabilities_plot_is_a_png(tmp_path):
    records = [record(100 * i, [0.5 - 0.05 * i, 0.3, 0.2 + 0.05 * i]) for i in range(1, 6)]
    records[2]["skipped"] = "non-finite reward"
    run = write_history(tmp_path / "run", records)
    path = plot_probabilities(run, tmp_path / "plots" / "p.png")
    assert path == tmp_path / "plots" / "p.png"
    assert_png(path)


def test_probability_curves_start_at_the_prior_at_step_0():
    prior = dict(zip(NAMES, [0.6, 0.3, 0.1]))
    records = [record(25 * i, [0.5, 0.3, 0.2], prior=prior) for i in (1, 2)]
    curves = corpus_curves(records)
    assert curves["software"] == ([0, 25, 50], [0.6, 0.5, 0.5])
    assert curves["dictionary"] == ([0, 25, 50], [0.1, 0.2, 0.2])
    assert corpus_curves(records, "rewards")["bible"] == ([25, 50], [0.5, 0.5])  # no reward before step 1
    # A history written before records carried the prior still plots, from its first update.
    assert corpus_curves([record(25, [0.5, 0.3, 0.2])])["software"] == ([25], [0.5])
    # ... and one written before the strategy's fields moved under its name (the study's archives) too.
    flat = {"step": 25, "strategy": "multiuat", "measure": "enteos", "rewards": dict(zip(NAMES, [0.3, 0.5, 0.2])),
            "probabilities": dict(zip(NAMES, [0.5, 0.3, 0.2])), "seconds": 0.1}
    assert corpus_curves([flat], "rewards")["bible"] == ([25], [0.5])


def test_a_static_run_plots_its_p_from_its_one_record_at_step_0(tmp_path):
    p = dict(zip(NAMES, [0.6, 0.3, 0.1]))
    run = write_history(tmp_path / "run", [{"step": 0, "strategy": "proportional", "prior": p, "probabilities": p,
                                            "seconds": 0.0, "proportional": {}}])
    assert corpus_curves(run)["software"] == ([0], [0.6])
    assert [path.name for path in plot_run(run)] == [PROBABILITIES_PNG]  # no rewards to draw


def test_average_cosine_is_the_elementwise_mean_of_finite_matrices():
    a = [[1.0, 0.2, -0.1], [0.0, 0.5, 0.25], [0.3, -0.3, 0.9]]
    b = [[0.0, 0.4, 0.1], [0.5, 0.5, 0.75], [0.1, 0.3, 0.1]]
    broken = [[math.nan, 0, 0], [0, 0, 0], [0, 0, 0]]
    history = [
        record(1, [0.4, 0.3, 0.3], cosine=a),
        record(2, [0.4, 0.3, 0.3]),  # no cosine (e.g. another strategy's record): not counted
        record(3, [0.4, 0.3, 0.3], cosine=broken, skipped="non-finite"),
        record(4, [0.4, 0.3, 0.3], cosine=b),
    ]
    names, mean, count = average_cosine(history)
    assert names == NAMES and count == 2
    np.testing.assert_array_equal(mean, (np.array(a) + np.array(b)) / 2)
    assert mean[1, 2] == 0.5  # row = train corpus 'bible', column = dev corpus 'dictionary'


def test_average_cosine_rejects_histories_it_cannot_average():
    with pytest.raises(ValueError, match="only multidds-s runs"):
        average_cosine([record(1, [0.4, 0.3, 0.3])])
    with pytest.raises(ValueError, match="expected \\(3, 3\\)"):
        average_cosine([record(1, [0.4, 0.3, 0.3], cosine=[[1.0, 0.0], [0.0, 1.0]])])
    other = record(2, [0.4, 0.3, 0.3], cosine=np.eye(3))
    other["probabilities"] = {"a": 0.4, "b": 0.3, "c": 0.3}
    with pytest.raises(ValueError, match="one history must come from one run"):
        average_cosine([record(1, [0.4, 0.3, 0.3], cosine=np.eye(3)), other])


def test_plot_run_adds_the_heatmap_only_for_cosine_records(tmp_path):
    uat = write_history(tmp_path / "uat", [record(s, [0.4, 0.3, 0.3]) for s in (10, 20)])
    assert [p.name for p in plot_run(uat)] == [PROBABILITIES_PNG, REWARDS_PNG]
    dds = write_history(tmp_path / "dds", [record(s, [0.4, 0.3, 0.3], cosine=np.eye(3) * s) for s in (10, 20)])
    written = plot_run(dds, tmp_path / "figures")
    assert [p.name for p in written] == [PROBABILITIES_PNG, REWARDS_PNG, COSINE_PNG]
    for path in written:
        assert path.parent == tmp_path / "figures"
        assert_png(path)


def test_missing_or_empty_history_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="dynamic strategy \\(multiuat or multidds-s\\)"):
        plot_run(tmp_path)
    (tmp_path / HISTORY_FILE).write_text("")
    with pytest.raises(ValueError, match="no update record yet"):
        load_history(tmp_path)


def test_cli_writes_the_plots_and_reports_errors(tmp_path, capsys):
    run = write_history(tmp_path / "run", [record(s, [0.4, 0.3, 0.3], cosine=np.eye(3)) for s in (5, 10)])
    plot_main([str(run), "--plot_dir", str(tmp_path / "out")])
    written = capsys.readouterr().out.split()
    assert [Path(p).name for p in written] == [PROBABILITIES_PNG, REWARDS_PNG, COSINE_PNG]
    assert all(Path(p).parent == tmp_path / "out" and Path(p).is_file() for p in written)
    # The run directory by name, as uat-train calls it; PNGs go beside the history by default.
    plot_main(["--output_dir", str(run)])
    assert [Path(p).parent for p in capsys.readouterr().out.split()] == [run] * 3
    with pytest.raises(SystemExit) as exit_info:
        plot_main([str(tmp_path / "empty")])
    assert exit_info.value.code == 2
    assert "uat-plot: error: No balancing history" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "uat-plot: error: output_dir is missing"),
        (["run", "--out", "x"], "uat-plot: error: unrecognized arguments: --out x"),  # now --plot_dir
        (["run", "--output_dir", "other"], "uat-plot: error: output_dir given twice"),
    ],
)
def test_cli_argument_errors_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        plot_main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_real_multidds_run_plots_its_cosine_heatmap(tmp_path, corpora, tokenizer, tiny_model):
    from uat_hf.training.uat_config import UATConfig
    from uat_hf.training.uat_trainer import UATTrainer

    args = UATConfig(
        output_dir=str(tmp_path / "run"), strategy="multidds-s", max_steps=2, update_every=1, max_tokens=300,
        dev_batch_tokens=64, strategy_settings={"train_batch_tokens": 64}, scorer_steps=5, report_to=[],
        save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
    )
    train = {name: ds.select(range(60)) for name, ds in corpora["train"].items()}
    UATTrainer(tiny_model, args, train_corpora=train, dev_corpora=corpora["dev"], processing_class=tokenizer).train()
    names, mean, count = average_cosine(tmp_path / "run")
    assert names == list(train) and count == 2
    # The p curves start at step 0 at the run's prior (proportional to the corpus sizes), then follow the updates.
    history = load_history(tmp_path / "run")
    sizes = {name: len(ds) for name, ds in train.items()}
    for name, (steps, values) in corpus_curves(tmp_path / "run").items():
        assert steps == [0, 1, 2]
        assert values[0] == pytest.approx(sizes[name] / sum(sizes.values()))
        assert values[1:] == [record["probabilities"][name] for record in history]
    assert np.all(np.abs(mean) <= 1.0 + 1e-6)
    written = plot_run(tmp_path / "run")
    assert [p.name for p in written] == [PROBABILITIES_PNG, REWARDS_PNG, COSINE_PNG]
    for path in written:
        assert_png(path)
    assert_png(plot_cosine_heatmap(tmp_path / "run" / HISTORY_FILE, tmp_path / "again.png"))


def test_uat_plot_of_two_runs_overlays_a_static_baseline_and_a_learned_run(tmp_path, corpora, tokenizer, capsys):
    """Two tiny real runs, one proportional (a step-0 record only) and one multiuat: ``uat-plot A B`` draws both runs'
    p on one chart, the static one as a flat line from its step-0 p to the learned run's last step."""
    from uat_hf.evaluation.plotting import COMPARISON_PNG, probability_comparison_figure
    from uat_hf.models.presets import build_model
    from uat_hf.training.uat_config import UATConfig
    from uat_hf.training.uat_trainer import UATTrainer

    train = {name: ds.select(range(60)) for name, ds in corpora["train"].items()}
    for name, strategy in (("proportional", "proportional"), ("learned", "multiuat")):
        dynamic = {"measure": "exptp", "mc_samples": 2, "update_every": 1} if strategy == "multiuat" else {}
        args = UATConfig(output_dir=str(tmp_path / name), strategy=strategy, max_steps=3, max_tokens=300,
                         report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, **dynamic)
        UATTrainer(build_model("tiny", tokenizer), args, train_corpora=train, dev_corpora=corpora["dev"],
                   processing_class=tokenizer).train()
    runs = [str(tmp_path / "proportional"), str(tmp_path / "learned")]
    capsys.readouterr()
    figure = probability_comparison_figure(runs)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert set(lines) == {f"{run}: {name}" for run in ("proportional (proportional)", "learned (multiuat)")
                          for name in train}
    prior = load_history(tmp_path / "proportional")[0]["probabilities"]
    learned = load_history(tmp_path / "learned")
    for name in train:
        flat = lines[f"proportional (proportional): {name}"]
        assert list(flat.get_xdata()) == [0, 3] and list(flat.get_ydata()) == [prior[name]] * 2
        curve = lines[f"learned (multiuat): {name}"]
        assert list(curve.get_xdata()) == [0, 1, 2, 3]
        assert list(curve.get_ydata())[1:] == [record["probabilities"][name] for record in learned]
    plot_main([*runs, "--plot_dir", str(tmp_path / "figures")])
    assert capsys.readouterr().out.split() == [str(tmp_path / "figures" / COMPARISON_PNG)]
    assert_png(tmp_path / "figures" / COMPARISON_PNG)


def test_runs_are_labelled_by_the_path_parts_that_tell_them_apart(tmp_path):
    from uat_hf.evaluation.plotting import distinct_labels

    study = tmp_path / "study"
    assert distinct_labels([study / "multiuat" / "seed1", study / "proportional" / "seed1"]) == [
        "multiuat", "proportional"]  # the basename alone (seed1) named both runs the same
    assert distinct_labels([study / "multiuat" / "seed1", study / "multiuat" / "seed2"]) == ["seed1", "seed2"]
    assert distinct_labels([study / "a" / "seed1", study / "b" / "seed2"]) == ["a/seed1", "b/seed2"]
    assert distinct_labels([study / "a", study / "a" / "b"]) == ["a", "b"]  # nothing left of one: the names
    assert distinct_labels([study / "only"]) == ["only"]
