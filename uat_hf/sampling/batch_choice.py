"""Which corpus the next batch (or example) comes from: p, a share of examples, turned into a draw.

**What p is a share of: training examples.** ``p_n`` is the share of training *examples* (sentence pairs)
drawn from corpus n, in both batching modes, so under ``proportional`` every example is seen about equally
often. With instance-level mixing each example's corpus is drawn from p, so nothing needs converting. With
one corpus per batch, batches of a token budget hold many short sentences or few long ones, so drawing each
*batch's* corpus from p would make p a share of batches and over-sample the corpus of short sentences (on
the bundled data with a 1,000-token budget, ``proportional`` showed one domain's examples 2.3x as often as
another's). A batch's corpus is therefore drawn from ``q_n ∝ p_n / e_n``, ``e_n`` being corpus n's mean
examples per batch (:func:`mean_examples_per_batch`, its size over its batch count), which makes the expected
share of examples p. (The authors' code gives every batch the same number of sentences, where batch shares
and example shares coincide.) See docs/sampling.md.

The conversion is a fixed function of p and the corpora's batches, and :func:`pick_corpus` takes its uniform
draw from outside, so the draws stay rank-identical and a resumed epoch replays them exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean_examples_per_batch(sizes: Sequence[int] | np.ndarray, batch_counts: Sequence[int] | np.ndarray) -> np.ndarray:
    """Each corpus's mean examples per batch, ``e_n``: its size over the number of batches one pass makes."""
    return np.asarray(sizes, dtype=np.float64) / np.asarray(batch_counts, dtype=np.float64)


def batch_choice_probabilities(p: Sequence[float] | np.ndarray, per_batch: np.ndarray, *,
                               mix_corpora: bool) -> np.ndarray:
    """The probability of drawing each corpus for the next draw, given example shares ``p``.

    One corpus per batch: ``q_n ∝ p_n / e_n`` (``per_batch`` is e, from :func:`mean_examples_per_batch`), so that
    corpus n supplies a share p_n of the examples trained on. Instance-level mixing (``mix_corpora``) draws a
    corpus per example, so q is p.
    """
    p = np.asarray(p, dtype=np.float64)
    if mix_corpora:
        return p
    weights = p / per_batch
    return weights / weights.sum()


def pick_corpus(cumulative: np.ndarray, u: float) -> int:
    """Inverse-CDF draw: the corpus whose cumulative interval holds ``u`` (u drawn independently of p)."""
    return min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), len(cumulative) - 1)
