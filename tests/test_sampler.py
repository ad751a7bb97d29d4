"""CorpusBatchSampler: frequencies, live updates, determinism, exact resume, token budget, mixing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from conftest import corpus_of
from uat_hf.sampling.packing import example_lengths
from uat_hf.sampling.priors import temperature_prior, validate_probabilities
from uat_hf.sampling.sampler import CorpusBatchSampler

NAMES = ("big", "mid", "small")


def lengths(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"big": rng.integers(1, 60, 3000), "mid": rng.integers(1, 40, 1000), "small": rng.integers(5, 20, 200)}


def corpus_sequence(sampler, batches) -> list[str]:
    return [corpus_of(sampler, batch[0]) for batch in batches]


def test_priors():
    np.testing.assert_allclose(temperature_prior([3, 1], 1.0), [0.75, 0.25])
    np.testing.assert_allclose(temperature_prior([3, 1], float("inf")), [0.5, 0.5])
    q5 = temperature_prior([3, 1], 5.0)
    np.testing.assert_allclose(q5, np.array([0.75, 0.25]) ** 0.2 / (np.array([0.75, 0.25]) ** 0.2).sum())
    assert q5[1] > 0.25  # flatter than proportional
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="prior_temperature"):
            temperature_prior([3, 1], bad)
    with pytest.raises(ValueError, match="'b'.*0 examples"):
        temperature_prior({"a": 3, "b": 0}, 1.0)


@pytest.mark.parametrize(
    "bad, message",
    [([0.5, 0.6], "sum to"), ([-0.1, 1.1], "negative"), ([np.nan, 1.0], "finite"), ([1.0], "2 corpora")],
)
def test_validate_probabilities_rejects(bad, message):
    with pytest.raises(ValueError, match=message):
        validate_probabilities(bad, ["a", "b"])


@pytest.mark.parametrize("mix", [False, True])
def test_frequencies_match_probabilities(mix):
    """Chi-square goodness of fit of the drawn corpora (per batch, or per example when mixing) to p."""
    p = np.array([0.2, 0.5, 0.3])
    sampler = CorpusBatchSampler(lengths(), p, batch_size=4, mix_corpora=mix, seed=3)
    counts = dict.fromkeys(NAMES, 0)
    for epoch in range(6):
        sampler.set_epoch(epoch)
        for batch in sampler:
            for index in (batch if mix else batch[:1]):
                counts[corpus_of(sampler, index)] += 1
    observed = np.array([counts[n] for n in NAMES])
    result = stats.chisquare(observed, observed.sum() * p)
    assert result.pvalue > 1e-3, (observed, observed.sum() * p)


def test_uniform_differs_from_proportional_frequencies():
    sampler = CorpusBatchSampler(lengths(), temperature_prior([3000, 1000, 200], float("inf")), batch_size=8)
    seq = corpus_sequence(sampler, list(sampler))
    assert abs(seq.count("small") / len(seq) - 1 / 3) < 0.06


def test_changing_probabilities_mid_iteration_changes_following_batches():
    sampler = CorpusBatchSampler(lengths(), [0.4, 0.3, 0.3], max_tokens=300, seed=1)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(20)]
    assert len(set(corpus_sequence(sampler, head))) == 3
    sampler.distribution.set_probabilities({"big": 0.0, "mid": 0.0, "small": 1.0})
    tail = list(iterator)
    assert tail and set(corpus_sequence(sampler, tail)) == {"small"}


def test_same_seed_same_sequence_other_seed_differs():
    a = list(CorpusBatchSampler(lengths(), max_tokens=300, seed=5))
    b = list(CorpusBatchSampler(lengths(), max_tokens=300, seed=5))
    c = list(CorpusBatchSampler(lengths(), max_tokens=300, seed=6))
    assert a == b
    assert a != c


def test_epochs_differ_and_replay_the_same_epoch():
    sampler = CorpusBatchSampler(lengths(), max_tokens=300, seed=5)
    epoch0 = list(sampler)
    epoch1 = list(sampler)  # a completed pass moves on to the next epoch by itself
    assert sampler.epoch == 1 and epoch0 != epoch1
    sampler.set_epoch(0)
    assert list(sampler) == epoch0


@pytest.mark.parametrize("mix", [False, True])
def test_state_round_trip_resumes_exact_sequence_after_mid_epoch_changes(mix):
    reference = CorpusBatchSampler(lengths(), [0.5, 0.3, 0.2], max_tokens=400, mix_corpora=mix, seed=11)
    iterator = iter(reference)
    drawn = [next(iterator) for _ in range(15)]
    reference.distribution.set_probabilities([0.1, 0.1, 0.8])
    drawn += [next(iterator) for _ in range(10)]
    # What a checkpoint stores: the sampler's position and the distribution it reads p from.
    state = json.loads(json.dumps({"sampler": reference.state_dict(),
                                   "distribution": reference.distribution.state_dict()}))
    reference.distribution.set_probabilities([0.6, 0.2, 0.2])
    expected_rest = list(iterator)

    resumed = CorpusBatchSampler(lengths(), [0.5, 0.3, 0.2], max_tokens=400, mix_corpora=mix, seed=11)
    resumed.distribution.load_state_dict(state["distribution"])
    resumed.load_state_dict(state["sampler"])
    replay = iter(resumed)
    assert [next(replay) for _ in range(25)] == drawn  # the Trainer skips these
    resumed.distribution.set_probabilities([0.6, 0.2, 0.2])
    assert list(replay) == expected_rest
    # The next epoch is the same too.
    assert list(resumed) == list(reference)


def test_load_state_rejects_other_corpora_or_settings():
    state = CorpusBatchSampler(lengths(), max_tokens=400).state_dict()
    other = lengths()
    other["small"] = other["small"][:-1]
    with pytest.raises(ValueError, match="corpora"):
        CorpusBatchSampler(other, max_tokens=400).load_state_dict(state)
    with pytest.raises(ValueError, match="max_tokens"):
        CorpusBatchSampler(lengths(), max_tokens=500).load_state_dict(state)
    with pytest.raises(ValueError, match="mix_pool_batches"):
        CorpusBatchSampler(lengths(), max_tokens=400, mix_pool_batches=4).load_state_dict(state)


@pytest.mark.parametrize("mix", [False, True])
def test_token_budget_respected_and_batches_single_corpus_unless_mixing(mix):
    data = lengths()
    flat = np.concatenate([data[n] for n in NAMES])
    sampler = CorpusBatchSampler(data, max_tokens=256, mix_corpora=mix, seed=2)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    for batch in batches:
        assert len(batch) * flat[batch].max() <= 256
    corpora_per_batch = [len({corpus_of(sampler, i) for i in b}) for b in batches]
    if mix:
        assert max(corpora_per_batch) > 1
    else:
        assert max(corpora_per_batch) == 1
    # Token batches group similar lengths: far less padding than random batches of the same count.
    padded = sum(len(b) * flat[b].max() for b in batches)
    assert flat.sum() / padded > (0.6 if not mix else 0.3)


def padding_efficiency(batches, flat) -> float:
    return sum(flat[b].sum() for b in batches) / sum(len(b) * flat[b].max() for b in batches)


def test_mixed_batches_are_grouped_by_length_within_pools():
    """Mixed token batches drawn one example at a time carry much padding; pools re-batched by length do not."""
    data = lengths()
    flat = np.concatenate([data[n] for n in NAMES])
    ungrouped = list(CorpusBatchSampler(data, max_tokens=256, mix_corpora=True, mix_pool_batches=1, seed=2))
    pooled = list(CorpusBatchSampler(data, max_tokens=256, mix_corpora=True, mix_pool_batches=16, seed=2))
    assert padding_efficiency(pooled, flat) > 0.85 > 0.65 > padding_efficiency(ungrouped, flat)
    for batch in pooled:
        assert len(batch) * flat[batch].max() <= 256
    # Pools are shuffled after sorting: lengths do not rise batch after batch through the epoch.
    longest = [flat[b].max() for b in pooled[:16]]
    assert longest != sorted(longest)


def test_mixed_probability_change_takes_effect_from_the_next_pool():
    sampler = CorpusBatchSampler(lengths(), [0.4, 0.3, 0.3], batch_size=8, mix_corpora=True, mix_pool_batches=5,
                                 seed=1)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(7)]  # a pool of 5 batches of 8 (re-batched: 5 of 8) and 2 of the next
    sampler.distribution.set_probabilities({"big": 0.0, "mid": 0.0, "small": 1.0})
    rest_of_pool = [next(iterator) for _ in range(3)]
    after = [next(iterator) for _ in range(20)]
    corpora = lambda batches: {corpus_of(sampler, i) for b in batches for i in b}  # noqa: E731
    assert corpora(head) == corpora(rest_of_pool) == {"big", "mid", "small"}
    assert corpora(after) == {"small"}
    assert all(len(b) == 8 for b in head + rest_of_pool + after)


def test_epoch_is_one_pass_worth_of_batches():
    sampler = CorpusBatchSampler(lengths(), batch_size=10)
    assert len(sampler) == 300 + 100 + 20
    # With proportional p, every example of the epoch is seen about once.
    seen = np.concatenate([np.asarray(b) for b in sampler])
    assert len(np.unique(seen)) > 0.55 * 4200


def test_invalid_inputs_are_named():
    with pytest.raises(ValueError, match="'small' is empty"):
        CorpusBatchSampler({"big": [3, 4], "small": []}, batch_size=2)
    with pytest.raises(ValueError, match="smaller than the longest example of corpus 'big'"):
        CorpusBatchSampler({"big": [3, 400]}, max_tokens=100)
    with pytest.raises(ValueError, match="exactly one"):
        CorpusBatchSampler({"big": [3]}, max_tokens=100, batch_size=3)
    with pytest.raises(ValueError, match="mix_pool_batches must be >= 1"):
        CorpusBatchSampler({"big": [3]}, max_tokens=100, mix_corpora=True, mix_pool_batches=0)


def test_example_lengths_reads_arrow_lists(corpora):
    dataset = corpora["train"]["bible"]
    expected = [max(len(a), len(b)) for a, b in zip(dataset["input_ids"], dataset["labels"])]
    assert example_lengths(dataset).tolist() == expected
    subset = dataset.select([5, 1, 3])
    assert example_lengths(subset).tolist() == [expected[5], expected[1], expected[3]]


def test_run_based_packing_equals_batch_by_batch_greedy_packing():
    """The fast packing must give exactly the batches the simple greedy loop gives."""

    def greedy(sorted_sizes, budget):
        counts, count, longest = [], 0, 0
        for size in sorted_sizes:
            if count and (count + 1) * max(longest, size) > budget:
                counts.append(count)
                count, longest = 0, 0
            count, longest = count + 1, max(longest, size)
        return counts + ([count] if count else [])

    rng = np.random.default_rng(0)
    for trial in range(200):
        budget = int(rng.integers(50, 500))
        sizes = rng.integers(1, min(budget, 60) + 1, int(rng.integers(1, 400)))
        packed = CorpusBatchSampler({"a": sizes}, max_tokens=budget, seed=trial)._token_batches[0]
        assert np.diff(packed.bounds).tolist() == greedy(np.sort(sizes), budget)
        members = np.concatenate([packed[b] for b in range(len(packed))])
        assert sorted(members.tolist()) == list(range(len(sizes)))


def epochs_per_corpus(sampler, epochs: int) -> np.ndarray:
    """Examples drawn from each corpus over ``epochs`` sampler epochs, divided by the corpus's size."""
    seen = np.zeros(len(sampler.names))
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        flat = np.concatenate([np.asarray(batch) for batch in sampler])
        seen += np.bincount(np.searchsorted(sampler.offsets, flat, side="right") - 1, minlength=len(seen))
    return seen / sampler.sizes


