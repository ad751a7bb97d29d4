"""MultiUAT: MC-dropout rewards, the balancing callback and their guarantees, on real data and models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import DataCollatorForSeq2Seq

from uat_hf.models.presets import build_model
from uat_hf.models.targets import target_logits
from uat_hf.sampling.packing import draw_token_batch, split_by_tokens
from uat_hf.sampling.sampler import CorpusBatchSampler
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward, batch_sentence_uncertainty, mc_dropout
from uat_hf.strategies.registry import build_distribution
from uat_hf.training.callback import HISTORY_FILE, CorpusBalancingCallback
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer


@pytest.fixture
def collate(tokenizer, tiny_model):
    return DataCollatorForSeq2Seq(tokenizer, model=tiny_model)


def dev_batch(corpora, collate, name="bible", count=12):
    dataset = corpora["dev"][name].select_columns(["input_ids", "attention_mask", "labels"])
    return collate([dataset[i] for i in range(count)])


def test_mc_dropout_restores_modes_uses_no_autograd_and_spares_the_training_rng(tiny_model, corpora, collate):
    tiny_model.eval()
    tiny_model.model.decoder.train()  # a mixed state must come back exactly
    before = {name: m.training for name, m in tiny_model.named_modules()}
    batch = dev_batch(corpora, collate)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with mc_dropout(tiny_model, seed=0):
        first = batch_sentence_uncertainty(tiny_model, batch, "exptp", None)
        second = batch_sentence_uncertainty(tiny_model, batch, "exptp", None)
        assert all(m.training for m in tiny_model.modules())
    assert not first.requires_grad
    assert not torch.equal(first, second)  # dropout is active: each pass has its own masks
    assert {name: m.training for name, m in tiny_model.named_modules()} == before
    assert torch.equal(torch.rand(3), expected_next)
    with mc_dropout(tiny_model, seed=0):
        assert torch.equal(batch_sentence_uncertainty(tiny_model, batch, "exptp", None), first)  # seeded


def test_output_layer_only_at_target_positions_matches_full_logits(tiny_model, corpora, collate):
    tiny_model.eval()
    batch = dev_batch(corpora, collate)
    mask = batch["labels"] != -100
    with torch.no_grad():
        full = tiny_model(**batch).logits[mask]
        fast = target_logits(tiny_model, batch, mask)
    assert fast.shape == full.shape and mask.sum() < mask.numel()  # padding was there and is skipped
    torch.testing.assert_close(fast, full)


def test_target_logits_of_a_model_whose_collator_makes_no_decoder_inputs(tokenizer, corpora):
    """M2M100 has no ``prepare_decoder_input_ids_from_labels``: its batches carry labels only, and its base
    model alone cannot shift them, so the logits must come from the model given the labels."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(0)
    config = M2M100Config(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64,
        decoder_ffn_dim=64, encoder_attention_heads=2, decoder_attention_heads=2, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
    )
    model = M2M100ForConditionalGeneration(config).eval()
    batch = dev_batch(corpora, DataCollatorForSeq2Seq(tokenizer, model=model))
    assert "decoder_input_ids" not in batch
    mask = batch["labels"] != -100
    with torch.no_grad():
        expected = model(**batch).logits[mask]
        torch.testing.assert_close(target_logits(model, batch, mask), expected)
        uncertainty = batch_sentence_uncertainty(model, batch, "enteos", tokenizer.eos_token_id)
    assert uncertainty.shape == (len(batch["labels"]),) and torch.isfinite(uncertainty).all()


