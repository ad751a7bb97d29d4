"""CorpusScorer: prior fit, REINFORCE updates on the exact expectation, failure handling, checkpointing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from uat_hf.sampling.priors import validate_probabilities
from uat_hf.strategies import scorer as scorer_module
from uat_hf.strategies.scorer import PRIOR_FITS, RELEASED_FIT_TOLERANCE, CorpusScorer, NonFiniteRewardError

NAMES = ["bible", "descriptions", "dictionary", "software"]
PRIOR = [0.4, 0.3, 0.2, 0.1]
REWARDS = [0.2, 0.9, 0.4, 0.5]


def _assert_distribution(p: np.ndarray, n: int = len(NAMES)) -> None:
    assert p.dtype == np.float64 and p.shape == (n,)
    assert np.all(np.isfinite(p)) and np.all(p > 0)
    assert abs(p.sum() - 1.0) < 1e-12


def test_exact_prior_fit_starts_exactly_at_the_prior():
    scorer = CorpusScorer(NAMES, PRIOR, prior_fit="exact")
    _assert_distribution(scorer.probabilities)
    np.testing.assert_allclose(scorer.probabilities, PRIOR, rtol=0, atol=1e-15)
    # started at the minimiser log q: no Adam step taken
    q = validate_probabilities(PRIOR, NAMES)  # the prior as checked (renormalised) by the scorer
    np.testing.assert_array_equal(scorer.logits, torch.log(torch.from_numpy(q)).numpy())
    assert np.mean((scorer.probabilities - PRIOR) ** 2) < 1e-30
    assert scorer.fit_steps == 0 and scorer.state_dict()["adam"] is None
    assert scorer.state_dict()["adam"] is None  # the fit does not touch the update optimizer
    np.testing.assert_allclose(CorpusScorer(NAMES, [0.25] * 4, prior_fit="exact").probabilities, 0.25, rtol=0,
                               atol=1e-15)


def test_the_prior_belongs_to_the_distribution_and_nothing_refits_the_scorer():
    """ψ is fitted once, when the scorer is built; the prior is the CorpusDistribution's alone, so no public
    refit can move ψ (and p) behind its back."""
    scorer = CorpusScorer(NAMES, PRIOR)
    assert not hasattr(scorer, "fit_to_prior") and not hasattr(scorer, "prior")
    assert "prior" not in scorer.state_dict()


def test_exact_fit_from_another_start_runs_at_most_steps_adam_steps_on_mse():
    scorer = CorpusScorer(NAMES, PRIOR, lr=0.05, steps=300, prior_fit="exact")
    start_mse = float(np.mean((np.full(4, 0.25) - PRIOR) ** 2))
    final_mse = scorer._fit_to_prior(np.asarray(PRIOR), start=[0.0, 0.0, 0.0, 0.0])
    assert final_mse < start_mse / 100 and scorer.fit_steps == 300
    np.testing.assert_allclose(scorer.probabilities, PRIOR, atol=5e-3)
    assert scorer.state_dict()["adam"] is None  # a throw-away Adam: the updates start afresh
    # with the paper's lr 1e-4, 200 steps from uniform barely move: the released fit runs until MSE <= 1e-8
    slow = CorpusScorer(NAMES, PRIOR, prior_fit="exact")
    assert slow._fit_to_prior(np.asarray(PRIOR), start=[0.0] * 4) > start_mse / 2
    with pytest.raises(ValueError, match="finite"):
        slow._fit_to_prior(np.asarray(PRIOR), start=[0.0, float("nan"), 0.0, 0.0])


def _authors_procedure(prior, lr, rewards_per_update, steps):
    """The released fairseq code's scorer, transcribed in float64 torch: BaseActor logits (a constant start,
    feature = ones), pretrain_data_actor's loop, then update_sample_probability's loop -- one Adam throughout."""
    n = len(prior)
    weight = torch.zeros(1, n, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([weight], lr=lr)
    feature = torch.ones(1, n, dtype=torch.float64)
    target = torch.tensor(prior, dtype=torch.float64).view(1, -1)
    loss_value, count = 100.0, 0
    while loss_value > 1e-8:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(torch.softmax(weight * feature, dim=-1), target)
        loss_value = loss.item()
        loss.backward()
        optimizer.step()
        count += 1
    fitted = torch.softmax(weight, dim=-1).detach().view(-1).numpy().copy()
    for rewards in rewards_per_update:
        grad_scale = torch.tensor(rewards, dtype=torch.float64).view(1, -1)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = (-torch.log_softmax(weight * feature, dim=-1) * grad_scale).sum()
            loss.backward()
            optimizer.step()
    return count, fitted, torch.softmax(weight, dim=-1).detach().view(-1).numpy()


def test_released_fit_and_updates_match_the_authors_procedure():
    schedule = [REWARDS, REWARDS[::-1]]
    count, fitted, final = _authors_procedure(PRIOR, 1e-2, schedule, 200)
    scorer = CorpusScorer(NAMES, PRIOR, lr=1e-2)  # prior_fit="released" is the default
    assert scorer.prior_fit == "released"
    assert scorer.fit_steps == count > 100
    np.testing.assert_allclose(scorer.probabilities, fitted, rtol=0, atol=1e-12)
    for rewards in schedule:
        p = scorer.update(rewards)
    np.testing.assert_allclose(p, final, rtol=0, atol=1e-10)
    # A fresh Adam for the updates (prior_fit="exact") ends elsewhere: the carried state matters.
    fresh = CorpusScorer(NAMES, PRIOR, lr=1e-2, prior_fit="exact")
    for rewards in schedule:
        q = fresh.update(rewards)
    assert np.abs(q - final).max() > 100 * np.abs(p - final).max()


def test_released_fit_adam_state_carries_into_the_updates():
    scorer = CorpusScorer(NAMES, PRIOR)
    assert scorer.fit_steps > 5000  # thousands of steps at the paper's lr 1e-4
    state = scorer.state_dict()
    assert state["format"] == 2 and state["prior_fit"] == "released" and state["fit_steps"] == scorer.fit_steps
    assert state["adam"]["step"] == scorer.fit_steps and "update_count" not in state
    assert all(v > 0 for v in state["adam"]["exp_avg_sq"])
    scorer.update(REWARDS)
    assert scorer.state_dict()["adam"]["step"] == scorer.fit_steps + 200
    # a new scorer for the same prior runs the same fit again (from the cache)
    assert CorpusScorer(NAMES, PRIOR).state_dict()["adam"] == state["adam"]


def test_released_fit_ends_within_the_released_tolerance_not_at_the_prior():
    scorer = CorpusScorer(NAMES, PRIOR)
    p = scorer.probabilities
    _assert_distribution(p)
    mse = float(np.mean((p - np.asarray(PRIOR)) ** 2))
    assert mse <= RELEASED_FIT_TOLERANCE == 1e-8
    assert mse == pytest.approx(scorer._fit_to_prior(np.asarray(PRIOR)), rel=1e-12)
    assert np.abs(p - PRIOR).max() > 1e-5  # an approximate fit, as in the released code
    # A uniform prior is met at the uniform start: one Adam step on a zero gradient, ψ stays 0.
    uniform = CorpusScorer(NAMES, [0.25] * 4)
    assert uniform.fit_steps == 1
    np.testing.assert_array_equal(uniform.logits, 0.0)
    np.testing.assert_array_equal(uniform.probabilities, 0.25)


def test_first_updates_move_p_several_times_farther_than_a_fresh_adam():
    """The released fit leaves Adam with bias correction ~1 and a tiny second moment: big early steps."""
    prior, rewards = [0.43, 0.26, 0.19, 0.12], [6.65, 6.41, 6.43, 6.28]  # the demo's first rewards
    names = ["software", "descriptions", "bible", "dictionary"]
    released, exact = CorpusScorer(names, prior), CorpusScorer(names, prior, prior_fit="exact")
    ratios = []
    for _ in range(10):
        before = released.probabilities, exact.probabilities
        moved = [np.abs(s.update(rewards) - b).sum() for s, b in zip((released, exact), before)]
        ratios.append(moved[0] / moved[1])
    assert ratios[0] > 3, ratios
    assert ratios[0] > ratios[4] > ratios[9], ratios  # the gap closes as the second moment catches up


def test_prior_fit_is_checked():
    assert PRIOR_FITS == ("released", "exact")
    with pytest.raises(ValueError, match="prior_fit must be one of released, exact"):
        CorpusScorer(NAMES, PRIOR, prior_fit="log_q")
    with pytest.raises(ValueError, match="prior_fit='exact'"):
        CorpusScorer(NAMES, PRIOR, lr=0.0)  # the released fit could never move
    assert CorpusScorer(NAMES, [0.25] * 4, lr=0.0).fit_steps == 1  # nothing to move: fine


def test_released_fit_that_does_not_converge_is_reported(monkeypatch):
    monkeypatch.setattr(scorer_module, "RELEASED_FIT_MAX_STEPS", 50)
    with pytest.raises(RuntimeError, match="did not reach MSE <= 1e-08 in 50 Adam steps"):
        CorpusScorer(NAMES, [0.4, 0.3, 0.2, 0.1], lr=1.234e-4)  # not in the fit cache


def test_released_fit_is_deterministic_and_the_cache_is_invisible():
    scorer_module._FIT_CACHE.clear()
    first = CorpusScorer(NAMES, PRIOR)
    assert len(scorer_module._FIT_CACHE) == 1
    first.update(REWARDS)  # must not write into the cached fit
    again = CorpusScorer(NAMES, PRIOR)
    scorer_module._FIT_CACHE.clear()
    uncached = CorpusScorer(NAMES, PRIOR)
    assert again.state_dict() == uncached.state_dict()
    np.testing.assert_array_equal(again.update(REWARDS), first.probabilities)
    assert again.state_dict() == first.state_dict()


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


@pytest.mark.parametrize("prior_fit", PRIOR_FITS)
def test_steps_and_lr_are_respected(prior_fit):
    def moved(**kwargs):
        scorer = CorpusScorer(NAMES, PRIOR, prior_fit=prior_fit, **kwargs)
        start = scorer.probabilities
        return np.abs(scorer.update(REWARDS) - start).sum()

    d_one, d_many, d_big = moved(steps=1), moved(steps=200), moved(steps=200, lr=1e-2)
    assert 0 < d_one < d_many < d_big
    # Adam's first step moves each logit by ~lr: 1 step of lr 1e-4 is tiny but non-zero


def test_zero_lr_and_zero_steps_freeze_p():
    frozen = CorpusScorer(NAMES, PRIOR, lr=0.0, prior_fit="exact")
    np.testing.assert_array_equal(frozen.update(REWARDS), frozen.probabilities)
    np.testing.assert_allclose(frozen.probabilities, PRIOR, rtol=0, atol=1e-12)
    zero_steps = CorpusScorer(NAMES, PRIOR, steps=0)
    before = zero_steps.probabilities
    np.testing.assert_array_equal(zero_steps.update(REWARDS), before)


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
    # and the next good update continues exactly as if the bad one never happened
    twin = CorpusScorer(NAMES, PRIOR)
    twin.update(REWARDS)
    np.testing.assert_array_equal(scorer.update(REWARDS), twin.update(REWARDS))


@pytest.mark.parametrize("updates_before", [0, 3])
@pytest.mark.parametrize("prior_fit", PRIOR_FITS)
def test_json_round_trip_continues_bit_identically(updates_before, prior_fit):
    uninterrupted = CorpusScorer(NAMES, PRIOR, prior_fit=prior_fit)
    schedule = [[r + 0.1 * k for r in REWARDS[::-1 if k % 2 else 1]] for k in range(6)]
    for rewards in schedule[:updates_before]:
        uninterrupted.update(rewards)
    state = json.loads(json.dumps(uninterrupted.state_dict()))
    if state["adam"] is not None:
        assert state["adam"]["step"] == uninterrupted.fit_steps + 200 * updates_before
    assert (state["adam"] is None) == (prior_fit == "exact" and updates_before == 0)

    other = "exact" if prior_fit == "released" else "released"
    resumed = CorpusScorer(NAMES, [0.25] * 4, lr=0.5, steps=3, prior_fit=other)  # the state's settings win
    resumed.load_state_dict(state)
    assert (resumed.lr, resumed.steps) == (1e-4, 200)
    assert (resumed.prior_fit, resumed.fit_steps) == (prior_fit, uninterrupted.fit_steps)
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


def test_format_1_states_load_as_exact_and_unknown_formats_are_refused():
    """A state written before prior_fit existed (format 1) continues exactly as that version would have."""
    old = CorpusScorer(NAMES, PRIOR, prior_fit="exact")
    old.update(REWARDS)
    state = old.state_dict()
    v1 = {k: v for k, v in state.items() if k not in ("prior_fit", "fit_steps")}
    v1["format"] = 1
    resumed = CorpusScorer(NAMES, PRIOR)  # a released-fit scorer, as the callback builds it today
    resumed.load_state_dict(json.loads(json.dumps(v1)))
    assert (resumed.prior_fit, resumed.fit_steps) == ("exact", 0)
    np.testing.assert_array_equal(resumed.update(REWARDS), old.update(REWARDS))
    assert resumed.state_dict() == old.state_dict()
    before = resumed.state_dict()
    with pytest.raises(ValueError, match="format 3; this version of uat_hf reads formats 1 and 2"):
        resumed.load_state_dict({**state, "format": 3})
    with pytest.raises(ValueError, match=r"missing keys \['prior_fit'\]"):
        resumed.load_state_dict({k: v for k, v in state.items() if k != "prior_fit"})
    with pytest.raises(ValueError, match="prior_fit must be one of"):
        resumed.load_state_dict({**state, "prior_fit": "bogus"})
    assert resumed.state_dict() == before
