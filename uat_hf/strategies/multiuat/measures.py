"""Sentence-level uncertainty measures of MultiUAT (Wu et al., EMNLP 2021, section 3.2).

Pure tensor math (torch only, no Transformers imports), so the measures can be tested on hand-built
probability tables and reused by any reward code.

Notation, per target position ``t`` of a sentence (teacher-forced on the reference prefix ``y_<t``):

* ``m_t`` -- the *largest* token probability over the vocabulary (the model's confidence in its own
  argmax), **not** the probability of the reference token. This is the paper's definition: the measures
  describe how sure the model is, not how right it is, so they need no reference beyond the prefix.
* ``H_t`` -- the entropy of the full predictive distribution at ``t`` (nats, positive).

Only real (non-pad) target positions count. Every measure returns one value per sentence, oriented so
that *higher means more uncertain* (that value is the corpus reward once averaged over the dev batch
and the MC-dropout passes; averaging is the caller's job).

Paper definitions (:data:`MEASURES`)::

    pretp    1 - prod_t m_t                   sentence probability of the greedy path, not length-normalised
    exptp    1 - mean_t m_t
    vartp    Var_t(m_t)                       population variance over the sentence's positions
    comev    Var_t(m_t) / mean_t(m_t)         coefficient of variation style ratio
    entsent  mean_t H_t
    enteos   H_T at the EOS position

The authors' released fairseq code computes three of them differently; those variants are offered under
their own names (:data:`RELEASED_CODE_MEASURES`) so results can be compared with the released code::

    exptp_geometric  1 - exp(mean_t log m_t)            (geometric instead of arithmetic mean)
    vartp_log        Var_t(log m_t)                     unbiased sample variance, as ``torch.var``
    comev_log        exp(Var_t(log m_t) / mean_t(log m_t))   the same unbiased variance

The released code takes the variance with ``torch.var`` (correction 1: divide by T - 1), so these two do
too. For a sentence with a single real position (an empty target plus EOS) ``torch.var`` returns NaN; in
the released code that NaN becomes the corpus reward, the Adam update turns every logit into NaN and the
next ``np.random.choice`` fails. Here such a sentence gets variance 0 (one position shows no spread), so
``vartp_log`` is 0 and ``comev_log`` is exp(0) = 1 for it, the values the population variance gives too.

The released code also averages EntSent over all *tokens* of the batch rather than per sentence; that
is a batch-level reduction (weight each sentence's ``entsent`` by its number of positions), not a
different per-sentence value, so it has no separate name here.
"""

from __future__ import annotations

import torch
from torch import Tensor

# The names are declared with the recipe fields (pure Python, so that ``uat-train --help`` needs no torch).
from ...utils.columns import IGNORE_INDEX
from .measure_names import MEASURES, RELEASED_CODE_MEASURES

__all__ = [
    "MEASURES",
    "RELEASED_CODE_MEASURES",
    "ALL_MEASURES",
    "position_statistics",
    "sentence_uncertainty",
    "eos_positions",
    "needs_entropy",
    "needs_eos",
]

#: Every name :func:`sentence_uncertainty` accepts.
ALL_MEASURES: tuple[str, ...] = MEASURES + RELEASED_CODE_MEASURES

_ENTROPY_MEASURES = frozenset({"entsent", "enteos"})
_EOS_MEASURES = frozenset({"enteos"})


def _check_measure(measure: str) -> str:
    if measure not in ALL_MEASURES:
        raise ValueError(
            f"Unknown uncertainty measure {measure!r}. Valid measures: paper {list(MEASURES)}; "
            f"released-code variants {list(RELEASED_CODE_MEASURES)}."
        )
    return measure


def needs_entropy(measure: str) -> bool:
    """Whether ``measure`` uses the per-position entropy (callers may skip computing it otherwise)."""
    return _check_measure(measure) in _ENTROPY_MEASURES


def needs_eos(measure: str) -> bool:
    """Whether ``measure`` needs the EOS position of each sentence (only ``enteos``)."""
    return _check_measure(measure) in _EOS_MEASURES