def test_replicated_batch_equals_separate_passes_without_dropout(tokenizer, corpora):
    model = build_model("tiny", tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    collate = DataCollatorForSeq2Seq(tokenizer, model=model)
    batches = [[dev_batch(corpora, collate)]]
    loop = UncertaintyReward("entsent", 4, mode="loop").compute(model, batches)["rewards"]
    replicated = UncertaintyReward("entsent", 4, mode="replicate", replicate_tokens=300)
    replicate = replicated.compute(model, batches)["rewards"]
    np.testing.assert_allclose(loop, replicate, rtol=1e-5)


def test_replicated_batch_matches_separate_passes_in_distribution(tiny_model, corpora, collate):
    """Per-pass rewards from K separate passes and from one K-fold replicated batch: same distribution."""
    batch = dev_batch(corpora, collate, count=6)
    reward = UncertaintyReward("exptp", 1)
    with mc_dropout(tiny_model, seed=1):
        looped = torch.stack([reward._pass_sums(tiny_model, batch, 1, replicate=False)[0] for _ in range(120)])
    with mc_dropout(tiny_model, seed=2):
        replicated = reward._pass_sums(tiny_model, batch, 120, replicate=True)
    assert looped.std() > 0 and replicated.std() > 0
    assert stats.ks_2samp(looped.numpy(), replicated.numpy()).pvalue > 1e-3
    assert stats.ks_2samp(looped.numpy(), looped.numpy() + 5 * looped.std().item()).pvalue < 1e-3  # the test has power


def test_passes_are_split_across_ranks_without_overlap():
    reward = UncertaintyReward("exptp", 30)
    shares = [reward.passes_for_rank(4, rank, 3) for rank in range(3)]
    assert np.array_equal(sum(shares), np.full(4, 30))
    assert all(abs(share.sum() - 40) <= 1 for share in shares)


def test_dev_batch_is_random_sorted_and_split_by_tokens():
    lengths = np.random.default_rng(0).integers(1, 50, 500)
    chosen = draw_token_batch(lengths, 1024, np.random.default_rng(1))
    assert lengths[chosen].sum() >= 1024 and lengths[chosen[:-1]].sum() < 1024 + lengths[chosen].max()
    assert np.all(np.diff(lengths[chosen]) >= 0)
    assert not np.array_equal(chosen, draw_token_batch(lengths, 1024, np.random.default_rng(2)))
    chunks = split_by_tokens(chosen, lengths, 200)
    assert np.array_equal(np.concatenate(chunks), chosen)
    assert all(len(c) == 1 or len(c) * lengths[c].max() <= 200 for c in chunks)


def test_dev_sub_batches_cap_their_padding_under_a_generous_token_cap():
    """A dev batch of mostly short sentences and a few long ones fits one 4,096-token sub-batch, where the long
    ones would pad the short ones to 23 % real tokens; split, every sub-batch of several examples is ≥ 75 % real
    and the whole batch costs at most about 1.4 times its real tokens."""
    lengths = np.array([8] * 50 + [12] * 10 + [64, 64])
    chosen = np.arange(len(lengths))
    assert len(chosen) * lengths.max() <= 4096 and lengths.sum() / (len(chosen) * lengths.max()) < 0.25
    chunks = split_by_tokens(chosen, lengths, 4096)
    assert np.array_equal(np.concatenate(chunks), chosen)
    padded = [len(c) * lengths[c].max() for c in chunks]
    assert all(len(c) == 1 or lengths[c].sum() >= 0.75 * p for c, p in zip(chunks, padded))
    assert sum(padded) <= 1.4 * lengths.sum()
    assert len(split_by_tokens(chosen, lengths, 4096, max_padding=1.0)) == 1  # the padding rule is what splits


def test_dev_batches_count_max_of_source_and_target_tokens(corpora, collate):
    """As the authors' fairseq batches (and the training batches): an example counts max(source, target) tokens.
    Here the dev targets are cut to 3 tokens, so counting targets only would draw several times too many."""
    dev = {name: ds.map(lambda row: {"labels": row["labels"][:3]}) for name, ds in corpora["dev"].items()}
    sizes = {name: len(ds) for name, ds in corpora["train"].items()}
    sampler = CorpusBatchSampler.from_datasets(corpora["train"], build_distribution("multiuat", sizes),
                                               max_tokens=400)
    callback = CorpusBalancingCallback(sampler, reward=UncertaintyReward("exptp", 1), dev_corpora=dev,
                                       collate_fn=collate, dev_batch_tokens=120)
    for batches in callback.dev_batches():
        tokens = sorted(max(int(s), int(t)) for batch in batches for s, t in
                        zip(batch["attention_mask"].sum(1), (batch["labels"] != -100).sum(1)))
        assert sum(tokens) >= 120 and sum(tokens) - tokens[-1] < 120, tokens


def train_on(model, batches, steps: int, lr: float = 3e-3):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        loss = model(**batches[step % len(batches)]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("measure", ["enteos", "exptp"])
def test_a_corpus_the_model_fits_worse_gains_probability(tiny_model, corpora, collate, measure):
    """Train briefly on the bible only: the other corpora become relatively more uncertain and gain p."""
    bible = corpora["train"]["bible"].select_columns(["input_ids", "attention_mask", "labels"])
    batches = [collate([bible[i] for i in range(s, s + 16)]) for s in range(0, 320, 16)]
    train_on(tiny_model, batches, 60)
    sizes = {name: len(ds) for name, ds in corpora["train"].items()}
    distribution = build_distribution("multiuat", sizes, lr=1e-2, steps=50)
    sampler = CorpusBatchSampler.from_datasets(corpora["train"], distribution, max_tokens=400)
    prior = sampler.probabilities
    callback = CorpusBalancingCallback(
        sampler, reward=UncertaintyReward(measure, 3, eos_token_id=tiny_model.config.eos_token_id),
        dev_corpora=corpora["dev"], collate_fn=collate,
    )
    for step in (1, 2, 3):
        record = callback.update(tiny_model, step)
        rewards = record["multiuat"]["rewards"]
        assert rewards["bible"] < min(v for k, v in rewards.items() if k != "bible")
        p = sampler.probabilities
        assert np.all(p >= 0) and p.sum() == pytest.approx(1.0)
    bible = sampler.names.index("bible")
    assert p[bible] < prior[bible]
    assert p[bible] == p.min()  # the prior was uniform (equal sizes): the best-fitted corpus falls lowest
    # The exact-expectation update moves p toward R / ΣR: corpora above the mean reward gain.
    rewards = np.array([record["multiuat"]["rewards"][n] for n in sampler.names])
    assert np.array_equal(np.sign(p - prior), np.sign(rewards - rewards.mean()))
    history = json.loads(json.dumps(sampler.distribution.history))  # as balancing_history.jsonl keeps it in training
    assert [h["step"] for h in history] == [1, 2, 3]
    assert history[-1]["probabilities"] == dict(zip(sampler.names, p.tolist()))
    assert set(history[0]) >= {"step", "probabilities", "strategy", "seconds", "multiuat"}
    assert set(history[0]["multiuat"]) >= {"rewards", "measure"}
    assert history[0]["multiuat"]["measure"] == measure and history[0]["strategy"] == "multiuat"


def test_trainer_updates_at_the_interval_and_logs_p(tmp_path, corpora, tokenizer, tiny_model):
    args = UATConfig(
        output_dir=str(tmp_path / "out"), strategy="multiuat", measure="entsent", mc_samples=2, update_every=3,
        max_steps=7, max_tokens=400, report_to=[], logging_steps=3, save_strategy="no", use_cpu=True,
        disable_tqdm=True, corpus_health_checks=0,  # health checks log at their own steps too: keep only updates
    )
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    trainer.train()
    history = [json.loads(line) for line in (tmp_path / "out" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [3, 6]
    # The balancing log at a logging step must not swallow the training loss logged at that step.
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [3, 6]
    logged = [entry for entry in trainer.state.log_history if "balance/p_bible" in entry]
    assert len(logged) == 2
    assert logged[-1]["balance/p_bible"] == pytest.approx(history[-1]["probabilities"]["bible"])
    np.testing.assert_allclose(trainer.corpus_sampler.probabilities, list(history[-1]["probabilities"].values()))


def test_every_update_reaches_the_log_at_its_own_step(tmp_path, corpora, tokenizer, tiny_model):
    """Updates more often than logging_steps: each update logs at its step, none is replaced by the next."""
    args = UATConfig(
        output_dir=str(tmp_path / "out"), strategy="multiuat", measure="entsent", mc_samples=2, update_every=2,
        max_steps=6, max_tokens=400, report_to=[], logging_steps=5, save_strategy="no", use_cpu=True,
        disable_tqdm=True, scorer_lr=0.05,
    )
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    trainer.train()
    history = [json.loads(line) for line in (tmp_path / "out" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4, 6]
    logged = {e["step"]: e for e in trainer.state.log_history if "balance/p_bible" in e}
    assert sorted(logged) == [2, 4, 6]
    for record in history:
        assert logged[record["step"]]["balance/p_bible"] == pytest.approx(record["probabilities"]["bible"])
        assert "loss" in logged[record["step"]]
    assert len({logged[step]["balance/p_bible"] for step in logged}) == 3  # three different p, none dropped
    # The mix it ended with, portable: final_mix.json is what datasets.interleave_datasets takes
    from datasets import interleave_datasets

    mix = json.loads((tmp_path / "out" / "final_mix.json").read_text())
    assert mix["probabilities"] == list(history[-1]["probabilities"].values()) == \
        trainer.corpus_distribution.as_interleave_probabilities()
    assert mix["corpora"] == list(history[-1]["probabilities"]) and mix["step"] == 6
    mixed = interleave_datasets([corpora["train"][name] for name in mix["corpora"]],
                                probabilities=mix["probabilities"], seed=0)
    assert len(mixed) > 0


def test_nonfinite_rewards_skip_the_update(tiny_model, corpora, collate, caplog):
    sizes = {name: len(ds) for name, ds in corpora["train"].items()}
    sampler = CorpusBatchSampler.from_datasets(corpora["train"], build_distribution("multiuat", sizes),
                                               max_tokens=400)
    reward = UncertaintyReward("exptp", 1)
    callback = CorpusBalancingCallback(sampler, reward=reward, dev_corpora=corpora["dev"], collate_fn=collate)
    before = sampler.probabilities
    reward.finalize = lambda totals: (np.array([np.nan, 0.1, 0.1, 0.1]), {})  # e.g. an fp16 overflow
    with caplog.at_level("WARNING"):
        record = callback.update(tiny_model, 5)
    assert "Skipping the balancing update at step 5" in caplog.text
    assert "skipped" in record
    np.testing.assert_array_equal(sampler.probabilities, before)


def test_multiuat_refuses_a_model_without_dropout(tmp_path, corpora, tokenizer):
    model = build_model("tiny", tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", max_tokens=400, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="every dropout rate of the model is 0"):
        UATTrainer(model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"], processing_class=tokenizer)


def test_multiuat_needs_a_dev_set_per_training_corpus(tmp_path, corpora, tokenizer, tiny_model):
    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", max_tokens=400, report_to=[], use_cpu=True)
    dev = dict(corpora["dev"])
    del dev["software"]
    with pytest.raises(ValueError, match="Training corpus 'software' has no dev set"):
        UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=dev, processing_class=tokenizer)


@pytest.mark.parametrize("bf16", [False, True])
def test_passes_run_in_the_training_precision(tmp_path, corpora, tokenizer, tiny_model, bf16):
    """Under bf16 training the Trainer's forward is autocast; the MC-dropout passes must be too (on a GPU a float32
    pass costs several times a bf16 one), and the rewards must stay what float32 measures, up to bf16 rounding."""
    args = UATConfig(
        output_dir=str(tmp_path / "out"), strategy="multiuat", measure="entsent", mc_samples=2, update_every=100,
        max_steps=200, max_tokens=400, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, bf16=bf16,
    )
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    balancing = trainer.balancing
    # The dev batches and dropout seed the update is about to use (both depend only on the update count).
    dev, seed = balancing.dev_batches(), balancing.dropout_seed()
    seen = []
    layer = tiny_model.get_decoder().layers[0].fc1
    handle = layer.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    try:
        record = trainer.balancing.update(tiny_model, 1)
    finally:
        handle.remove()
    assert seen and set(seen) == {torch.bfloat16 if bf16 else torch.float32}
    rewards = np.array(list(record["multiuat"]["rewards"].values()))
    assert np.isfinite(rewards).all() and (rewards > 0).all()
    if bf16:
        reference = UncertaintyReward("entsent", 2, eos_token_id=tiny_model.config.eos_token_id)
        float32 = reference.finalize(reference.compute(tiny_model, dev, seed=seed))[0]
        np.testing.assert_allclose(rewards, float32, rtol=0.05)


def test_rewards_equal_full_logit_passes_of_every_measure(tiny_model, corpora, collate):
    """The fast path (labels checked once, output layer at the scored or EOS positions only, statistics in chunks,
    no host sync per pass) gives the rewards of plain passes over the full logits, with the same masks."""
    from uat_hf.strategies.multiuat.measures import (
        ALL_MEASURES,
        eos_positions,
        position_statistics,
        sentence_uncertainty,
    )

    batches = [[dev_batch(corpora, collate, name, count=7)] for name in ("bible", "dictionary")]
    eos = tiny_model.config.eos_token_id
    for measure in ALL_MEASURES:
        reward = UncertaintyReward(measure, 3, eos_token_id=eos, mode="loop")
        fast = reward.finalize(reward.compute(tiny_model, batches, seed=4))[0]
        expected = []
        with mc_dropout(tiny_model, seed=4):
            for (batch,) in batches:
                mask = batch["labels"] != -100
                passes = []
                for _ in range(3):
                    max_prob, entropy = position_statistics(tiny_model(**batch).logits)
                    passes.append(sentence_uncertainty(measure, max_prob, entropy, mask,
                                                       eos_positions(batch["labels"], eos, mask)).double().mean())
                expected.append(float(torch.stack(passes).mean()))
        np.testing.assert_allclose(fast, expected, rtol=1e-6, atol=1e-7, err_msg=measure)
