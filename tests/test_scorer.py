"""CorpusScorer: prior fit, REINFORCE updates on the exact expectation, failure handling, checkpointing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from uat_hf.scorer import CorpusScorer, NonFiniteRewardError

NAMES = ["bible", "descriptions", "dictionary", "software"]
PRIOR = [0.4, 0.3, 0.2, 0.1]
REWARDS = [0.2, 0.9, 0.4, 0.5]


def _assert_distribution(p: np.ndarray, n: int = len(NAMES)) -> None:
    assert p.dtype == np.float64 and p.shape == (n,)
    assert np.all(np.isfinite(p)) and np.all(p > 0)
    assert abs(p.sum() - 1.0) < 1e-12


def test_initial_probabilities_equal_prior_and_fit_is_exact():
    scorer = CorpusScorer(NAMES, PRIOR)
    _assert_distribution(scorer.probabilities)
    np.testing.assert_allclose(scorer.probabilities, PRIOR, rtol=0, atol=1e-15)
    # started at the minimiser log q: no Adam step taken
    np.testing.assert_array_equal(scorer.logits, torch.log(torch.from_numpy(scorer.prior)).numpy())
    assert scorer.fit_to_prior() < 1e-30
    assert scorer.update_count == 0
    assert scorer.state_dict()["adam"] is None  # the fit does not touch the update optimizer
    # refit to another prior
    assert scorer.fit_to_prior([0.25] * 4) < 1e-30
    np.testing.assert_allclose(scorer.probabilities, 0.25, rtol=0, atol=1e-15)


def test_fit_to_prior_from_another_start_runs_adam_on_mse():
    # the authors' procedure from an arbitrary start: Adam on MSE(softmax(psi), q) gets there
    scorer = CorpusScorer(NAMES, PRIOR, lr=0.05, steps=300)
    start_mse = float(np.mean((np.full(4, 0.25) - PRIOR) ** 2))
    final_mse = scorer.fit_to_prior(start=[0.0, 0.0, 0.0, 0.0])
    assert final_mse < start_mse / 100
    np.testing.assert_allclose(scorer.probabilities, PRIOR, atol=5e-3)
    # with the paper's lr 1e-4 and 200 steps, a fit from uniform barely moves: why we start at log q
    slow = CorpusScorer(NAMES, PRIOR)
    assert slow.fit_to_prior(start=[0.0] * 4) > start_mse / 2
    with pytest.raises(ValueError, match="finite"):
        slow.fit_to_prior(start=[0.0, float("nan"), 0.0, 0.0])


def test_prior_validation():
    with pytest.raises(ValueError, match="sum"):
        CorpusScorer(NAMES, [0.5, 0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="4 corpora"):
        CorpusScorer(NAMES, [0.5, 0.5])
    with pytest.raises(ValueError, match="cannot represent 0"):
        CorpusScorer(NAMES, [0.5, 0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="unique"):
        CorpusScorer(["a", "a"], [0.5, 0.5])


@pytest.mark.parametrize("winner", range(len(NAMES)))
def test_larger_reward_increases_that_probability(winner):
    scorer = CorpusScorer(NAMES, PRIOR)
    before = scorer.probabilities
    rewards = [1.0] * len(NAMES)
    rewards[winner] = 3.0
    after = scorer.update(rewards)
    _assert_distribution(after)
    assert after[winner] > before[winner]
    assert scorer.update_count == 1
    np.testing.assert_array_equal(after, scorer.probabilities)


def test_mapping_rewards_equal_sequence_rewards():
    a, b = CorpusScorer(NAMES, PRIOR), CorpusScorer(NAMES, PRIOR)
    pa = a.update(REWARDS)
    pb = b.update(dict(reversed(list(zip(NAMES, REWARDS)))))  # order of the mapping must not matter
    np.testing.assert_array_equal(pa, pb)
    with pytest.raises(ValueError, match="missing"):
        a.update({"bible": 1.0})
    with pytest.raises(ValueError, match="unknown"):
        a.update({**dict(zip(NAMES, REWARDS)), "ted": 1.0})
    with pytest.raises(ValueError, match="3 rewards"):
        a.update([1.0, 2.0, 3.0])


def test_fixed_rewards_drive_p_to_r_over_sum_r():
    scorer = CorpusScorer(NAMES, PRIOR, lr=0.05, steps=200)
    target = np.asarray(REWARDS) / np.sum(REWARDS)
    distance = [np.abs(scorer.probabilities - target).max()]
    for _ in range(10):
        p = scorer.update(REWARDS)
        _assert_distribution(p)
        distance.append(np.abs(p - target).max())
    assert distance[-1] < 1e-3 < distance[0]
    # the paper's settings move the same way, only slowly
    slow = CorpusScorer(NAMES, PRIOR)
    p = slow.update(REWARDS)
    assert np.abs(p - target).max() < np.abs(np.asarray(PRIOR) - target).max()
    assert np.abs(p - np.asarray(PRIOR)).max() < 0.05


def test_steps_and_lr_are_respected():
    one = CorpusScorer(NAMES, PRIOR, steps=1).update(REWARDS)
    many = CorpusScorer(NAMES, PRIOR, steps=200).update(REWARDS)
    big = CorpusScorer(NAMES, PRIOR, steps=200, lr=1e-2).update(REWARDS)
    prior = np.asarray(PRIOR)
    d_one, d_many, d_big = (np.abs(p - prior).sum() for p in (one, many, big))
    assert 0 < d_one < d_many < d_big
    # Adam's first step moves each logit by ~lr: 1 step of lr 1e-4 is tiny but non-zero
    frozen = CorpusScorer(NAMES, PRIOR, lr=0.0)
    np.testing.assert_array_equal(frozen.update(REWARDS), frozen.probabilities)
    np.testing.assert_allclose(frozen.probabilities, PRIOR, rtol=0, atol=1e-12)
    zero_steps = CorpusScorer(NAMES, PRIOR, steps=0)
    before = zero_steps.probabilities
    np.testing.assert_array_equal(zero_steps.update(REWARDS), before)
    assert zero_steps.update_count == 1


def test_deterministic_bit_identical():
    runs = []
    for _ in range(2):
        scorer = CorpusScorer(NAMES, PRIOR)
        history = [scorer.update([r * (k + 1) for r in REWARDS]) for k in range(3)]
        runs.append((np.stack(history), scorer.state_dict()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_update_works_under_no_grad_and_inference_mode():
    reference = CorpusScorer(NAMES, PRIOR).update(REWARDS)
    with torch.no_grad():
        np.testing.assert_array_equal(CorpusScorer(NAMES, PRIOR).update(REWARDS), reference)
    with torch.inference_mode():
        scorer = CorpusScorer(NAMES, PRIOR)
        np.testing.assert_array_equal(scorer.update(REWARDS), reference)
        state = scorer.state_dict()
        restored = CorpusScorer(NAMES, PRIOR)
        restored.load_state_dict(state)
    # objects built under inference_mode keep working outside it (no inference tensors inside)
    np.testing.assert_array_equal(scorer.update(REWARDS), restored.update(REWARDS))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_reward_leaves_everything_unchanged(bad):
    scorer = CorpusScorer(NAMES, PRIOR)
    scorer.update(REWARDS)  # so there is Adam state to protect
    state, probs = scorer.state_dict(), scorer.probabilities
    rewards = dict(zip(NAMES, REWARDS))
    rewards["dictionary"] = bad
    with pytest.raises(NonFiniteRewardError) as info:
        scorer.update(rewards)
    assert isinstance(info.value, ValueError)
    assert list(info.value.corpora) == ["dictionary"]
    assert "dictionary" in str(info.value) and "bible" not in str(info.value)
    assert scorer.state_dict() == state
    np.testing.assert_array_equal(scorer.probabilities, probs)
    assert scorer.update_count == 1
    # and the next good update continues exactly as if the bad one never happened
    twin = CorpusScorer(NAMES, PRIOR)
    twin.update(REWARDS)
    np.testing.assert_array_equal(scorer.update(REWARDS), twin.update(REWARDS))


@pytest.mark.parametrize("updates_before", [0, 3])
def test_json_round_trip_continues_bit_identically(updates_before):
    uninterrupted = CorpusScorer(NAMES, PRIOR)
    schedule = [[r + 0.1 * k for r in REWARDS[::-1 if k % 2 else 1]] for k in range(6)]
    for rewards in schedule[:updates_before]:
        uninterrupted.update(rewards)
    state = json.loads(json.dumps(uninterrupted.state_dict()))
    assert state["update_count"] == updates_before
    if updates_before:
        assert state["adam"]["step"] == 200 * updates_before

    resumed = CorpusScorer(NAMES, [0.25] * 4, lr=0.5, steps=3)  # constructor hparams are overridden by the state
    resumed.load_state_dict(state)
    assert (resumed.lr, resumed.steps, resumed.update_count) == (1e-4, 200, updates_before)
    np.testing.assert_array_equal(resumed.probabilities, uninterrupted.probabilities)
    for rewards in schedule[updates_before:]:
        np.testing.assert_array_equal(resumed.update(rewards), uninterrupted.update(rewards))
    assert resumed.state_dict() == uninterrupted.state_dict()


def test_round_trip_without_adam_state_differs_from_with_it():
    # guards against a state_dict that silently drops the optimizer moments
    a = CorpusScorer(NAMES, PRIOR)
    a.update(REWARDS)
    state = json.loads(json.dumps(a.state_dict()))
    state["adam"] = None
    b = CorpusScorer(NAMES, PRIOR)
    b.load_state_dict(state)
    assert not np.array_equal(a.update(REWARDS), b.update(REWARDS))


def test_load_with_wrong_names_errors_clearly():
    state = CorpusScorer(NAMES, PRIOR).state_dict()
    other = CorpusScorer(["a", "b", "c", "d"], PRIOR)
    before = other.state_dict()
    with pytest.raises(ValueError, match=r"corpora \['bible'.*but this scorer has \['a'"):
        other.load_state_dict(state)
    assert other.state_dict() == before
    reordered = CorpusScorer(NAMES[::-1], PRIOR)
    with pytest.raises(ValueError, match="order"):
        reordered.load_state_dict(state)
    broken = dict(state, logits=[0.0, float("nan"), 0.0, 0.0])
    with pytest.raises(ValueError, match="logits"):
        CorpusScorer(NAMES, PRIOR).load_state_dict(broken)
    with pytest.raises(ValueError, match="missing keys"):
        CorpusScorer(NAMES, PRIOR).load_state_dict({"names": NAMES})
