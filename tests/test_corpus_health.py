"""Corpus health: a corpus whose training pairs do not teach what its clean dev set asks is named, others not."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from statistics import NormalDist

import numpy as np
import pytest
import torch
from datasets import Dataset, concatenate_datasets

from uat_hf.evaluation.corpus_health import (
    MIN_HELD_OUT,
    CorpusHealth,
    SampleCheck,
    check_sample,
    draw_health_sample,
    fresh_parts,
    hold_out_pairs,
    suspect_corpora,
    suspect_z,
)
from uat_hf.sampling.distribution import CorpusDistribution
from uat_hf.sampling.sampler import CorpusBatchSampler
from uat_hf.training.callback import CorpusBalancingCallback
from uat_hf.training.health_callback import CorpusHealthCallback
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import HISTORY_FILE

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAIRS = 8  # per corpus: few enough for the tiny model to learn them in the warm-up below


def test_only_training_pairs_that_clearly_ignore_their_sources_are_suspect():
    dev_z = {"a": 8.0, "b": 8.0, "broken": 8.0}
    assert suspect_corpora({"a": 1.0, "b": 0.9, "broken": 0.1}, {"a": 0.0, "b": -1.0, "broken": -6.0}, dev_z,
                           threshold=3.0) == [
        "broken"]
    # not significant (a small sample's noise), or a model that uses no source yet (nothing to judge by): none
    assert suspect_corpora({"a": 1.0, "broken": 0.1}, {"a": 0.0, "broken": -2.0}, dev_z, threshold=3.0) == []
    assert suspect_corpora({"a": 1.0, "broken": 0.1}, {"a": 0.0, "broken": -6.0}, {"a": 1.0, "broken": 1.0},
                           threshold=3.0) == []


def test_source_use_and_its_standard_error_are_over_sentences():
    rng = np.random.default_rng(0)

    def draw() -> SampleCheck:  # 400 sentences whose losses rise by 0.5 nats on average with a wrong source
        return SampleCheck(4.0, rng.normal(0.5, 1.0, size=400))

    sample = draw()
    assert sample.source_use == pytest.approx(0.5, abs=0.15)
    # the spread of the mean over repeated samples matches the standard error estimated from one
    assert np.std([draw().source_use for _ in range(300)]) == pytest.approx(sample.standard_error, rel=0.2)
    healthy, broken = SampleCheck(3.0, np.full(4, 1.0) + [0.1, -0.1, 0.1, -0.1]), SampleCheck(5.9, np.full(4, 0.05))
    health = CorpusHealth(7, ["a", "broken"], [healthy, broken], [healthy, healthy])
    assert health.share == pytest.approx([1.0, 0.05])
    assert "'broken'" in health.describe("broken") and "0.05x" in health.describe("broken")


def test_the_suspect_threshold_keeps_false_alarms_per_run_below_one_percent_at_64_corpora():
    """Sound corpora's z, standard normal and as correlated from check to check as the archive's (lag-1 0.89;
    study/study.md): a fixed threshold of 3 standard errors calls one of 64 corpora broken in about a fifth of the
    runs of 12 checks; the threshold from the number of corpora and checks stays under 1 % at any correlation."""
    assert [round(suspect_z(n, c), 2) for n, c in ((4, 3), (4, 12), (64, 12))] == [3.02, 3.51, 4.19]
    rng = np.random.default_rng(0)
    runs, corpora, checks = 20_000, 64, 12

    def false_alarms(threshold: float, rho: float, in_a_row: bool = True) -> float:
        noise = rng.standard_normal((runs, corpora, checks))
        z = np.empty_like(noise)
        z[..., 0] = noise[..., 0]
        for t in range(1, checks):
            z[..., t] = rho * z[..., t - 1] + np.sqrt(1 - rho ** 2) * noise[..., t]
        alarm = (z[..., 1:] <= -threshold) & (z[..., :-1] <= -threshold) if in_a_row else z <= -threshold
        return float(alarm.any(axis=(1, 2)).mean())

    assert false_alarms(3.0, 0.89) > 0.1
    for rho in (0.0, 0.89, 0.99):
        assert false_alarms(suspect_z(corpora, checks), rho) <= 0.01
    # the down-weight acts on one check: its margin keeps a sound corpus's first cap as rare, even with fresh samples
    assert [round(suspect_z(n, c, in_a_row=False), 2) for n, c in ((4, 3), (4, 12), (64, 12))] == [3.14, 3.53, 4.21]
    def independent(margin: float) -> float:  # fresh samples: exact, no simulation error
        return 1 - NormalDist().cdf(margin) ** (corpora * checks)

    margin = suspect_z(corpora, checks, in_a_row=False)
    assert 0.0099 < independent(margin) <= 0.01 < independent(suspect_z(corpora, checks))  # two-in-a-row's: not
    assert false_alarms(margin, 0.89, in_a_row=False) <= 0.01  # one sample read again: fewer


def test_the_second_half_is_read_only_where_the_first_cannot_clear_a_corpus_and_every_verdict_is_the_whole_samples():
    """Simulated checks of one corpus, sentences' source use normal with sd 1, 200 sentences per half: a sound one
    (training pairs as their dev pairs, 0.4) and a broken one (0.12, a ratio of 0.3). The first half clears most
    sound checks, so they cost half a sample; the second is read for nearly every check the whole sample would call
    suspect, and a verdict is only ever that whole sample's."""
    rng = np.random.default_rng(0)
    threshold = suspect_z(4, 3)

    def half(mean: float) -> SampleCheck:
        return SampleCheck(3.0, rng.normal(mean, 1.0, 200), 2000.0)

    for kind, mean in (("sound", 0.4), ("broken", 0.12)):
        read_whole = cleared_suspects = whole_suspects = two_stage_suspects = 0
        for _ in range(3000):
            train, dev = [half(mean), half(mean)], [half(0.4), half(0.4)]
            undecided = CorpusHealth(1, ["c"], train[:1], dev[:1], threshold).undecided() == ["c"]
            whole = CorpusHealth(1, ["c"], [SampleCheck.pooled(train)], [SampleCheck.pooled(dev)], threshold)
            suspect = whole.suspects() == ["c"]
            read_whole += undecided
            whole_suspects += suspect
            cleared_suspects += suspect and not undecided
            two_stage_suspects += suspect and undecided
        if kind == "sound":
            assert 0.10 < read_whole / 3000 < 0.22  # about P(z < -1), the dev pairs measurable at half a sample
            assert two_stage_suspects <= whole_suspects <= 3  # false alarms: never more than the whole sample's
        else:
            assert whole_suspects / 3000 > 0.7  # the whole sample has the power to see this corpus ...
            assert cleared_suspects / whole_suspects < 0.02  # ... and the first half almost never clears it


