"""Corpus health: a corpus whose training pairs do not teach what its clean dev set asks is named, others not."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from datasets import Dataset

from uat_hf.evaluation.corpus_health import CorpusHealth, SampleLoss, suspect_corpora
from uat_hf.training.health_callback import CorpusHealthCallback
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAIRS = 8  # per corpus: few enough for the tiny model to learn them in the warm-up below


def test_only_a_significant_ratio_above_the_others_is_suspect():
    z = {"a": 0.0, "b": 1.0, "c": -1.0, "broken": 4.0}
    assert suspect_corpora({"a": 1.0, "b": 1.01, "c": 0.97, "broken": 1.08}, z) == ["broken"]
    # not significant (the noise of a small sample), or every corpus shifted alike (a run-wide gap): none
    assert suspect_corpora({"a": 1.0, "b": 1.01, "c": 0.97, "broken": 1.08}, dict(z, broken=2.0)) == []
    assert suspect_corpora({"a": 1.3, "b": 1.31, "c": 1.32, "broken": 1.33}, {n: 5.0 for n in z}) == []


def test_the_standard_error_is_that_of_sentences():
    rng = np.random.default_rng(0)

    def draw() -> SampleLoss:  # 400 sentences of 5-29 tokens, each with its own mean token loss
        tokens = rng.integers(5, 30, size=400).astype(float)
        return SampleLoss(tokens * rng.normal(4.0, 1.0, size=400), tokens)

    sample = draw()
    assert sample.mean == pytest.approx(sample.sums.sum() / sample.tokens.sum())
    # the spread of the mean over repeated samples matches the standard error estimated from one
    assert np.std([draw().mean for _ in range(300)]) == pytest.approx(sample.standard_error, rel=0.2)
    health = CorpusHealth(7, ["a", "broken"], [SampleLoss(np.array([30.0, 30.0]), np.array([10.0, 10.0])),
                                               SampleLoss(np.array([60.0, 59.0]), np.array([10.0, 10.0]))],
                          [SampleLoss(np.array([31.0, 29.0]), np.array([10.0, 10.0]))] * 2)
    assert health.ratio == pytest.approx([1.0, 1.983], abs=1e-3)
    assert "'broken'" in health.describe("broken") and "5.95" in health.describe("broken")


def _misaligned(dataset: Dataset) -> Dataset:
    """The same sources, each with the next pair's target (every pair broken)."""
    rows = dataset.to_dict()
    labels = rows["labels"][1:] + rows["labels"][:1]
    return Dataset.from_dict({"input_ids": rows["input_ids"], "attention_mask": rows["attention_mask"],
                              "labels": labels})


@pytest.fixture(scope="module")
def learned(corpora, tokenizer, tmp_path_factory):
    """A tiny model that has learned PAIRS aligned pairs of each corpus, and those pairs."""
    import torch

    from uat_hf.models.presets import build_model

    torch.manual_seed(0)
    model = build_model("tiny", tokenizer, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128)
    pairs = {name: ds.select(range(PAIRS)).select_columns(["input_ids", "attention_mask", "labels"])
             for name, ds in corpora["train"].items()}
    args = UATConfig(output_dir=str(tmp_path_factory.mktemp("warmup")), max_steps=500, max_tokens=400,
                     learning_rate=5e-3, warmup_steps=20, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                     disable_tqdm=True, corpus_health_checks=0)
    UATTrainer(model, args, train_corpora=pairs, processing_class=tokenizer).train()
    return model, pairs


def test_a_misaligned_corpus_is_warned_about_by_name(learned, tokenizer, tmp_path, caplog):
    model, pairs = learned
    train = dict(pairs, bible=_misaligned(pairs["bible"]))
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=4, max_tokens=400, learning_rate=1e-6,
                     report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, logging_steps=1,
                     corpus_health_checks=2)
    trainer = UATTrainer(model, args, train_corpora=train, dev_corpora=pairs, processing_class=tokenizer)
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    with caplog.at_level(logging.WARNING, logger="uat_hf.training.health_callback"):
        trainer.train()
    ratios = dict(zip(health.last.names, health.last.ratio))
    assert ratios["bible"] > 1.3 and dict(zip(health.last.names, health.last.z))["bible"] > 3, ratios
    assert all(abs(r - 1.0) < 1e-6 for n, r in ratios.items() if n != "bible"), ratios  # train sample == dev
    assert health.last.suspects() == ["bible"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "'bible'" in warnings[0] and "misaligned" in warnings[0]
    assert health.summary()["warnings"] == warnings
    logged = [e for e in trainer.state.log_history if "health/bible_ratio" in e and "health/bible_z" in e]
    assert [e["step"] for e in logged] == [2, 4]


def test_healthy_corpora_get_no_warning(learned, tokenizer, tmp_path, caplog):
    model, pairs = learned
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=4, max_tokens=400, learning_rate=1e-6,
                     report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                     corpus_health_checks=4)
    trainer = UATTrainer(model, args, train_corpora=pairs, dev_corpora=pairs, processing_class=tokenizer)
    with caplog.at_level(logging.WARNING, logger="uat_hf.training.health_callback"):
        trainer.train()
    assert caplog.records == []


def test_the_checks_leave_training_unchanged(corpora, tokenizer, tmp_path):
    """The checks use no random state of the run: the same seed trains the same weights with and without them."""
    import torch

    from uat_hf.models.presets import build_model

    weights = []
    for checks in (0, 3):
        torch.manual_seed(0)
        model = build_model("tiny", tokenizer)
        args = UATConfig(output_dir=str(tmp_path / f"c{checks}"), max_steps=6, max_tokens=400, learning_rate=3e-3,
                         report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                         corpus_health_checks=checks)
        UATTrainer(model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                   processing_class=tokenizer).train()
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
