"""MultiDDS-S (gradient-cosine reward) on real data, a real tokenizer and a tiny real Marian model."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import DataCollatorForSeq2Seq

from conftest import free_port
from uat_hf.models.presets import build_model
from uat_hf.strategies.multidds_s.gradient_cosine import GradientCosineReward
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import HISTORY_FILE

TESTS = Path(__file__).resolve().parent
COLUMNS = ("input_ids", "attention_mask", "labels")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rows(dataset, indices) -> list[dict]:
    return [{k: dataset[int(i)][k] for k in COLUMNS} for i in indices]


def sub_batches(collator, examples: list[dict], size: int = 16) -> list[dict]:
    return [collator(examples[s : s + size]) for s in range(0, len(examples), size)]


def collator_for(tokenizer, model):
    return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)


def domain_batches(corpora, collator, split: str, count: int = 16) -> list[list[dict]]:
    return [sub_batches(collator, rows(ds, range(count)), 8) for ds in corpora[split].values()]


def test_same_batches_give_cosine_one_and_dropout_is_off_by_default(corpora, tokenizer):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer, dropout=0.1)  # the model's dropout is on in training
    collator = collator_for(tokenizer, model)
    batch = sub_batches(collator, rows(corpora["train"]["bible"], range(24)), 8)
    reward = GradientCosineReward()
    assert (reward.dropout, reward.label_smoothing, reward.per_pair_train_batches) == (False, 0.0, False)
    totals = reward.compute(model, [batch, batch], [batch, batch], seed=0)
    rewards, extras = reward.finalize(totals)
    np.testing.assert_allclose(np.asarray(extras["cosine"]), 1.0, atol=1e-5)  # eval mode: one gradient
    assert (rewards >= 0.99).all()
    assert extras["cosine_axes"] == {"rows": "train", "columns": "dev"}

    # dropout=True (multiDDS's train-mode passes): the two passes draw different masks, close to but not 1.
    cosine = GradientCosineReward(dropout=True).compute(model, [batch], [batch], seed=0)["cosine"]
    assert 0.5 < cosine[0, 0] < 1 - 1e-4


def test_eval_mode_reward_is_independent_of_the_dropout_seed_and_modes_come_back(corpora, tokenizer):
    """Default passes run in eval mode (MultiUAT's MultiDDS baseline): no mask, so no seed dependence."""
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer, dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    collator = collator_for(tokenizer, model)
    dev, train = domain_batches(corpora, collator, "dev", 8), domain_batches(corpora, collator, "train", 8)
    model.train()
    model.model.decoder.eval()  # a non-uniform pattern must come back exactly
    modes = [m.training for m in model.modules()]
    seen = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args: seen.append(any(m.training for m in model.modules()))
    )
    try:
        a = GradientCosineReward().compute(model, dev, train, seed=0)["cosine"]
        b = GradientCosineReward().compute(model, dev, train, seed=1)["cosine"]
    finally:
        hook.remove()
    np.testing.assert_array_equal(a, b)
    assert seen and not any(seen)  # every pass saw every module in eval mode
    assert [m.training for m in model.modules()] == modes
    with_dropout = [GradientCosineReward(dropout=True).compute(model, dev, train, seed=s)["cosine"] for s in (0, 1)]
    assert not np.array_equal(*with_dropout)
    assert [m.training for m in model.modules()] == modes


def test_label_smoothing_differentiates_the_trainers_smoothed_loss(corpora, tokenizer):
    from transformers.trainer_pt_utils import LabelSmoother

    torch.manual_seed(0)
    model = build_model("tiny", tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    collator = collator_for(tokenizer, model)
    batch = collator(rows(corpora["train"]["bible"], range(8)))
    params = GradientCosineReward.trainable_parameters(model)
    ours = GradientCosineReward.flat_gradient(model, [batch], params, label_smoothing=0.1)
    outputs = model(**{k: v for k, v in batch.items() if k != "labels"})
    loss = LabelSmoother(epsilon=0.1)({"logits": outputs.logits}, batch["labels"])  # what the Trainer trains on
    expected = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-6)
    plain = GradientCosineReward.flat_gradient(model, [batch], params)
    assert not torch.allclose(plain, ours, rtol=1e-3, atol=1e-6)
    with pytest.raises(ValueError, match="label_smoothing"):
        GradientCosineReward(label_smoothing=1.0)