def test_a_corpus_whose_dev_sources_the_model_does_not_use_yet_is_said_to_be_not_measurable():
    """Silence is not health: where the dev pairs' source use is within noise of 0, a broken corpus could not be
    seen, and the verdict, the summary and the model card say so."""
    healthy = SampleCheck(3.0, np.full(4, 1.0) + [0.1, -0.1, 0.1, -0.1])
    unused = SampleCheck(6.0, np.array([0.2, -0.3, 0.1, 0.05]))  # dev z about 0.1
    broken = SampleCheck(5.9, np.full(4, 0.05))
    health = CorpusHealth(9, ["a", "early", "broken"], [healthy, broken, broken], [healthy, unused, healthy])
    assert health.not_measurable() == ["early"] and health.suspects() == ["broken"]  # "early" is as broken
    assert health.verdicts() == {"a": "no sign of damage", "early": "not measurable yet", "broken": "suspect"}
    assert health.as_dict()["corpora"]["early"]["verdict"] == "not measurable yet"
    callback = CorpusHealthCallback({"a": None}, {"a": None}, collate_fn=None)
    callback.last = health
    note = callback.summary()["note"]
    assert note.startswith("Corpus health not measurable yet for 'early' at step 9") and "corpus_audit" in note
    callback.last = CorpusHealth(9, ["a"], [healthy], [healthy])
    assert "note" not in callback.summary()
    from uat_hf.cli.model_card import build_model_card

    card = build_model_card({"strategy": "proportional", "corpus_dir": "x"},
                            {"eval_a_bleu": 5.0, "eval_a_chrf": 30.0, "corpus_health": {"note": note}})
    assert f"**{note}**" in str(card)


def _misaligned(dataset: Dataset) -> Dataset:
    """The same sources, each with the next pair's target (every pair broken)."""
    rows = dataset.to_dict()
    labels = rows["labels"][1:] + rows["labels"][:1]
    return Dataset.from_dict({"input_ids": rows["input_ids"], "attention_mask": rows["attention_mask"],
                              "labels": labels})


