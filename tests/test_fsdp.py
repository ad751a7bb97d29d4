"""Sharded training (FSDP, DeepSpeed ZeRO-3): the MC-dropout schedule is collective-safe, MultiDDS-S is refused.

Under a sharded model every forward pass gathers parameters from all ranks, so every rank must run the same
number of forwards in an update. The plain split of the K·N passes does not (checked here: 11 forwards
against 7 hang FSDP2 on gloo); the padded schedule does, and its rewards are bit-identical to the split's.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import MarianConfig, MarianMTModel

from conftest import launch_two_ranks
from uat_hf.models.modes import sharding
from uat_hf.strategies.multidds_s.gradient_cosine import GradientCosineReward
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward

HERE = Path(__file__).parent
PAD = 63


def fake_batch(rows: int, width: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, PAD, (rows, width), generator=generator)
    labels = torch.randint(1, PAD, (rows, width), generator=generator)
    decoder = torch.cat([torch.full((rows, 1), PAD), labels[:, :-1]], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": decoder, "labels": labels}


def small_marian() -> MarianMTModel:
    torch.manual_seed(0)
    return MarianMTModel(MarianConfig(
        vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=PAD, eos_token_id=0, decoder_start_token_id=PAD, dropout=0.1))


def zero3_like(model: MarianMTModel) -> MarianMTModel:
    """What DeepSpeed ZeRO-3 leaves on a model's parameters (``ds_id``), without DeepSpeed."""
    for i, parameter in enumerate(model.parameters()):
        parameter.ds_id = i
    return model


def forwards_of(reward: UncertaintyReward, dev_batches, rank: int, ranks: int, replicate: bool, padded: bool) -> int:
    counts, extra = reward.forward_plan(dev_batches, rank, ranks, replicate=replicate, padded=padded)
    real = sum(len(reward._chunks(b, int(c), replicate)) for bs, c in zip(dev_batches, counts) if c for b in bs)
    return real + extra


def test_fsdp_padded_schedule_gives_every_rank_the_same_forwards_and_each_pass_once():
    rng = np.random.default_rng(0)
    unequal = 0
    for corpora, k, ranks, replicate in itertools.product((1, 2, 3, 5), (1, 2, 3, 7), (1, 2, 3, 4, 8), (False, True)):
        shapes = [[(int(rng.integers(1, 5)), int(rng.integers(2, 9))) for _ in range(rng.integers(1, 4))]
                  for _ in range(corpora)]
        dev_batches = [[{"input_ids": torch.zeros(r, w), "labels": torch.zeros(r, w)} for r, w in bs] for bs in shapes]
        reward = UncertaintyReward("entsent", k, replicate_tokens=20)
        padded = {forwards_of(reward, dev_batches, r, ranks, replicate, True) for r in range(ranks)}
        split = {forwards_of(reward, dev_batches, r, ranks, replicate, False) for r in range(ranks)}
        assert len(padded) == 1 and padded == {max(split)}, (corpora, k, ranks, replicate)
        unequal += len(split) > 1
        # Every (corpus, pass) is real on exactly one rank: item n·K + k belongs to rank (n·K + k) mod P.
        owners = np.zeros((corpora, k), dtype=int)
        for r in range(ranks):
            counts, _ = reward.forward_plan(dev_batches, r, ranks, replicate=replicate, padded=True)
            owners[np.arange(corpora * k).reshape(corpora, k) % ranks == r] += 1
            assert np.array_equal(counts, (np.arange(corpora * k).reshape(corpora, k) % ranks == r).sum(axis=1))
        assert (owners == 1).all()
    assert unequal > 50  # the split is unequal often: the padding is what makes it safe