@pytest.mark.parametrize("mix", [False, True])
def test_proportional_sees_every_example_equally_often(corpora, mix):
    """p is a share of examples: under proportional each corpus goes through the same number of epochs, also
    with one corpus per token-budget batch, where the domains hold 23 to 41 examples per batch (bundled data)."""
    lengths = {name: example_lengths(dataset) for name, dataset in corpora["train"].items()}
    sampler = CorpusBatchSampler(lengths, max_tokens=1000, mix_corpora=mix, seed=0)
    per_batch = sampler.examples_per_corpus_batch
    assert per_batch.max() / per_batch.min() > 1.6  # batch shares and example shares really differ here
    epochs = epochs_per_corpus(sampler, 400)
    assert epochs.max() / epochs.min() < 1.05, dict(zip(sampler.names, epochs.round(1)))


def test_batch_probabilities_divide_p_by_examples_per_batch():
    sampler = CorpusBatchSampler({"short": [2] * 100, "long": [10] * 100}, [0.5, 0.5], max_tokens=20)
    np.testing.assert_allclose(sampler.examples_per_corpus_batch, [10, 2])
    np.testing.assert_allclose(sampler.batch_probabilities(), [1 / 6, 5 / 6])
    mixed = CorpusBatchSampler({"short": [2] * 100, "long": [10] * 100}, [0.5, 0.5], max_tokens=20, mix_corpora=True)
    np.testing.assert_allclose(mixed.batch_probabilities(), [0.5, 0.5])