@pytest.fixture(scope="module")
def learned(corpora, tokenizer, tmp_path_factory):
    """A tiny model that has learned PAIRS aligned pairs of each corpus, and those pairs."""
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
                     corpus_health_checks=2, corpus_health_tokens=100_000)  # every pair: train == dev samples
    trainer = UATTrainer(model, args, train_corpora=train, dev_corpora=pairs, processing_class=tokenizer)
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    with caplog.at_level(logging.WARNING, logger="uat_hf.training.health_callback"):
        trainer.train()
    shares = dict(zip(health.last.names, health.last.share))
    assert shares["bible"] < 0.2 and dict(zip(health.last.names, health.last.z))["bible"] < -3, shares
    assert all(abs(s - 1.0) < 1e-6 for n, s in shares.items() if n != "bible"), shares  # train sample == dev
    assert health.last.suspects() == ["bible"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "'bible'" in warnings[0] and "misaligned" in warnings[0]
    assert health.summary()["warnings"] == warnings
    keys = {f"health/bible_{k}" for k in ("source_use", "z", "dev_z")}
    logged = [e for e in trainer.state.log_history if keys <= set(e)]
    assert [e["step"] for e in logged] == [2, 4]


def test_a_check_reads_the_second_half_only_of_the_corpora_its_first_half_cannot_clear(learned, tokenizer, tmp_path,
                                                                                        caplog):
    model, pairs = learned
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=1, max_tokens=400, learning_rate=1e-6,
                     report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                     corpus_health_checks=1, corpus_health_tokens=100_000)  # every pair, in two halves
    trainer = UATTrainer(model, args, train_corpora=dict(pairs, bible=_misaligned(pairs["bible"])),
                         dev_corpora=pairs, processing_class=tokenizer)
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    with caplog.at_level(logging.INFO, logger="uat_hf.training.health_callback"):
        trainer.train()
    reread = [r.getMessage() for r in caplog.records if "second half" in r.getMessage()]
    read = {name: corpus["train_sentences"] for name, corpus in health.summary()["corpora"].items()}
    assert len(reread) == 1 and "bible" in reread[0] and read["bible"] == PAIRS  # the broken corpus: whole
    for name, sentences in read.items():  # whole where the first half could not clear it, half elsewhere
        assert (sentences == PAIRS) == (name in reread[0]), (read, reread)
    assert any(read[name] < PAIRS for name in read), read  # a corpus the first half clears costs half a sample
    assert health.last.suspects() == ["bible"]


def test_healthy_corpora_get_no_warning_and_no_cap_and_the_down_weight_then_trains_as_warn_does(learned, tokenizer,
                                                                                                tmp_path, caplog):
    model, pairs = learned
    runs = {}
    for action in ("warn", "down_weight"):
        args = UATConfig(output_dir=str(tmp_path / action), max_steps=4, max_tokens=400, learning_rate=1e-6,
                         report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                         corpus_health_checks=4, corpus_health_action=action)
        trainer = _RecordingTrainer(copy.deepcopy(model), args, train_corpora=pairs, dev_corpora=pairs,
                                    processing_class=tokenizer)
        with caplog.at_level(logging.WARNING, logger="uat_hf.training.health_callback"):
            trainer.train()
        assert caplog.records == [] and trainer.corpus_distribution.caps == {}, action
        assert not any("cap" in r for r in trainer.corpus_distribution.history)
        checked = [e["step"] for e in trainer.state.log_history if "health/bible_source_use" in e]
        assert checked == [1, 2, 3, 4]  # silence after the checks ran, not for want of a check
        runs[action] = trainer.trained_batches, [e.get("loss") for e in trainer.state.log_history]
    assert runs["down_weight"] == runs["warn"]  # nothing capped: the same batches and losses, bit for bit