def test_per_pair_train_batches_score_entry_j_i_on_batch_i_j(corpora, tokenizer):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    collator = collator_for(tokenizer, model)
    d0, d1 = domain_batches(corpora, collator, "dev", 8)[:2]
    t0, t1 = domain_batches(corpora, collator, "train", 8)[:2]
    reward = GradientCosineReward(per_pair_train_batches=True)
    # train_batches[i][j]: the batch of train corpus j scored against dev corpus i
    cosine = reward.compute(model, [d0, d1], [[d0, d0], [t0, d1]], seed=0)["cosine"]
    np.testing.assert_allclose([cosine[0, 0], cosine[1, 0], cosine[1, 1]], 1.0, atol=1e-5)  # [j, i] used (i, j)
    assert cosine[0, 1] < 0.99
    # The same batch for every dev corpus is the shared mode, bit for bit.
    shared = GradientCosineReward().compute(model, [d0, d1], [t0, t1], seed=0)["cosine"]
    np.testing.assert_array_equal(reward.compute(model, [d0, d1], [[t0, t1], [t0, t1]], seed=0)["cosine"], shared)
    # Rank shares: each rank reads only its own columns j of every row i.
    full = reward.compute(model, [d0, d1], [[t0, t1], [t1, t0]], seed=0)["cosine"]
    shares = [reward.compute(model, [d0, d1], [[t0, None], [t1, None]], process_index=0, num_processes=2)["cosine"],
              reward.compute(model, [d0, d1], [[None, t1], [None, t0]], process_index=1, num_processes=2)["cosine"]]
    np.testing.assert_array_equal(shares[0] + shares[1], full)
    with pytest.raises(ValueError, match=r"train_batches\[i\]\[j\]"):
        reward.compute(model, [d0, d1], [t0, t1], seed=0)


@pytest.mark.parametrize("per_pair", [False, True])
def test_gradient_passes_per_update(corpora, tokenizer, tiny_model, per_pair):
    """N dev + N train gradients, or N dev + N·N with a fresh train batch per (dev, train) pair."""
    collator = collator_for(tokenizer, tiny_model)
    dev, train = domain_batches(corpora, collator, "dev", 4), domain_batches(corpora, collator, "train", 4)
    n = len(dev)
    reward = GradientCosineReward(per_pair_train_batches=per_pair)
    calls = []
    original = reward.flat_gradient
    reward.flat_gradient = lambda model, batches, params, *args, **kwargs: (
        calls.append(1), original(model, batches, params, *args, **kwargs))[1]
    reward.compute(tiny_model, dev, [train] * n if per_pair else train, seed=0)
    assert len(calls) == (n + n * n if per_pair else 2 * n)


def test_shuffled_pairs_score_lower_than_clean_ones(corpora, tokenizer):
    """A model fit on a clean pool: fresh clean pairs agree with the dev gradient more than mismatched pairs.

    (On held-out dev data the tiny model after a short training has only learnt a target-side language model,
    which shuffled pairs share, so there the two corpora tie; the pool is what it has learnt to translate.)
    """
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    collator = collator_for(tokenizer, model)
    pool = rows(corpora["train"]["bible"], range(64))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(150):
        batch = collator(random.Random(step).sample(pool, 16))
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dev, clean = pool[:32], pool[32:]
    permutation = list(range(32))
    random.Random(0).shuffle(permutation)
    shuffled = [{**clean[i], "labels": clean[permutation[i]]["labels"]} for i in range(32)]
    dev_batches = [sub_batches(collator, dev), sub_batches(collator, dev)]  # both corpora share the trusted dev
    train_batches = [sub_batches(collator, clean), sub_batches(collator, shuffled)]
    reward = GradientCosineReward()
    for seed in (0, 1):
        rewards, _ = reward.finalize(reward.compute(model, dev_batches, train_batches, seed=seed))
        assert rewards[0] > rewards[1] + 0.05, rewards