@pytest.mark.parametrize("ranks, k, mode", [(2, 3, "loop"), (3, 2, "loop"), (2, 3, "replicate")])
def test_fsdp_padded_rewards_are_bit_identical_to_the_split_and_forwards_equal(ranks, k, mode):
    generator = torch.Generator().manual_seed(1)
    dev_batches = [[fake_batch(2, 5, generator), fake_batch(3, 7, generator)], [fake_batch(4, 6, generator)],
                   [fake_batch(1, 4, generator), fake_batch(2, 8, generator), fake_batch(3, 3, generator)]]
    model = small_marian()
    calls: list[int] = []
    model.model.encoder.register_forward_pre_hook(lambda module, args: calls.append(1))  # once per forward

    def run(schedule: str) -> tuple[np.ndarray, list[int]]:
        reward = UncertaintyReward("entsent", k, mode=mode, replicate_tokens=30, schedule=schedule)
        total, forwards = np.zeros(3), []
        for rank in range(ranks):
            calls.clear()
            total = total + reward.compute(model, dev_batches, process_index=rank, num_processes=ranks,
                                           seed=100 + rank)["rewards"]
            forwards.append(len(calls))
        return total, forwards

    split, split_forwards = run("split")
    padded, padded_forwards = run("padded")
    assert np.array_equal(split, padded)  # bit for bit: the real passes and their masks are the split's
    assert len(set(split_forwards)) > 1 and len(set(padded_forwards)) == 1
    assert padded_forwards[0] == max(split_forwards)


def test_fsdp_sharding_is_detected_and_auto_pads_only_sharded_models():
    model = small_marian()
    assert sharding(model) is None
    assert sharding(model, SimpleNamespace(distributed_type="DistributedType.FSDP")) == "FSDP"
    zero3 = SimpleNamespace(distributed_type="DEEPSPEED", state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(
        zero_stage=3)))
    assert sharding(model, zero3) == "DeepSpeed ZeRO-3"
    zero3.state.deepspeed_plugin.zero_stage = 2
    assert sharding(model, zero3) is None  # ZeRO-2 keeps whole parameters: forwards are not collectives
    dev_batches = [[fake_batch(2, 4)], [fake_batch(2, 4)], [fake_batch(2, 4)]]
    reward = UncertaintyReward("entsent", 1, mode="loop")
    calls: list[int] = []
    model.model.encoder.register_forward_pre_hook(lambda module, args: calls.append(1))  # once per forward
    reward.compute(model, dev_batches, process_index=1, num_processes=2)  # rank 1 owns 1 of 3 passes
    assert len(calls) == 1
    calls.clear()
    reward.compute(zero3_like(model), dev_batches, process_index=1, num_processes=2)
    assert len(calls) == 2  # padded to rank 0's two forwards


def test_fsdp_and_zero3_models_are_refused_by_multidds_s():
    reward = GradientCosineReward()
    reward.check_model(small_marian())  # whole (or DDP) models are fine
    with pytest.raises(ValueError, match=r"multidds-s.*\(FSDP\)"):
        reward.check_model(small_marian(), SimpleNamespace(distributed_type="FSDP"))
    batches = [[fake_batch(2, 4)], [fake_batch(2, 4)]]
    with pytest.raises(ValueError, match=r"multidds-s.*DeepSpeed ZeRO-3"):  # at the update too, not only at attach
        reward.compute(zero3_like(small_marian()), batches, batches)


def test_fsdp_accelerator_makes_attach_refuse_multidds_s_before_training(tokenizer):
    from uat_hf.models.presets import build_model
    from uat_hf.training.balancing import balancing_reward
    from uat_hf.training.uat_config import UATConfig

    config = UATConfig(output_dir="unused", strategy="multidds-s", report_to=[], use_cpu=True)
    model = build_model("tiny", tokenizer)
    accelerator = SimpleNamespace(distributed_type="FSDP")
    with pytest.raises(ValueError, match=r"strategy 'multidds-s'.*sharded across ranks \(FSDP\)"):
        balancing_reward(config, model, tokenizer, accelerator)
    multiuat = UATConfig(output_dir="unused", strategy="multiuat", report_to=[], use_cpu=True)
    assert balancing_reward(multiuat, model, tokenizer, accelerator) is not None  # MultiUAT runs sharded


@pytest.mark.distributed
def test_fsdp2_sharded_model_on_two_gloo_ranks_measures_without_hanging(tmp_path):
    launch_two_ranks(HERE / "distributed" / "fsdp_mc_run.py", tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for record in ranks:
        assert record["world"] == 2 and record["sharding"] == "FSDP"
        assert record["rewards"] == record["expected"]  # bit-identical to the unsharded split computation
        assert record["grads_none_after_measuring"] and record["trained"]
    assert ranks[0]["forwards"] == ranks[1]["forwards"] == 11  # rank 1's 7 real forwards padded to 11