def test_held_out_pairs_are_a_seeded_split_capped_by_share_and_sample_and_spared_only_by_large_corpora(corpora):
    train = corpora["train"]  # 353-400 pairs each
    trained, held = hold_out_pairs(train, share=0.1, tokens=100_000, seed=3)
    assert list(trained) == list(train) and list(held) == list(train)
    for name, dataset in train.items():
        ids = lambda d: [tuple(x) for x in d["input_ids"]]  # noqa: E731
        count = int(0.1 * len(dataset))  # the share caps a sample that wants them all
        assert (len(held[name]), len(trained[name])) == (count, len(dataset) - count)
        assert sorted(ids(held[name]) + ids(trained[name])) == sorted(ids(dataset))  # nothing lost, nothing twice
    again = hold_out_pairs(train, share=0.1, tokens=100_000, seed=3)[1]
    assert all(again[n]["input_ids"] == held[n]["input_ids"] for n in train)  # every process, every resume
    assert hold_out_pairs(train, share=0.1, tokens=100_000, seed=4)[1]["bible"]["input_ids"] != held["bible"][
        "input_ids"]
    small = hold_out_pairs(train, share=0.1, tokens=200, seed=3)[1]  # the checks' sample caps it too
    assert all(len(d) < int(0.1 * len(train[n])) for n, d in small.items())
    trained, held = hold_out_pairs(train, share=(MIN_HELD_OUT - 1) / 400, tokens=100_000, seed=3)
    assert held == {} and all(trained[n] is train[n] for n in train)  # cannot spare 16: checked on trained pairs


def test_the_held_out_pairs_are_all_the_checks_take_from_training(corpora, tokenizer, tmp_path):
    """The checks use no random state of the run and hold their sample out of training: a run with them trains the
    same weights as a run without them on the corpora less the held-out pairs."""
    from uat_hf.models.presets import build_model

    trained, held = hold_out_pairs(corpora["train"], share=0.1, tokens=3 * 4096, seed=0)  # a sample per check
    assert set(held) == set(corpora["train"]) and all(len(d) >= MIN_HELD_OUT for d in held.values())
    sizes = {n: len(d) for n, d in corpora["train"].items()}  # the prior counts the corpora as given
    weights = []
    for checks, train in ((0, trained), (3, corpora["train"])):
        torch.manual_seed(0)
        model = build_model("tiny", tokenizer)
        args = UATConfig(output_dir=str(tmp_path / f"c{checks}"), max_steps=6, max_tokens=400, learning_rate=3e-3,
                         report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                         corpus_health_checks=checks, corpus_health_holdout=0.1)
        trainer = UATTrainer(model, args, train_corpora=train, dev_corpora=corpora["dev"], processing_class=tokenizer,
                             corpus_sizes=sizes if checks == 0 else None)
        trainer.train()
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
        checked = [e["step"] for e in trainer.state.log_history if "health/bible_source_use" in e]
        assert len(checked) == checks  # the run with checks measured them; the other did not
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    assert health.summary()["held_out_pairs"] == {n: len(d) for n, d in held.items()}
    prior = [sizes[n] / sum(sizes.values()) for n in trainer.corpus_distribution.names]
    assert list(trainer.corpus_distribution.prior) == pytest.approx(prior, abs=1e-12)


def test_the_held_out_pairs_split_into_seeded_disjoint_parts_of_about_a_sample_each(corpora):
    from uat_hf.sampling.packing import example_lengths

    pool = corpora["train"]["bible"]
    lengths = example_lengths(pool)
    parts = fresh_parts(pool, 600, seed=1)
    assert len(parts) == int(lengths.sum() // 600) >= 3
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(pool)))  # every pair once
    for part in parts[:-1]:
        assert abs(int(lengths[part].sum()) - 600) <= lengths.max(), [int(lengths[q].sum()) for q in parts]
    assert all((a == b).all() for a, b in zip(parts, fresh_parts(pool, 600, seed=1)))
    assert not all(len(a) == len(b) and (a == b).all() for a, b in zip(parts, fresh_parts(pool, 600, seed=2)))
    assert [p.tolist() for p in fresh_parts(pool, 10**9, seed=1)] == [list(range(len(pool)))]  # one sample: all