@pytest.mark.parametrize("dropout", [False, True])
def test_measuring_changes_nothing_in_training(corpora, tokenizer, tiny_model, dropout):
    model = tiny_model
    collator = collator_for(tokenizer, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    model(**collator(rows(corpora["train"]["bible"], range(8)))).loss.backward()
    optimizer.step()
    params = list(model.parameters())
    for k, p in enumerate(params):  # a mix of gradient tensors and None
        p.grad = torch.randn_like(p) if k % 2 == 0 else None
    model.model.encoder.eval()  # a non-uniform mode pattern must come back exactly
    modes = [m.training for m in model.modules()]
    grads = [p.grad for p in params]
    grad_values = [None if g is None else g.clone() for g in grads]
    values = [p.detach().clone() for p in params]
    buffers = [b.clone() for b in model.buffers()]
    optimizer_state = copy.deepcopy(optimizer.state_dict())

    torch.manual_seed(123)
    expected = torch.rand(8)
    torch.manual_seed(123)
    reward = GradientCosineReward(dropout=dropout)
    reward.compute(model, domain_batches(corpora, collator, "dev"), domain_batches(corpora, collator, "train"), seed=7)
    after = torch.rand(8)

    assert torch.equal(after, expected), "the training RNG stream moved"
    assert [m.training for m in model.modules()] == modes
    for p, v in zip(params, values):
        assert torch.equal(p, v)
    for p, g, gv in zip(params, grads, grad_values):
        assert p.grad is g
        if g is not None:
            assert torch.equal(p.grad, gv)
    for b, bv in zip(model.buffers(), buffers):
        assert torch.equal(b, bv)
    state = optimizer.state_dict()
    assert state["param_groups"] == optimizer_state["param_groups"]
    assert state["state"].keys() == optimizer_state["state"].keys()
    for key, entry in state["state"].items():
        for name, value in entry.items():
            assert torch.equal(value, optimizer_state["state"][key][name])


def test_rank_shares_add_up_to_the_whole_matrix(corpora, tokenizer):
    """Every entry comes from exactly one rank; the others contribute exact zeros."""
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    collator = collator_for(tokenizer, model)
    dev, train = domain_batches(corpora, collator, "dev"), domain_batches(corpora, collator, "train")
    reward = GradientCosineReward(dev_sharing="recompute")
    whole = reward.compute(model, dev, train, seed=0)["cosine"]
    shares = [reward.compute(model, dev, train, process_index=r, num_processes=3, seed=r)["cosine"] for r in range(3)]
    for r, share in enumerate(shares):
        others = [j for j in range(4) if j % 3 != r]
        assert (share[others] == 0).all()
    np.testing.assert_allclose(sum(shares), whole, rtol=0, atol=1e-6)
    rewards, extras = reward.finalize({"cosine": sum(shares)})
    np.testing.assert_allclose(rewards, np.asarray(extras["cosine"]).mean(axis=1))


def test_settings_are_checked(corpora, tokenizer, tiny_model):
    with pytest.raises(ValueError, match="dev_sharing"):
        GradientCosineReward(dev_sharing="gather")
    collator = collator_for(tokenizer, tiny_model)
    dev = domain_batches(corpora, collator, "dev", 4)
    with pytest.raises(RuntimeError, match="process group"):
        GradientCosineReward(dev_sharing="broadcast").compute(tiny_model, dev, dev, process_index=0, num_processes=2)
    with pytest.raises(ValueError, match="train batches"):
        GradientCosineReward().compute(tiny_model, dev, None)


@pytest.mark.parametrize("per_pair", [False, True], ids=["shared-train-batches", "per-pair-train-batches"])
def test_trainer_with_multidds_s_records_the_cosine_matrix(tmp_path, corpora, tokenizer, tiny_model, per_pair):
    args = UATConfig(
        output_dir=str(tmp_path / "out"), strategy="multidds-s", max_steps=4, update_every=2, max_tokens=300,
        learning_rate=3e-3, dev_batch_tokens=200, scorer_lr=0.05, scorer_steps=20,
        report_to=[], save_strategy="no", logging_steps=100, use_cpu=True, seed=0, disable_tqdm=True,
        label_smoothing_factor=0.1,
        strategy_settings={"train_batch_tokens": 200, "per_pair_train_batches": per_pair},
    )
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    reward = trainer.balancing.reward
    assert isinstance(reward, GradientCosineReward)
    assert (reward.per_pair_train_batches, reward.label_smoothing, reward.dropout) == (per_pair, 0.1, False)
    assert reward.train_batch_tokens == 200
    assert trainer.train().global_step == 4
    records = [json.loads(line) for line in (tmp_path / "out" / HISTORY_FILE).read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    names = list(corpora["train"])
    for record in records:
        assert list(record["probabilities"]) == names
        own = record["multidds-s"]
        cosine = np.asarray(own["cosine"])
        assert cosine.shape == (4, 4) and np.isfinite(cosine).all() and (np.abs(cosine) <= 1).all()
        assert own["cosine_axes"] == {"rows": "train", "columns": "dev"}
        np.testing.assert_allclose([own["rewards"][n] for n in names], cosine.mean(axis=1))
        assert sum(record["probabilities"].values()) == pytest.approx(1.0)
    assert records[0]["probabilities"] != records[1]["probabilities"]


@pytest.mark.distributed
def test_two_processes_hold_identical_probabilities(tmp_path):
    out = tmp_path / "dist"
    out.mkdir()
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
        str(TESTS / "distributed" / "multidds_run.py"), str(out),
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=TESTS.parent)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    done = [json.loads((out / f"rank{r}.done").read_text()) for r in range(2)]
    for info in done:
        assert info == {"global_step": 6, "num_processes": 2, "distributed": True, "broadcast": True}
    logs = [[json.loads(line) for line in (out / f"rank{r}.jsonl").read_text().splitlines()] for r in range(2)]
    assert [r["step"] for r in logs[0]] == [2, 4, 6]
    assert logs[0] == logs[1]  # p and ψ bit-identical (JSON floats round-trip exactly) after every update
    history = [json.loads(line) for line in (out / "run" / HISTORY_FILE).read_text().splitlines()]
    assert len(history) == 3
    for record, logged in zip(history, logs[0]):
        assert list(record["probabilities"].values()) == logged["p"]
        assert np.asarray(record["multidds-s"]["cosine"]).shape == (4, 4)
        assert np.count_nonzero(np.asarray(record["multidds-s"]["cosine"])) == 16  # both ranks' rows arrived