def position_statistics(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Per-position ``(max_prob, entropy)`` from logits of shape ``[..., V]``.

    Both outputs have the leading shape ``[...]`` and dtype float32 (float64 if the logits are float64).
    The computation goes through ``log_softmax`` in at least float32, whatever the model's dtype, so
    half-precision logits do not round small probabilities to zero before the entropy is taken.

    Numerically stable on extreme inputs: ``+inf``/``-inf`` logits are clamped to the largest finite
    values of the dtype before the softmax (an ``+inf`` logit then simply takes all the mass, a row of
    ``-inf`` is uniform), and ``0 * log 0`` is taken as 0 in the entropy. NaN logits stay NaN on purpose:
    they mean the model itself diverged, and the reward check downstream must see it.
    """
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a non-empty vocabulary dimension last, got shape {tuple(logits.shape)}.")
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    info = torch.finfo(dtype)
    x = logits.to(dtype).clamp(min=info.min, max=info.max)
    log_p = torch.log_softmax(x, dim=-1)
    max_log_p = log_p.amax(dim=-1)
    p = log_p.exp()
    # Where p == 0 exactly, log_p may be -inf; clamping it to a finite value makes p * log_p = 0 there.
    # Where p > 0, log_p >= log(smallest subnormal) ~ -745, far above the clamp, so nothing else changes.
    entropy = -(p * log_p.clamp(min=info.min)).sum(dim=-1)
    return max_log_p.exp(), entropy.clamp(min=0.0)


def _masked_mean(values: Tensor, mask: Tensor, count: Tensor) -> Tensor:
    # torch.where (not multiplication) so NaN/inf garbage at pad positions cannot leak into the sum.
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(dim=1) / count


def _masked_variance(values: Tensor, mask: Tensor, count: Tensor, correction: int = 0) -> tuple[Tensor, Tensor]:
    """Variance dividing by ``count - correction`` (0: population, 1: unbiased as ``torch.var``), two-pass.

    Also returns the mean. With ``correction=1`` a row with one real position has variance 0, not NaN.
    """
    mean = _masked_mean(values, mask, count)
    deviation = torch.where(mask, values - mean[:, None], torch.zeros((), dtype=values.dtype, device=values.device))
    squares = (deviation * deviation).sum(dim=1)
    return squares / (count - correction).clamp(min=1), mean


def sentence_uncertainty(
    measure: str,
    max_prob: Tensor,
    entropy: Tensor | None,
    mask: Tensor,
    eos_index: Tensor | None = None,
    *,
    validate: bool = True,
) -> Tensor:
    """One uncertainty value per sentence (higher = more uncertain), shape ``[B]``.

    Args:
        measure: one of :data:`ALL_MEASURES`.
        max_prob: ``[B, T]`` max token probability per position (from :func:`position_statistics`).
        entropy: ``[B, T]`` full-vocabulary entropy per position; may be ``None`` when
            :func:`needs_entropy` is False for ``measure``.
        mask: ``[B, T]`` True on real target positions; values at other positions are ignored, whatever
            they are (NaN included).
        eos_index: ``[B]`` long, the position of EOS in each sentence; required by ``enteos`` (see
            :func:`eos_positions`).
        validate: check that every sentence has a real position and that ``eos_index`` points at one. Each check
            waits for the device; a caller that measures the same ``mask`` and ``eos_index`` K times checks them
            once and passes ``False``.

    Definitions (all over the real positions of a sentence; see the module docstring for the sources):

    * ``pretp``: ``1 - prod_t m_t`` computed as ``-expm1(sum_t log m_t)`` -- stable for long sentences
      and exact to the last bit near 0. Not length-normalised, as in the paper, so longer sentences are
      more uncertain by construction.
    * ``exptp``: ``1 - mean_t m_t``.
    * ``vartp``: ``Var_t(m_t)``, population variance (divide by the count); 0 for 1-token sentences.
    * ``comev``: ``Var_t(m_t) / mean_t(m_t)``; the mean is >= 1/V > 0 so the ratio is always finite.
    * ``entsent``: ``mean_t H_t``.
    * ``enteos``: ``H`` at ``eos_index``.
    * ``exptp_geometric`` (released code): ``1 - exp(mean_t log m_t)`` = 1 - geometric mean of m_t.
    * ``vartp_log`` (released code): ``Var_t(log m_t)``, unbiased sample variance (``torch.var``,
      divide by T - 1); 0 for 1-token sentences, where ``torch.var`` gives NaN (see the module docstring).
    * ``comev_log`` (released code): ``exp(Var_t(log m_t) / mean_t(log m_t))`` with the same unbiased
      variance (1 for 1-token sentences), exactly as written, no
      sign flipped. Since ``log m_t <= 0`` the ratio is <= 0 and the value lies in ``(0, 1]``: it rises
      toward 1 as the mean log-confidence falls (more uncertain) and falls as the log-confidence varies
      more across the sentence. When every ``m_t`` is exactly 1 (mean and variance both 0) the ratio is
      taken as 0, so the value is 1 rather than NaN.

    Raises:
        ValueError: unknown measure, mismatched shapes, a sentence without any real position, ``enteos``
            without ``eos_index`` (or one pointing outside the sentence / at a pad position), or a
            missing ``entropy`` for an entropy measure.
    """
    _check_measure(measure)
    if max_prob.dim() != 2:
        raise ValueError(f"max_prob must be [batch, target_len], got shape {tuple(max_prob.shape)}.")
    if mask.shape != max_prob.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match max_prob shape {tuple(max_prob.shape)}.")
    mask = mask.to(device=max_prob.device, dtype=torch.bool)
    count = mask.sum(dim=1)
    empty = (count == 0).nonzero().flatten() if validate else count[:0]
    if empty.numel():
        raise ValueError(
            f"Sentences {empty.tolist()} of the batch have no real target position (mask all False); "
            "an uncertainty cannot be computed for an empty target."
        )
    dtype = torch.float64 if max_prob.dtype == torch.float64 else torch.float32
    m = max_prob.to(dtype)
    count_f = count.to(dtype)

    if measure in _ENTROPY_MEASURES:
        if entropy is None:
            raise ValueError(f"Measure {measure!r} needs the per-position entropy; got entropy=None.")
        if entropy.shape != max_prob.shape:
            raise ValueError(f"entropy shape {tuple(entropy.shape)} does not match max_prob shape "
                             f"{tuple(max_prob.shape)}.")
        h = entropy.to(device=m.device, dtype=dtype)
        if measure == "entsent":
            return _masked_mean(h, mask, count_f)
        # enteos
        if eos_index is None:
            raise ValueError("Measure 'enteos' needs eos_index (position of EOS per sentence); see eos_positions().")
        eos_index = eos_index.to(device=m.device, dtype=torch.long).reshape(-1)
        if eos_index.numel() != m.shape[0]:
            raise ValueError(f"eos_index has {eos_index.numel()} entries for a batch of {m.shape[0]} sentences.")
        if validate and ((eos_index < 0) | (eos_index >= m.shape[1])).any():
            raise ValueError(f"eos_index {eos_index.tolist()} outside the target length {m.shape[1]}.")
        if validate and not mask.gather(1, eos_index[:, None]).all():
            raise ValueError("eos_index points at a pad position (mask False) for some sentence.")
        return h.gather(1, eos_index[:, None]).squeeze(1)

    if measure == "pretp":
        return -torch.expm1(_masked_mean(torch.log(m), mask, torch.ones_like(count_f)))
    if measure == "exptp":
        return 1.0 - _masked_mean(m, mask, count_f)
    if measure == "vartp":
        return _masked_variance(m, mask, count_f)[0]
    if measure == "comev":
        var, mean = _masked_variance(m, mask, count_f)
        return var / mean
    log_m = torch.log(m)
    if measure == "exptp_geometric":
        return -torch.expm1(_masked_mean(log_m, mask, count_f))
    if measure == "vartp_log":
        return _masked_variance(log_m, mask, count_f, correction=1)[0]
    # comev_log
    var, mean = _masked_variance(log_m, mask, count_f, correction=1)
    ratio = torch.where(mean < 0, var / torch.where(mean < 0, mean, torch.ones_like(mean)), torch.zeros_like(mean))
    return torch.exp(ratio)


def eos_positions(labels: Tensor, eos_token_id: int, pad_id_or_mask: int | Tensor) -> Tensor:
    """Index of the first EOS among the real positions of each row of ``labels`` (``[B, T]`` -> ``[B]`` long).

    ``pad_id_or_mask`` is either the pad id of ``labels`` (an int; positions equal to it *or* to -100,
    the value Hugging Face collators pad labels with, are not real) or a ``[B, T]`` bool mask, True on
    real positions.

    Rows without an EOS -- targets cut by ``max_target_length`` -- use their last real position instead.
    That position's distribution is the model's state at the end of everything it was shown, the closest
    stand-in for "the end of the sentence"; dropping the row instead would bias the dev-batch average
    toward short sentences, and failing would make ``enteos`` unusable with any truncation.

    Raises ValueError for a row with no real position at all.
    """
    if labels.dim() != 2:
        raise ValueError(f"labels must be [batch, target_len], got shape {tuple(labels.shape)}.")
    if isinstance(pad_id_or_mask, Tensor) and pad_id_or_mask.dtype == torch.bool:
        if pad_id_or_mask.shape != labels.shape:
            raise ValueError(f"mask shape {tuple(pad_id_or_mask.shape)} does not match labels shape "
                             f"{tuple(labels.shape)}.")
        real = pad_id_or_mask.to(labels.device)
    else:
        pad_id = int(pad_id_or_mask)
        real = (labels != pad_id) & (labels != IGNORE_INDEX)
    has_real = real.any(dim=1)
    if not has_real.all():
        raise ValueError(f"Rows {(~has_real).nonzero().flatten().tolist()} of labels have no real position.")
    is_eos = (labels == eos_token_id) & real
    # argmax returns the first maximal index, i.e. the first EOS.
    first_eos = is_eos.to(torch.int8).argmax(dim=1)
    positions = torch.arange(labels.shape[1], device=labels.device)
    last_real = torch.where(real, positions, torch.full_like(positions, -1)).amax(dim=1)
    return torch.where(is_eos.any(dim=1), first_eos, last_real).to(torch.long)