def test_each_check_reads_a_fresh_part_of_the_held_out_pairs(corpora, tokenizer, tmp_path, monkeypatch):
    import uat_hf.training.health_callback as health_callback
    from uat_hf.models.presets import build_model

    read: dict[str, list[set]] = {}

    def draw(train, dev, *args, **kwargs):  # the real draw, recording which training pairs each check reads
        name = next(n for n, d in corpora["dev"].items() if d is dev)
        read.setdefault(name, []).append({tuple(x) for x in train["input_ids"]})
        return draw_health_sample(train, dev, *args, **kwargs)

    monkeypatch.setattr(health_callback, "draw_health_sample", draw)
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=3, max_tokens=400, learning_rate=1e-4,
                     report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                     corpus_health_checks=3, corpus_health_tokens=200, corpus_health_holdout=0.4)
    trainer = UATTrainer(build_model("tiny", tokenizer), args, train_corpora=corpora["train"],
                         dev_corpora=corpora["dev"], processing_class=tokenizer)
    trainer.train()
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    assert health.summary()["fresh_samples"] == {n: 3 for n in corpora["train"]}
    for name, samples in read.items():
        assert len(samples) == 3, name  # one part per check, each drawn once
        assert all(not a & b for i, a in enumerate(samples) for b in samples[i + 1:]), name  # disjoint
        pool = {tuple(x) for x in health.held_out[name]["input_ids"]}
        assert set().union(*samples) <= pool, name  # only pairs training never sees


def test_a_memorised_broken_corpus_is_seen_on_its_held_out_pairs_not_on_those_it_trained_on(learned, corpora,
                                                                                              tokenizer, tmp_path):
    """A model that has memorised misaligned pairs relies on their sources as on sound ones (today's check, which
    sampled trained pairs, passed such a corpus); the pairs of the same corpus it never trained on show it."""
    import copy

    model, pairs = learned
    model = copy.deepcopy(model)
    broken = _misaligned(corpora["train"]["bible"].select(range(40)).select_columns(
        ["input_ids", "attention_mask", "labels"]))
    # dev pairs whose sources the model clearly uses: the learned pairs (bible's those of the other corpora, as its
    # own are all broken here)
    dev = dict(pairs, bible=concatenate_datasets([d for n, d in pairs.items() if n != "bible"]))
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=300, max_tokens=400, learning_rate=3e-3,
                     warmup_steps=20, report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                     corpus_health_checks=2, corpus_health_tokens=100_000, corpus_health_holdout=0.4)
    trainer = UATTrainer(model, args, train_corpora=dict(pairs, bible=broken), dev_corpora=dev,
                         processing_class=tokenizer)
    trainer.train()
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    assert health.summary()["held_out_pairs"] == {"bible": MIN_HELD_OUT, "descriptions": 0, "dictionary": 0,
                                                  "software": 0}  # 8 pairs cannot spare 16
    assert health.last.suspects() == ["bible"], dict(zip(health.last.names, health.last.share))
    # the same check on the bible pairs it trained on: memorised, they look as sound as the dev pairs
    seen = trainer.train_dataset.select(range(MIN_HELD_OUT))  # bible comes first: its trained pairs
    assert {tuple(x) for x in seen["input_ids"]} <= {tuple(x) for x in broken["input_ids"]}
    sample = draw_health_sample(seen, dev["bible"], health.collate_fn, tokens=100_000, sub_batch_tokens=4096, seed=0)
    whole = [SampleCheck.pooled([check_sample(model, half) for half in side]) for side in (sample.train, sample.dev)]
    on_trained = CorpusHealth(500, ["bible"], *([check] for check in whole), health.last.threshold)
    assert on_trained.share[0] > 0.5 and on_trained.suspects() == [], on_trained.share


def test_an_encoder_decoder_model_encodes_each_source_once_and_scores_as_two_full_passes_do(learned, tokenizer,
                                                                                              monkeypatch):
    """The mismatched version's sources are the aligned version's, moved by one: their encodings are reused (the
    check's cost), and the losses are those of encoding them again, neighbours across sub-batches included."""
    from transformers import DataCollatorForSeq2Seq

    import uat_hf.evaluation.corpus_health as corpus_health

    model, pairs = learned
    data = concatenate_datasets(list(pairs.values()))  # sources the model has learned to use
    sample = draw_health_sample(data, data, DataCollatorForSeq2Seq(tokenizer, model=model), tokens=100_000,
                                sub_batch_tokens=120, seed=0)
    half = sample.train[0]
    sub_batches = len(half[0])
    assert sub_batches >= 3  # neighbours across sub-batches, the first sentence's from the last sub-batch
    encodings = []
    hook = model.get_encoder().register_forward_hook(lambda *args: encodings.append(1))
    shared = check_sample(model, half)
    assert len(encodings) == sub_batches
    monkeypatch.setattr(corpus_health, "_encoder_of", lambda model: None)  # both versions in full, as before
    full = check_sample(model, half)
    hook.remove()
    assert len(encodings) == 3 * sub_batches
    assert shared.source_use > 3 * shared.standard_error  # the model uses these sources: a wrong encoding shows
    np.testing.assert_allclose(shared.gains, full.gains, atol=1e-4)
    assert shared.loss == pytest.approx(full.loss, abs=1e-5)


