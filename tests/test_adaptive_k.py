"""Adaptive K: MultiUAT's Monte Carlo passes stop once every reward is known to a fraction of their spread, and
run only for the corpora whose rewards are not known yet."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import DataCollatorForSeq2Seq

from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward
from uat_hf.training.uat_config import UATConfig


def dev_batches(corpora, tokenizer, model, names):
    collate = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    batches = []
    for name in names:
        dataset = corpora["dev"][name].select_columns(["input_ids", "attention_mask", "labels"])
        batches.append([collate([dataset[i] for i in range(10)])])
    return batches


def measure(reward, model, batches):
    return reward.rewards_over_ranks(model, batches, process_index=0, num_processes=1, seed=lambda block: 11 + block,
                                     reduce=dict)


def test_stops_at_the_minimum_when_the_rewards_are_well_separated(tiny_model, corpora, tokenizer):
    batches = dev_batches(corpora, tokenizer, tiny_model, ["bible", "dictionary"])
    reward = UncertaintyReward("entsent", 12, mode="loop", tolerance=1e6, min_samples=3)
    rewards, extras = measure(reward, tiny_model, batches)
    assert extras == {"mc_samples_used": 3, "mc_samples_per_corpus": [3, 3]}
    first_block = UncertaintyReward("entsent", 3, mode="loop")
    np.testing.assert_allclose(rewards, first_block.finalize(first_block.compute(tiny_model, batches, seed=11))[0],
                               rtol=1e-12)


def test_runs_every_pass_when_the_rewards_are_not_separated(tiny_model, corpora, tokenizer):
    """The same dev batch for both corpora: their rewards differ by Monte Carlo noise alone, about one standard
    error, never the 20 standard errors a tolerance of 0.05 asks for."""
    batch = dev_batches(corpora, tokenizer, tiny_model, ["bible"])[0]
    reward = UncertaintyReward("entsent", 12, mode="loop", tolerance=0.05, min_samples=3)
    rewards, extras = measure(reward, tiny_model, [batch, batch])
    assert extras == {"mc_samples_used": 12, "mc_samples_per_corpus": [12, 12]}
    assert rewards[0] != rewards[1]  # different masks: the spread is noise


def test_the_stopping_rule_reads_the_standard_errors_against_the_spread(tiny_model, corpora, tokenizer):
    """The rule on measured per-pass rewards: stop iff max_n SE_n <= tolerance * (max_n R_n - min_n R_n)."""
    batches = dev_batches(corpora, tokenizer, tiny_model, ["bible", "dictionary", "software"])
    shares = UncertaintyReward("entsent", 6, mode="loop").compute(tiny_model, batches, seed=3)
    mean = shares["rewards"] / 6
    standard_error = np.sqrt((shares["squares"] / 6 - mean**2) * 6 / 5 / 6)
    ratio = standard_error.max() / (mean.max() - mean.min())
    assert UncertaintyReward("entsent", 12, tolerance=ratio * 1.001, min_samples=3).known(shares).all()
    assert not UncertaintyReward("entsent", 12, tolerance=ratio * 0.999, min_samples=3).known(shares).all()
    assert not UncertaintyReward("entsent", 12, tolerance=ratio * 1.001, min_samples=7).known(shares).all()


def test_only_the_corpora_not_known_yet_run_more_passes(tiny_model, corpora, tokenizer):
    """Two corpora share one dev batch, so their rewards differ by Monte Carlo noise alone; a third differs more.
    With a tolerance between the third's error and the twins', the third is known after the first block and
    stops there, while the twins run on."""
    bible = dev_batches(corpora, tokenizer, tiny_model, ["bible"])[0]
    other = dev_batches(corpora, tokenizer, tiny_model, ["descriptions"])[0]
    batches = [bible, bible, other]
    first = UncertaintyReward("entsent", 3, mode="loop").compute(tiny_model, batches, seed=11)
    reward = UncertaintyReward("entsent", 12, mode="loop", tolerance=0.1, min_samples=3)
    assert reward.known(first).tolist() == [False, False, True]
    rewards, extras = measure(reward, tiny_model, batches)
    twins, third = extras["mc_samples_per_corpus"][:2], extras["mc_samples_per_corpus"][2]
    assert third == 3 and min(twins) > 3
    assert extras["mc_samples_used"] == (sum(twins) + third) / 3
    assert rewards[2] == first["rewards"][2] / 3  # its first block's passes, no more


def test_per_corpus_passes_are_split_across_ranks_without_overlap():
    reward = UncertaintyReward("exptp", 12, tolerance=0.1, min_samples=3)
    passes = np.array([3, 0, 3, 3, 0])
    shares = [reward.passes_for_rank(5, rank, 2, passes) for rank in range(2)]
    assert np.array_equal(sum(shares), passes)
    assert [share.sum() for share in shares] == [5, 4]
    assert np.array_equal(reward.passes_for_rank(4, 1, 3, 5), reward.passes_for_rank(4, 1, 3, [5, 5, 5, 5]))


def test_adaptive_k_is_refused_for_other_strategies_and_impossible_bounds(tmp_path):
    with pytest.raises(ValueError, match="mc_tolerance=0.1 .* strategy is 'multidds-s'"):
        UATConfig(output_dir=str(tmp_path), strategy="multidds-s", mc_tolerance=0.1)
    with pytest.raises(ValueError, match="mc_min_samples=8 > mc_samples=4"):
        UATConfig(output_dir=str(tmp_path), strategy="multiuat", mc_samples=4, mc_min_samples=8, mc_tolerance=0.1)
    with pytest.raises(ValueError, match="mc_tolerance must be > 0"):
        UATConfig(output_dir=str(tmp_path), strategy="multiuat", mc_tolerance=0.0)
