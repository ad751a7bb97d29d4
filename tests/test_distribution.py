"""CorpusDistribution: the one owner of p, its updates, and a checkpoint that must agree with itself."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from uat_hf.strategies.registry import build_distribution

SIZES = {"news": 4000, "law": 1000, "medical": 500}


def test_static_p_is_the_prior_and_only_a_static_p_can_be_set_by_hand():
    fixed = build_distribution("temperature", SIZES)
    assert fixed.version == 0 and not fixed.is_dynamic and not hasattr(fixed.proposer, "scorer")
    fixed.set_probabilities({"news": 0.5, "law": 0.25, "medical": 0.25})
    assert fixed.version == 1 and fixed.as_dict() == {"news": 0.5, "law": 0.25, "medical": 0.25}
    dynamic = build_distribution("multiuat", SIZES)
    with pytest.raises(ValueError, match="p of strategy 'multiuat' follows its scorer; it cannot be set by hand"):
        dynamic.set_probabilities([0.5, 0.25, 0.25])


def test_updates_move_p_and_skipped_ones_are_counted_but_leave_p():
    dynamic = build_distribution("multiuat", SIZES, lr=1e-2, steps=20)
    np.testing.assert_array_equal(dynamic.probabilities, dynamic.prior)
    dynamic.measured(10, [1.0, 2.0, 3.0])
    assert (dynamic.update_count, dynamic.version) == (1, 1)
    np.testing.assert_array_equal(dynamic.probabilities, dynamic.proposer.scorer.probabilities)
    before = dynamic.probabilities
    record = dynamic.measured(20, [float("nan"), 1.0, 1.0])
    assert "skipped" in record and (dynamic.update_count, dynamic.version) == (2, 1)
    np.testing.assert_array_equal(dynamic.probabilities, before)
    assert [r["step"] for r in dynamic.history] == [10, 20]


def test_a_checkpoint_round_trips_and_a_corrupt_or_foreign_one_is_refused():
    dynamic = build_distribution("multiuat", SIZES, lr=1e-2, steps=20)
    dynamic.measured(10, [1.0, 2.0, 3.0])
    state = json.loads(json.dumps(dynamic.state_dict()))
    assert "history" not in state  # a checkpoint keeps only the count of records; balancing_history.jsonl has them
    history = json.loads(json.dumps(dynamic.history))
    resumed = build_distribution("multiuat", SIZES, lr=1e-2, steps=20)
    resumed.load_state_dict(state, history)
    assert resumed.state_dict() == dynamic.state_dict() and resumed.history == dynamic.history

    corrupt = json.loads(json.dumps(state))
    corrupt["probabilities"] = [1 / 3, 1 / 3, 1 / 3]
    with pytest.raises(ValueError, match=r"Inconsistent corpus distribution state: p = .* but softmax\(ψ\)"):
        build_distribution("multiuat", SIZES, lr=1e-2, steps=20).load_state_dict(corrupt)
    with pytest.raises(ValueError, match="0 history records for 1 updates"):
        build_distribution("multiuat", SIZES, lr=1e-2, steps=20).load_state_dict(state, [])
    foreign = [dict(history[0], probabilities={"news": 0.5, "law": 0.25, "medical": 0.25})]
    with pytest.raises(ValueError, match=r"last history record \(step 10\) has p = .* the history is another run's"):
        build_distribution("multiuat", SIZES, lr=1e-2, steps=20).load_state_dict(state,
                                                                                                           foreign)
    with pytest.raises(ValueError, match="trained with strategy 'multiuat', this run uses 'multidds-s'"):
        build_distribution("multidds-s", SIZES, lr=1e-2, steps=20).load_state_dict(state,
                                                                                                             history)

    # Resuming with other prior settings would silently keep the old p: refused.
    tau5 = build_distribution("temperature", SIZES)
    with pytest.raises(ValueError, match=r"The checkpoint's prior is .* this run's .*the prior settings"):
        build_distribution("temperature", SIZES, temperature=2.0).load_state_dict(tau5.state_dict())


def test_every_record_has_the_same_top_level_fields_and_the_strategy_s_own_under_its_name():
    dynamic = build_distribution("multiuat", SIZES, lr=1e-2, steps=20)
    first = dynamic.measured(10, [1.0, 2.0, 3.0], {"measure": "exptp"}, seconds=0.5)
    second = dynamic.measured(20, [float("nan"), 1.0, 1.0])
    assert list(first) == ["step", "strategy", "prior", "probabilities", "seconds", "multiuat"]
    assert list(second) == ["step", "strategy", "probabilities", "skipped", "seconds", "multiuat"]  # prior: once
    assert first["multiuat"] == {"rewards": {"news": 1.0, "law": 2.0, "medical": 3.0}, "measure": "exptp"}
    assert first["seconds"] == 0.5 and first["prior"] == dict(zip(SIZES, dynamic.prior.tolist()))

    static = build_distribution("proportional", SIZES)
    start = static.record_start()
    assert list(start) == ["step", "strategy", "prior", "probabilities", "seconds", "proportional"]
    assert start["probabilities"] == start["prior"] and start["proportional"] == {} and static.update_count == 1
    with pytest.raises(ValueError, match="keeps p fixed; it has no balancing update"):
        static.measured(10, [1.0, 2.0, 3.0])


def test_an_old_state_format_is_refused_with_what_to_do():
    state = build_distribution("multiuat", SIZES, lr=1e-2, steps=20).state_dict()
    with pytest.raises(ValueError, match=r"format 2 \(this uat_hf reads formats 3 and 4\); it was written by an"):
        build_distribution("multiuat", SIZES, lr=1e-2, steps=20).load_state_dict({**state, "format": 2})


def test_an_update_that_jumps_most_of_the_way_to_uniform_is_said_once_naming_the_step_setting(caplog):
    """The README example's first update used to send p from the prior to uniform in one step, silently."""
    far = {"big": 2_000_000, "small": 5_000}  # p = 0.9975 / 0.0025
    jumpy = build_distribution("multiuat", far, lr=1.0, steps=200)
    with caplog.at_level(logging.WARNING, logger="uat_hf"):
        jumpy.measured(10, [1.0, 1.0])  # equal rewards: the scorer heads for uniform
        jumpy.measured(20, [1.0, 1.0])
    said = [r.getMessage() for r in caplog.records if "in one step" in r.getMessage()]
    assert len(said) == 1 and "Lower scorer_lr for gradual balancing" in said[0] and "step 10" in said[0]
    assert jumpy.as_dict()["small"] > 0.25
    caplog.clear()
    gentle = build_distribution("multiuat", far, lr=1e-4, steps=20)
    with caplog.at_level(logging.WARNING, logger="uat_hf"):
        gentle.measured(10, [1.0, 1.0])
    assert gentle.as_dict()["small"] > 0.0025 and not caplog.records  # it moved, by a step, not a jump