def test_a_capped_corpus_keeps_at_most_its_share_and_the_others_keep_their_ratio():
    distribution = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    record = distribution.cap("a", 0.01, 4, "broken")
    assert distribution.p == pytest.approx([0.01, 0.3 * 0.99 / 0.5, 0.2 * 0.99 / 0.5], abs=1e-15)
    assert record["step"] == 4 and record["cap"] == {"a": {"share": 0.01, "reason": "broken"}}
    assert record["probabilities"] == distribution.as_dict()
    # no update: the seeds keyed by the update count stay in step; the record is counted for the history file
    assert distribution.update_count == 0 and CorpusDistribution.records_in(distribution.state_dict()) == 1
    assert distribution.cap("a", 0.01, 5, "again") is None and len(distribution.history) == 1
    assert distribution.cap("b", 0.0, 6, "broken too") is not None
    assert distribution.cap("c", 0.0, 7, "the last one") is None  # something must be left to train on
    assert distribution.p == pytest.approx([0.01, 0.0, 0.99], abs=1e-15)
    resumed = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    resumed.load_state_dict(distribution.state_dict(), distribution.history)
    assert resumed.state_dict() == distribution.state_dict() and resumed.caps == {"a": 0.01, "b": 0.0}
    with pytest.raises(ValueError, match="'d': it is not a training corpus"):
        distribution.cap("d", 0.01, 8, "unknown")


