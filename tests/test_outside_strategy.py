"""A strategy from outside the package works everywhere a built-in one does: found by ``module:Class``, by
``register_strategy`` or by an installed entry point; trained by ``UATTrainer``, checkpointed and resumed bit for
bit, on two processes, recorded in the history and plotted (tests/plugins/dev_loss_strategy.py: p ∝ dev loss)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from plugins.dev_loss_strategy import DevLossShare

from conftest import launch_two_ranks
from uat_hf import register_strategy
from uat_hf.evaluation.plotting import PROBABILITIES_PNG, plot_run
from uat_hf.models.presets import build_model
from uat_hf.strategies import registry
from uat_hf.strategies.registry import available_strategies, get_strategy
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE

HERE = Path(__file__).parent
PLUGIN = "plugins.dev_loss_strategy:DevLossShare"


class RecordingTrainer(UATTrainer):
    """Remembers every batch it trains on."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained_batches = getattr(self, "trained_batches", [])
        self.trained_batches.append(inputs["input_ids"].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def run(corpora, tokenizer, output, resume=None, strategy=PLUGIN):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    args = UATConfig(output_dir=str(output), strategy=strategy, update_every=3, max_steps=11, max_tokens=300,
                     learning_rate=2e-3, warmup_steps=2, dev_batch_tokens=200, save_strategy="steps", save_steps=5,
                     report_to=[], use_cpu=True, seed=7, disable_tqdm=True, logging_steps=1)
    trainer = RecordingTrainer(model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                               processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume)
    history = [json.loads(line) for line in (output / HISTORY_FILE).read_text().splitlines()]
    return trainer, history


def without_seconds(history):
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


def test_an_outside_strategy_trains_resumes_exactly_and_plots(tmp_path, corpora, tokenizer):
    full, history = run(corpora, tokenizer, tmp_path / "full")
    assert [h["step"] for h in history] == [3, 6, 9]
    first = history[0]
    assert list(first) == ["step", "strategy", "prior", "probabilities", "seconds", PLUGIN]
    losses = np.array(list(first[PLUGIN]["dev_loss"].values()))
    np.testing.assert_allclose(list(first["probabilities"].values()), losses / losses.sum())  # p ∝ dev loss
    logged = {entry["step"]: entry for entry in full.state.log_history if "loss" in entry}
    assert logged[3]["balance/dev_loss/bible"] == first[PLUGIN]["dev_loss"]["bible"]
    assert logged[3]["balance/p_bible"] == first["probabilities"]["bible"]
    saved = json.loads((tmp_path / "full" / "checkpoint-5" / BALANCING_STATE_FILE).read_text())
    assert saved["distribution"]["strategy_state"]["smoothed"] is not None  # the strategy's own state is saved

    partial = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-5", partial / "checkpoint-5")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, partial / HISTORY_FILE)  # holds records past step 5
    resumed, resumed_history = run(corpora, tokenizer, partial, resume=True)
    assert resumed.trained_batches == full.trained_batches[5:]
    assert without_seconds(resumed_history) == without_seconds(history)
    assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()
    assert resumed.corpus_sampler.state_dict() == full.corpus_sampler.state_dict()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)

    assert [path.name for path in plot_run(tmp_path / "full")] == [PROBABILITIES_PNG]


def test_an_outside_strategy_is_found_by_registration_and_by_entry_point(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # leave the registry as it was
    register_strategy("dev-loss-share", DevLossShare)
    assert "dev-loss-share" in available_strategies() and get_strategy("dev-loss-share") is DevLossShare
    config = UATConfig(output_dir=str(tmp_path), strategy="dev-loss-share", update_every=2, report_to=[])
    assert config.is_dynamic and config.corpus_distribution({"a": 3, "b": 1}).proposer.names == ["a", "b"]
    with pytest.raises(ValueError, match="'dev-loss-share' is already registered as .*DevLossShare"):
        register_strategy("dev-loss-share", type("Other", (DevLossShare,), {}))

    # An installed package declares it in its metadata: entry point group uat_hf.strategies.
    info = tmp_path / "site" / "loss_share-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loss-share\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[uat_hf.strategies]\nloss-share = {PLUGIN}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "loss-share" in available_strategies()
    assert UATConfig(output_dir=str(tmp_path), strategy="loss-share", report_to=[]).strategy_class is DevLossShare

    with pytest.raises(ValueError, match="Strategy 'plugins.nowhere:Nothing' names no importable class"):
        UATConfig(output_dir=str(tmp_path), strategy="plugins.nowhere:Nothing", report_to=[])
    with pytest.raises(ValueError, match="must be a subclass of uat_hf.strategies.base.BalancingStrategy"):
        UATConfig(output_dir=str(tmp_path), strategy="json:dumps", report_to=[])


def test_a_plugin_that_raises_on_import_breaks_only_the_runs_that_name_it(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    site = tmp_path / "site"
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[uat_hf.strategies]\nbroken = broken_plugin:Strategy\n")
    (site / "broken_plugin.py").write_text("raise RuntimeError('this plugin is broken')\n")
    monkeypatch.syspath_prepend(str(site))
    assert "broken" in available_strategies()  # listed, not imported
    for strategy in ("proportional", "multiuat", "temperature"):  # every other run builds its config as before
        assert UATConfig(output_dir=str(tmp_path), strategy=strategy, report_to=[]).strategy == strategy
    assert "broken_plugin" not in sys.modules
    with pytest.raises(ValueError, match=r"Strategy 'broken' is installed as an entry point \(broken_plugin:Strategy\)"
                                         r", but importing it failed: RuntimeError: this plugin is broken"):
        UATConfig(output_dir=str(tmp_path), strategy="broken", report_to=[])


def test_uat_train_takes_an_outside_strategy_by_module_and_class(tmp_path):
    from uat_hf.cli.train import parse_arguments

    training, *_, recipe = parse_arguments(["--strategy", PLUGIN, "--corpus_dir", "bundled:multidomain-en-de",
                                            "--source_lang", "en", "--target_lang", "de", "--output_dir",
                                            str(tmp_path / "out"), "--update_every", "3", "--max_steps", "6"])
    assert training.strategy == PLUGIN and training.strategy_class is DevLossShare and training.is_dynamic
    assert recipe["strategy"] == PLUGIN  # what recipe.yaml will say, so that a resume finds it again


@pytest.mark.distributed
def test_an_outside_strategy_on_two_ranks_reaches_the_same_p(tmp_path):
    launch_two_ranks(HERE / "distributed" / "outside_strategy_run.py", tmp_path)
    ranks = [[json.loads(line) for line in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert [r["step"] for r in ranks[0]] == list(range(1, 7)) == [r["step"] for r in ranks[1]]
    for a, b in zip(*ranks):
        assert a == b  # bit-identical p, sampler and strategy state after every step
    assert ranks[0][0]["p"] != ranks[0][-1]["p"]  # the updates did move p
    history = [json.loads(line) for line in (tmp_path / "run" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4, 6]  # written once, by the main process
