"""CorpusDistribution: the one owner of p, its updates, and a checkpoint that must agree with itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from uat_hf.sampling.distribution import CorpusDistribution

SIZES = {"news": 4000, "law": 1000, "medical": 500}


def test_static_p_is_the_prior_and_only_a_static_p_can_be_set_by_hand():
    fixed = CorpusDistribution.for_strategy("temperature", SIZES)
    assert fixed.version == 0 and fixed.scorer is None
    fixed.set_probabilities({"news": 0.5, "law": 0.25, "medical": 0.25})
    assert fixed.version == 1 and fixed.as_dict() == {"news": 0.5, "law": 0.25, "medical": 0.25}
    dynamic = CorpusDistribution.for_strategy("multiuat", SIZES)
    with pytest.raises(ValueError, match="p of strategy 'multiuat' follows its scorer; it cannot be set by hand"):
        dynamic.set_probabilities([0.5, 0.25, 0.25])


def test_updates_move_p_and_skipped_ones_are_counted_but_leave_p():
    dynamic = CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20)
    np.testing.assert_array_equal(dynamic.probabilities, dynamic.prior)
    dynamic.update([1.0, 2.0, 3.0], {"step": 10})
    assert (dynamic.update_count, dynamic.version) == (1, 1)
    np.testing.assert_array_equal(dynamic.probabilities, dynamic.scorer.probabilities)
    before = dynamic.probabilities
    record = dynamic.update([float("nan"), 1.0, 1.0], {"step": 20})
    assert "skipped" in record and (dynamic.update_count, dynamic.version) == (2, 1)
    np.testing.assert_array_equal(dynamic.probabilities, before)
    assert [r["step"] for r in dynamic.history] == [10, 20]


def test_a_checkpoint_round_trips_and_a_corrupt_or_foreign_one_is_refused():
    dynamic = CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20)
    dynamic.update([1.0, 2.0, 3.0], {"step": 10})
    state = json.loads(json.dumps(dynamic.state_dict()))
    assert "history" not in state  # a checkpoint keeps only the count of records; balancing_history.jsonl has them
    history = json.loads(json.dumps(dynamic.history))
    resumed = CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20)
    resumed.load_state_dict(state, history)
    assert resumed.state_dict() == dynamic.state_dict() and resumed.history == dynamic.history

    corrupt = json.loads(json.dumps(state))
    corrupt["probabilities"] = [1 / 3, 1 / 3, 1 / 3]
    with pytest.raises(ValueError, match=r"Inconsistent corpus distribution state: p = .* but softmax\(ψ\)"):
        CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20).load_state_dict(corrupt)
    with pytest.raises(ValueError, match="0 history records for 1 updates"):
        CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20).load_state_dict(state, [])
    foreign = [dict(history[0], probabilities={"news": 0.5, "law": 0.25, "medical": 0.25})]
    with pytest.raises(ValueError, match=r"last history record \(step 10\) has p = .* the history is another run's"):
        CorpusDistribution.for_strategy("multiuat", SIZES, scorer_lr=1e-2, scorer_steps=20).load_state_dict(state,
                                                                                                           foreign)
    with pytest.raises(ValueError, match="trained with strategy 'multiuat', this run uses 'multidds-s'"):
        CorpusDistribution.for_strategy("multidds-s", SIZES, scorer_lr=1e-2, scorer_steps=20).load_state_dict(state,
                                                                                                             history)

    # Resuming with other prior settings would silently keep the old p: refused.
    tau5 = CorpusDistribution.for_strategy("temperature", SIZES)
    with pytest.raises(ValueError, match=r"The checkpoint's prior is .* this run's .*the prior settings"):
        CorpusDistribution.for_strategy("temperature", SIZES, temperature=2.0).load_state_dict(tau5.state_dict())