class _RecordingTrainer(UATTrainer):
    """Remembers the input ids of every batch it trains on."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained_batches = getattr(self, "trained_batches", [])
        self.trained_batches.append(inputs["input_ids"].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def test_a_cap_moves_with_each_verdict_and_is_lifted_and_the_records_are_counted_across_a_resume():
    distribution = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    distribution.cap("a", 0.2, 2, "damaged")
    moved = distribution.cap("a", 0.1, 4, "more damaged")
    assert moved["cap"] == {"a": {"share": 0.1, "reason": "more damaged"}}
    assert distribution.p == pytest.approx([0.1, 0.3 * 0.9 / 0.5, 0.2 * 0.9 / 0.5], abs=1e-15)
    assert distribution.cap("b", None, 5, "nothing to lift") is None
    lifted = distribution.cap("a", None, 6, "no longer damaged")
    assert lifted["cap"] == {"a": {"share": None, "reason": "no longer damaged"}}
    assert distribution.p.tolist() == [0.5, 0.3, 0.2] and distribution.caps == {}
    distribution.cap("b", 0.05, 8, "damaged")
    state = distribution.state_dict()
    assert distribution.update_count == 0 and CorpusDistribution.records_in(state) == 4 == len(distribution.history)
    resumed = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    resumed.load_state_dict(state, distribution.history)
    assert resumed.state_dict() == state and resumed.caps == {"b": 0.05}
    with pytest.raises(ValueError, match="4 history records for 0 updates and 5 caps"):
        resumed.load_state_dict({**state, "cap_records": 5}, distribution.history)


def test_a_format_3_checkpoint_with_its_caps_under_set_aside_resumes_and_is_written_back_as_format_4():
    distribution = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    distribution.cap("a", 0.2, 2, "damaged")
    distribution.cap("a", 0.1, 4, "more damaged")
    state = distribution.state_dict()
    assert state["format"] == 4 and state["caps"] == {"a": 0.1} and state["cap_records"] == 2
    legacy = {key: value for key, value in state.items() if key not in ("caps", "cap_records")}
    legacy.update({"format": 3, "set_aside": {"a": 0.1}, "set_aside_records": 2})
    resumed = CorpusDistribution(["a", "b", "c"], [0.5, 0.3, 0.2])
    resumed.load_state_dict(legacy, distribution.history)
    assert resumed.caps == {"a": 0.1} and resumed.cap_records == 2 and resumed.state_dict() == state
    with pytest.raises(ValueError, match="2 history records for 0 updates and 1 caps"):  # one record per cap
        resumed.load_state_dict({k: v for k, v in legacy.items() if k != "set_aside_records"}, distribution.history)
    with pytest.raises(ValueError, match="format 2 .*older uat_hf"):
        resumed.load_state_dict({**state, "format": 2}, distribution.history)


def _set_aside_run(learned, tokenizer, output, resume=None, action="set_aside", share=0.01):
    import copy

    model, pairs = learned
    args = UATConfig(output_dir=str(output), strategy="multiuat", measure="enteos", update_every=1, mc_samples=2,
                     max_steps=7, max_tokens=400, learning_rate=1e-4, report_to=[], save_strategy="steps",
                     save_steps=3, use_cpu=True, seed=0, disable_tqdm=True, logging_steps=1,
                     corpus_health_checks=3, corpus_health_tokens=100_000, corpus_health_action=action,
                     corpus_health_share=share)
    train = dict(pairs, bible=_misaligned(pairs["bible"]))
    trainer = _RecordingTrainer(copy.deepcopy(model), args, train_corpora=train, dev_corpora=pairs,
                                processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume)
    history = [json.loads(line) for line in (output / HISTORY_FILE).read_text().splitlines()]
    return trainer, history


def test_a_misaligned_corpus_is_set_aside_whatever_the_strategy_proposes_and_resumes_exactly(learned, tokenizer,
                                                                                           tmp_path):
    full, history = _set_aside_run(learned, tokenizer, tmp_path / "full")
    # checks at steps 2, 4, 6 and 7; suspect at 2 and 4: set aside at 4, after that step's MultiUAT update
    aside = [r for r in history if "cap" in r]
    assert [r["step"] for r in aside] == [4] and list(aside[0]["cap"]) == ["bible"]
    assert "misaligned" in aside[0]["cap"]["bible"]["reason"]
    updates = [r["probabilities"]["bible"] for r in history if "cap" not in r]
    assert [r["step"] for r in history] == [1, 2, 3, 4, 4, 5, 6, 7]
    assert min(updates[:4]) > 0.1  # MultiUAT gives the misaligned corpus plenty of p on its own...
    assert max(updates[4:]) <= 0.01 + 1e-12 and aside[0]["probabilities"]["bible"] <= 0.01 + 1e-12  # ...not after
    health = next(c for c in full.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    assert health.summary()["caps"] == {"bible": 0.01}
    assert health.summary()["warnings"][0].endswith("Corpus 'bible' was set aside from step 4: it kept at most 0.01 "
                                                    "of p from then on (corpus_health_action=set_aside).")
    assert any(e.get("balance/p_bible") == aside[0]["probabilities"]["bible"] for e in full.state.log_history)
    for checkpoint in ("checkpoint-3", "checkpoint-6"):  # before and after the set-aside
        partial = tmp_path / checkpoint
        shutil.copytree(tmp_path / "full" / checkpoint, partial / checkpoint)
        shutil.copy(tmp_path / "full" / HISTORY_FILE, partial / HISTORY_FILE)
        resumed, resumed_history = _set_aside_run(learned, tokenizer, partial, resume=True)
        step = int(checkpoint.split("-")[1])
        assert resumed.trained_batches == full.trained_batches[step:], checkpoint
        assert _without_seconds(resumed_history) == _without_seconds(history), checkpoint
        assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict(), checkpoint
        for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0, msg=f"{checkpoint}: {name}")


def test_a_misaligned_corpus_is_down_weighted_from_the_first_confident_check_by_its_ratio_and_resumes_exactly(
        learned, tokenizer, tmp_path):
    full, history = _set_aside_run(learned, tokenizer, tmp_path / "full", action="down_weight", share=0.001)
    health = next(c for c in full.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    caps = [r for r in history if "cap" in r]
    # checks at steps 2, 4, 6 and 7: capped at the first (set_aside waits for two in a row: step 4)
    assert caps[0]["step"] == 2 and list(caps[0]["cap"]) == ["bible"]
    checks = {e["step"]: e for e in full.state.log_history if "health/bible_z" in e}
    margin = suspect_z(4, 3, in_a_row=False)
    assert checks[2]["health/bible_z"] <= -margin and all(
        checks[2][f"health/{n}_z"] > -margin for n in health.names if n != "bible")
    proposed = next(r for r in reversed(history[:history.index(caps[0])]) if r["step"] == 2)["probabilities"]["bible"]
    expected = checks[2]["health/bible_source_use"] * proposed  # the ratio times the strategy's p (over 0.001)
    assert caps[0]["cap"]["bible"]["share"] == pytest.approx(expected, rel=0.01) and expected > 0.001
    assert caps[0]["probabilities"]["bible"] == pytest.approx(expected, rel=0.01) and expected < 0.5 * proposed
    cap = None
    for record in history:  # the cap holds whatever MultiUAT proposes, until the next check moves it
        cap = record.get("cap", {}).get("bible", {}).get("share", cap)
        assert cap is None or record["probabilities"]["bible"] <= cap + 1e-12, record
    assert [r["step"] for r in caps] == sorted({r["step"] for r in caps})  # at most one change per check
    assert "bible" in health.summary()["caps"] and "down_weight" in health.summary()["warnings"][0]
    for checkpoint in ("checkpoint-3", "checkpoint-6"):  # the first cap before both
        partial = tmp_path / checkpoint
        shutil.copytree(tmp_path / "full" / checkpoint, partial / checkpoint)
        shutil.copy(tmp_path / "full" / HISTORY_FILE, partial / HISTORY_FILE)
        resumed, resumed_history = _set_aside_run(learned, tokenizer, partial, resume=True, action="down_weight",
                                                  share=0.001)
        step = int(checkpoint.split("-")[1])
        assert resumed.trained_batches == full.trained_batches[step:], checkpoint
        assert _without_seconds(resumed_history) == _without_seconds(history), checkpoint
        assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict(), checkpoint


def _health(step, train_use, dev_use=1.0):
    """A check of corpora a and b: b sound, a's training pairs using their sources ``train_use`` as much as its dev
    pairs do (400 sentences each side, standard deviation 0.5)."""
    gains = np.random.default_rng(0).standard_normal(400) * 0.5
    sound = SampleCheck(1.0, gains - gains.mean() + 1.0)
    return CorpusHealth(step, ["a", "b"], [SampleCheck(1.0, gains - gains.mean() + train_use), sound],
                        [SampleCheck(1.0, gains - gains.mean() + dev_use), sound])


def test_the_down_weight_follows_the_evidence_and_keeps_its_cap_while_a_corpus_cannot_be_measured():
    distribution = CorpusDistribution(["a", "b"], [0.6, 0.4])
    balancing = CorpusBalancingCallback(CorpusBatchSampler({"a": [4] * 8, "b": [4] * 8}, distribution, batch_size=2))
    health = CorpusHealthCallback({"a": None, "b": None}, {"a": None, "b": None}, collate_fn=None, checks=3,
                                  action="down_weight", share=0.01, balancing=balancing)
    health._down_weight(_health(2, 0.3))  # z about -19: capped at 0.3 of its p
    assert distribution.caps == {"a": pytest.approx(0.18)}
    health._down_weight(_health(4, 0.0))  # all broken: the least share
    assert distribution.caps == {"a": 0.01}
    health._down_weight(_health(6, 0.0, dev_use=0.02))  # dev z below 3: no evidence either way, the cap stays
    assert distribution.caps == {"a": 0.01}
    health._down_weight(_health(8, 0.9))  # z about -2.8, above the margin of one check (3.1): lifted
    assert distribution.caps == {} and distribution.p.tolist() == [0.6, 0.4]
    health._down_weight(_health(10, 0.85))  # z about -4.2, but a ratio a sound corpus's train/dev gap can give
    assert distribution.caps == {}
    health._down_weight(_health(12, 0.75))  # z about -7 and a quarter of its source use lost: capped
    assert distribution.caps == {"a": pytest.approx(0.45)}
    assert [r["cap"]["a"]["share"] for r in distribution.history] == [0.18, 0.01, None, 0.45]
    assert balancing.caps == health.summary()["caps"] == {"a": pytest.approx(0.45)}
    assert "down_weight" in health.warned["a"]


def _without_seconds(records):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_set_aside_without_dev_sets_is_refused_when_the_trainer_is_built(corpora, tokenizer, tmp_path):
    from uat_hf.models.presets import build_model

    args = UATConfig(output_dir=str(tmp_path), corpus_health_action="set_aside", use_cpu=True, report_to=[],
                     max_steps=2, max_tokens=400)
    with pytest.raises(ValueError, match="set_aside needs the corpus-health checks, which need dev corpora"):
        UATTrainer(build_model("tiny", tokenizer), args, train_corpora=corpora["train"], processing_class=tokenizer)
