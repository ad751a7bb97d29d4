"""Uncertainty measures against values worked out by hand on small probability tables."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from uat_hf.strategies.multiuat.measures import (
    ALL_MEASURES,
    MEASURES,
    RELEASED_CODE_MEASURES,
    eos_positions,
    needs_entropy,
    needs_eos,
    position_statistics,
    sentence_uncertainty,
)

LN2 = math.log(2.0)

# Probability rows over a 4-token vocabulary; m = max prob, H = entropy, both known in closed form.
R1 = [0.5, 0.25, 0.125, 0.125]  # m = 0.5,  H = 0.5 ln2 + 0.25 ln4 + 2 * 0.125 ln8 = 1.75 ln2
R2 = [0.25, 0.25, 0.25, 0.25]  # m = 0.25, H = ln4 = 2 ln2
R3 = [0.0, 1.0, 0.0, 0.0]  # m = 1,    H = 0    (log 0 = -inf logits)
R4 = [0.1, 0.8, 0.0, 0.1]  # m = 0.8,  H = -(0.8 ln0.8 + 2 * 0.1 ln0.1)
H1, H2, H3 = 1.75 * LN2, 2 * LN2, 0.0
H4 = -(0.8 * math.log(0.8) + 0.2 * math.log(0.1))

# Garbage at pad positions: must never reach a result.
GARBAGE = [float("nan"), float("inf"), -1e30, 3.0]

# Sentence A: R1 R2 R4 <pad>          (3 real positions, EOS at position 2)
# Sentence B: R3 R1 <pad> <pad>       (2 real positions, EOS at position 0 -- any position must work)
# Sentence C: R2 <pad> <pad> <pad>    (1 real position,  EOS at position 0)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
EOS = torch.tensor([2, 0, 0])

# Expected values, by hand.
# A: m = (0.5, 0.25, 0.8) = (30, 15, 48)/60; mean 31/60; deviations (-1, -16, 17)/60 -> Var = 546/3600/3 = 182/3600
# B: m = (1, 0.5); mean 0.75; Var = 0.0625
# C: m = (0.25,)
EXPECTED = {
    "pretp": [1 - 0.5 * 0.25 * 0.8, 1 - 1.0 * 0.5, 1 - 0.25],  # 0.9, 0.5, 0.75
    "exptp": [1 - 31 / 60, 1 - 0.75, 1 - 0.25],
    "vartp": [182 / 3600, 0.0625, 0.0],
    "comev": [(182 / 3600) / (31 / 60), 0.0625 / 0.75, 0.0],  # 182/1860, 1/12, 0
    "entsent": [(H1 + H2 + H4) / 3, (H3 + H1) / 2, H2],
    "enteos": [H4, H3, H2],
    # released-code variants
    "exptp_geometric": [1 - 0.1 ** (1 / 3), 1 - math.sqrt(0.5), 0.75],
    # vartp_log / comev_log: unbiased variance (divide by T - 1) as the released code's torch.var
    "vartp_log": [
        statistics.variance([math.log(0.5), math.log(0.25), math.log(0.8)]),
        (LN2**2) / 2,  # log m = (0, -ln2): deviations ±ln2/2, squares sum to ln2²/2, over T - 1 = 1
        0.0,  # one position: 0 (torch.var would give NaN)
    ],
    "comev_log": [
        math.exp(
            statistics.variance([math.log(0.5), math.log(0.25), math.log(0.8)]) / (math.log(0.1) / 3)
        ),
        0.5,  # exp((ln2²/2) / (-ln2/2)) = exp(-ln2)
        1.0,  # variance 0 -> exp(0)
    ],
}


def _logits(dtype: torch.dtype) -> torch.Tensor:
    rows = [[R1, R2, R4, GARBAGE], [R3, R1, GARBAGE, GARBAGE], [R2, GARBAGE, GARBAGE, GARBAGE]]
    probs = torch.tensor(rows, dtype=torch.float64)
    logits = probs.log()  # log of the chosen probabilities: softmax(logits) = probs exactly
    # garbage rows are not probabilities: put the raw garbage in as logits
    garbage = torch.tensor(GARBAGE, dtype=torch.float64)
    logits[~MASK] = garbage
    return logits.to(dtype)


def test_measure_names():
    assert MEASURES == ("pretp", "exptp", "vartp", "comev", "entsent", "enteos")
    assert set(RELEASED_CODE_MEASURES) == {"exptp_geometric", "vartp_log", "comev_log"}
    assert set(EXPECTED) == set(ALL_MEASURES)
    assert [m for m in ALL_MEASURES if needs_entropy(m)] == ["entsent", "enteos"]
    assert [m for m in ALL_MEASURES if needs_eos(m)] == ["enteos"]
    with pytest.raises(ValueError, match="pretp"):
        needs_entropy("bogus")


def test_position_statistics_on_hand_built_rows():
    max_prob, entropy = position_statistics(_logits(torch.float64))
    assert max_prob.shape == entropy.shape == (3, 4)
    expected_m = torch.tensor([[0.5, 0.25, 0.8], [1.0, 0.5, 0], [0.25, 0, 0]], dtype=torch.float64)
    expected_h = torch.tensor([[H1, H2, H4], [H3, H1, 0], [H2, 0, 0]], dtype=torch.float64)
    real = MASK[:, :3]
    torch.testing.assert_close(max_prob[:, :3][real], expected_m[real], rtol=0, atol=1e-12)
    torch.testing.assert_close(entropy[:, :3][real], expected_h[real], rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("measure", ALL_MEASURES)
def test_sentence_uncertainty_matches_hand_values(measure, dtype, atol):
    max_prob, entropy = position_statistics(_logits(dtype))
    assert max_prob.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    value = sentence_uncertainty(measure, max_prob, entropy, MASK, EOS)
    assert value.shape == (3,)
    assert torch.isfinite(value).all(), value
    torch.testing.assert_close(value.double(), torch.tensor(EXPECTED[measure], dtype=torch.float64), rtol=0, atol=atol)


def test_pad_values_are_ignored_even_when_nan():
    max_prob, entropy = position_statistics(_logits(torch.float64))
    assert torch.isnan(max_prob[~MASK]).any()  # the garbage really is there
    for measure in ALL_MEASURES:
        clean_m = max_prob.masked_fill(~MASK, 0.3)
        clean_h = entropy.masked_fill(~MASK, 7.0)
        torch.testing.assert_close(
            sentence_uncertainty(measure, max_prob, entropy, MASK, EOS),
            sentence_uncertainty(measure, clean_m, clean_h, MASK, EOS),
            rtol=0,
            atol=0,
        )


def test_entropy_free_measures_accept_no_entropy():
    max_prob, _ = position_statistics(_logits(torch.float64))
    value = sentence_uncertainty("pretp", max_prob, None, MASK)
    torch.testing.assert_close(value, torch.tensor(EXPECTED["pretp"], dtype=torch.float64))
    with pytest.raises(ValueError, match="entropy"):
        sentence_uncertainty("entsent", max_prob, None, MASK)


def test_enteos_uses_the_given_position_per_sentence():
    max_prob, entropy = position_statistics(_logits(torch.float64))
    other = sentence_uncertainty("enteos", max_prob, entropy, MASK, torch.tensor([1, 1, 0]))
    torch.testing.assert_close(other, torch.tensor([H2, H1, H2], dtype=torch.float64))


def test_pretp_is_not_length_normalised_and_stable_for_long_sentences():
    # 2000 positions of m = 0.5: Π m underflows nothing in log space, result is 1 - 2^-2000 -> 1.
    m = torch.full((1, 2000), 0.5, dtype=torch.float64)
    mask = torch.ones_like(m, dtype=torch.bool)
    assert sentence_uncertainty("pretp", m, None, mask).item() == 1.0
    # tiny uncertainty keeps full precision (expm1): m = 1 - 1e-12 on one position
    m = torch.tensor([[1 - 1e-12]], dtype=torch.float64)
    value = sentence_uncertainty("pretp", m, None, torch.ones_like(m, dtype=torch.bool)).item()
    assert value == pytest.approx(1e-12, rel=1e-3)


def test_released_variants_use_torch_var_as_the_released_code():
    """vartp_log/comev_log per sentence equal the released code's torch.var(masked_select(log m, mask)).

    Hand values: log m = (ln 0.5, ln 0.25, ln 0.8) has mean -ln(10)/3 and unbiased variance
    Σ(x - mean)² / 2; for a 1-token sentence torch.var is NaN and ours is 0 (comev_log 1).
    """
    max_prob, entropy = position_statistics(_logits(torch.float64))
    log_m = max_prob.log()
    released_var = [torch.var(torch.masked_select(log_m[i], MASK[i])).item() for i in range(2)]
    logs = [math.log(0.5), math.log(0.25), math.log(0.8)]
    mean = sum(logs) / 3
    assert released_var[0] == pytest.approx(sum((x - mean) ** 2 for x in logs) / 2, rel=1e-12)
    assert released_var[1] == pytest.approx(LN2**2 / 2, rel=1e-12)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert math.isnan(torch.var(torch.masked_select(log_m[2], MASK[2])).item())
    ours = sentence_uncertainty("vartp_log", max_prob, entropy, MASK)
    assert ours[:2].tolist() == pytest.approx(released_var, rel=1e-12) and ours[2].item() == 0.0
    released_mean = [torch.masked_select(log_m[i], MASK[i]).mean().item() for i in range(2)]
    comev = sentence_uncertainty("comev_log", max_prob, entropy, MASK)
    expected = [math.exp(v / m) for v, m in zip(released_var, released_mean)]
    assert comev[:2].tolist() == pytest.approx(expected, rel=1e-12) and comev[2].item() == 1.0


def test_comev_log_all_certain_is_one_not_nan():
    m = torch.ones(2, 3)
    value = sentence_uncertainty("comev_log", m, None, torch.ones(2, 3, dtype=torch.bool))
    assert value.tolist() == [1.0, 1.0]


def test_errors():
    max_prob, entropy = position_statistics(_logits(torch.float64))
    with pytest.raises(ValueError) as info:
        sentence_uncertainty("entropy", max_prob, entropy, MASK)
    for name in ALL_MEASURES:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="eos_index"):
        sentence_uncertainty("enteos", max_prob, entropy, MASK)
    with pytest.raises(ValueError, match="pad position"):
        sentence_uncertainty("enteos", max_prob, entropy, MASK, torch.tensor([3, 0, 0]))
    with pytest.raises(ValueError, match="outside"):
        sentence_uncertainty("enteos", max_prob, entropy, MASK, torch.tensor([4, 0, 0]))
    empty = MASK.clone()
    empty[1] = False
    with pytest.raises(ValueError, match=r"\[1\]"):
        sentence_uncertainty("exptp", max_prob, entropy, empty)
    with pytest.raises(ValueError, match="shape"):
        sentence_uncertainty("exptp", max_prob, entropy, MASK[:, :3])


def test_position_statistics_extreme_logits_are_finite():
    inf = float("inf")
    logits = torch.tensor(
        [
            [1e30, -1e30, -inf, 0.0],  # one huge logit: m = 1, H = 0
            [inf, 0.0, 0.0, 0.0],  # +inf: takes all the mass
            [-inf, -inf, -inf, -inf],  # all -inf: uniform, not NaN
            [-inf, 5.0, 5.0, -inf],  # two-way tie among finite entries: m = 0.5, H = ln2
            [3e38, 3e38, -3e38, -3e38],
        ]
    )
    max_prob, entropy = position_statistics(logits)
    assert torch.isfinite(max_prob).all() and torch.isfinite(entropy).all()
    torch.testing.assert_close(max_prob, torch.tensor([1.0, 1.0, 0.25, 0.5, 0.5]))
    torch.testing.assert_close(entropy, torch.tensor([0.0, 0.0, math.log(4), LN2, LN2]))
    # half precision input is computed in float32
    m16, h16 = position_statistics(logits.clamp(-6e4, 6e4).half())
    assert m16.dtype == torch.float32 and torch.isfinite(h16).all()


@pytest.mark.parametrize("vocab", [1, 7, 32000])
def test_uniform_entropy_is_log_v(vocab):
    logits = torch.full((2, 3, vocab), 1.5)
    max_prob, entropy = position_statistics(logits)
    assert max_prob.shape == entropy.shape == (2, 3)
    torch.testing.assert_close(entropy, torch.full((2, 3), math.log(vocab)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(max_prob, torch.full((2, 3), 1 / vocab))


def test_position_statistics_any_leading_shape():
    logits = torch.randn(2, 3, 5, 11, generator=torch.Generator().manual_seed(0))
    m, h = position_statistics(logits)
    assert m.shape == h.shape == (2, 3, 5)
    p = logits.softmax(-1)
    torch.testing.assert_close(m, p.amax(-1))
    torch.testing.assert_close(h, -(p * p.log()).sum(-1))
    m1, h1 = position_statistics(logits[0, 0, 0])
    assert m1.shape == h1.shape == ()


def test_eos_positions():
    eos, pad = 2, 0
    labels = torch.tensor(
        [
            [5, 6, 2, 0, 0],  # EOS at 2
            [2, 7, 2, 8, 2],  # several EOS: the first
            [5, 6, 7, 8, 9],  # truncated, no EOS: last real position 4
            [5, 6, -100, -100, -100],  # HF -100 padding, no EOS: last real position 1
            [5, 2, 0, 0, 2],  # pads in the middle; the first EOS wins
        ]
    )
    assert eos_positions(labels, eos, pad).tolist() == [2, 0, 4, 1, 1]
    # explicit mask: position 4 of row 2 marked as padding -> last real position 3
    mask = labels != pad
    mask &= labels != -100
    mask[2, 4] = False
    assert eos_positions(labels, eos, mask).tolist() == [2, 0, 3, 1, 1]
    assert eos_positions(labels, eos, pad).dtype == torch.long
    with pytest.raises(ValueError, match="no real position"):
        eos_positions(torch.tensor([[0, 0], [5, 2]]), eos, pad)


def test_eos_positions_feed_enteos():
    labels = torch.tensor([[5, 6, 2, 0], [2, 6, 0, 0], [9, 0, 0, 0]])
    max_prob, entropy = position_statistics(_logits(torch.float64))
    value = sentence_uncertainty("enteos", max_prob, entropy, labels != 0, eos_positions(labels, 2, 0))
    torch.testing.assert_close(value, torch.tensor(EXPECTED["enteos"], dtype=torch.float64))
