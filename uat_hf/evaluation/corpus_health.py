"""Corpus health: do a corpus's training pairs teach what its clean dev set asks?

The paper's premise is a small set of trusted dev data per corpus. Training pairs can be broken in ways no
length filter sees: source and target files out of step, targets in another language, noise. What such pairs
lack is the link between a source and its target, and a model shows how much it relies on that link: its loss
on a target rises when the target is given another sentence's source. On a corpus's clean dev pairs that rise
(its *source use*) is what the model has learned for the domain; on training pairs whose targets do not belong
to their sources it is near zero. So each check compares, corpus by corpus, the source use on a fixed sample of
the training pairs with that on the dev pairs: about equal for a healthy corpus however hard or small it is,
far lower for a broken one. The training-side sample is held out of training (:func:`hold_out_pairs`; a stream's
is its first pairs), a fresh part of the held-out pairs at each check where they hold more than one sample
(:func:`fresh_parts`): a model that has memorised broken pairs relies on their sources as if they were sound (a
memorised misaligned corpus scores about 1), so only pairs it never trained on can show them. (Comparing plain
losses is blind here: a model trained on misaligned pairs fits their targets as a language model, and the losses of
training and dev pairs stay close.)

Uncertainty sampling makes this matter: a model is most uncertain where it learned garbage, so MultiUAT raises
the share of exactly such a corpus. The check warns under every strategy, a static prior included. The samples
are seeded (every rank and every resume reads the same pairs), the mismatched source of a target is its
neighbour's in length order (so padding and lengths barely change), and the passes run in eval mode with no random
state of the run: training is unchanged by the checks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from ..data.streams import is_stream, streamed_size
from ..models.causal_lm import is_causal_lm
from ..models.modes import model_device, restored_modes, sharding
from ..models.targets import scored_mask, target_logits
from ..sampling.packing import draw_token_batch, example_lengths, split_by_tokens
from ..utils.columns import IGNORE_INDEX, MODEL_COLUMNS, TOKEN_COLUMNS
from .causal_eval import prompt_lengths

__all__ = ["DAMAGED_SHARE", "SECOND_HALF_Z", "CorpusHealth", "HealthSample", "SampleCheck", "check_sample",
           "draw_health_sample", "fresh_parts", "hold_out_pairs", "stream_head", "suspect_corpora", "suspect_z"]

#: The model must use the sources of a corpus's dev pairs (mean source use this many standard errors above 0)
#: before its training pairs can be judged ...
MIN_DEV_Z = 3.0
#: ... and a corpus is suspect when the source use of its training pairs is at most this share of its dev
#: pairs' ...
SUSPECT_SHARE = 0.5
#: The continuous down-weight acts on a corpus only where its ratio is at most this: a sound corpus's own training
#: pairs, held out, can use their sources somewhat less than its dev pairs (a regular corpus measured 0.85-0.92 of
#: them late in a run, z down to -2.4: study/study.md, "Down-weighted cells"), a gap that a larger sample would make
#: "significant" without any pair being broken.
DAMAGED_SHARE = 0.8
#: ... by at least :func:`suspect_z` standard errors (sentences are the samples), at two checks in a row: the
#: chance that a sound corpus is called broken in a run stays below this, however many corpora and checks.
FALSE_ALARM_RATE = 0.01
#: A check reads the first half of each corpus's sample, and the second half only where the first is this many
#: standard errors or more below the dev pairs' (or the dev pairs are not measurable yet, :data:`MIN_DEV_Z`). A sound
#: corpus is read whole at about 16 % of its checks; a broken one the whole test would call suspect (z ≤ −3 on the
#: whole sample) is cleared by its first half in under 2 % of checks (a simulation in tests/test_corpus_health.py).
SECOND_HALF_Z = 1.0
#: A corpus that cannot spare this many pairs for the checks (``corpus_health_holdout`` of it) is checked on pairs
#: it trains on: fewer would leave the training side's standard error too wide to call anything.
MIN_HELD_OUT = 16
_SOURCE_COLUMNS = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class SampleCheck:
    """One sample of pairs: its mean token loss, and each sentence's source use (the rise of its mean token loss
    when its target is given a neighbour's source)."""

    loss: float
    gains: np.ndarray
    #: Scored target tokens of the sample: the weight of its loss when samples are pooled.
    tokens: float = 1.0

    @classmethod
    def pooled(cls, parts: Sequence[SampleCheck]) -> SampleCheck:
        """The check of the parts' sentences together (the halves of a sample)."""
        tokens = sum(part.tokens for part in parts)
        return cls(sum(part.loss * part.tokens for part in parts) / max(tokens, 1e-12),
                   np.concatenate([part.gains for part in parts]), tokens)

    @property
    def source_use(self) -> float:
        return float(np.mean(self.gains))

    @property
    def standard_error(self) -> float:
        n = len(self.gains)
        return float(np.std(self.gains, ddof=1) / np.sqrt(n)) if n > 1 else float("inf")


def suspect_z(corpora: int, checks: int, *, in_a_row: bool = True) -> float:
    """The standard errors below the dev pairs' source use at which a corpus is suspect, for a run of ``corpora``
    corpora and ``checks`` checks: a sound corpus's z is about standard normal (higher, as the model has seen its
    training pairs), and a verdict needs two checks in a row, each pair of which is at most as likely as one check
    whatever the checks' correlation (their samples overlap); so by the union bound over the corpora × (checks − 1)
    pairs the chance of a false alarm in a run is at most :data:`FALSE_ALARM_RATE`. 3.0 at 4 corpora and 3 checks,
    3.5 at 12 checks, 4.2 at 64 corpora and 12 checks. ``in_a_row=False``: the margin at which one check is
    confident evidence on its own (the union bound over corpora × checks: 3.1 at 4 corpora and 3 checks, 3.5 at
    4 and 12, 4.2 at 64 and 12), what the continuous down-weight acts on."""
    tests = max(int(corpora), 1) * max(int(checks) - (1 if in_a_row else 0), 1)
    return -NormalDist().inv_cdf(FALSE_ALARM_RATE / tests)


def suspect_corpora(share: Mapping[str, float], z: Mapping[str, float], dev_z: Mapping[str, float], *,
                    threshold: float) -> list[str]:
    """The corpora whose training pairs use their sources at most :data:`SUSPECT_SHARE` as much as their dev
    pairs, by ``threshold`` standard errors (:func:`suspect_z`), where the dev pairs' source use is clear
    (:data:`MIN_DEV_Z`)."""
    return [n for n in share if dev_z[n] >= MIN_DEV_Z and share[n] <= SUSPECT_SHARE and z[n] <= -threshold]


@dataclass
class CorpusHealth:
    """One check of every corpus: its training sample against its dev sample."""

    step: int
    names: list[str]
    train: list[SampleCheck]
    dev: list[SampleCheck]
    #: Standard errors a suspect corpus is below its dev pairs (:func:`suspect_z` of the run's corpora and checks).
    threshold: float = 3.0

    @property
    def share(self) -> list[float]:
        """Source use of the training pairs as a share of the dev pairs' (about 1 for a healthy corpus)."""
        return [t.source_use / d.source_use if d.source_use > 0 else float("nan")
                for t, d in zip(self.train, self.dev)]

    @property
    def z(self) -> list[float]:
        """Standard errors by which the training pairs' source use is above (+) or below (−) the dev pairs'."""
        return [(t.source_use - d.source_use) / max(np.hypot(t.standard_error, d.standard_error), 1e-12)
                for t, d in zip(self.train, self.dev)]

    @property
    def dev_z(self) -> list[float]:
        return [d.source_use / max(d.standard_error, 1e-12) for d in self.dev]

    def suspects(self) -> list[str]:
        """Corpora whose training pairs look broken at this check."""
        return suspect_corpora(*(dict(zip(self.names, v)) for v in (self.share, self.z, self.dev_z)),
                               threshold=self.threshold)

    def undecided(self) -> list[str]:
        """Corpora whose second half must be read: this check (of the first halves) cannot clear them, as their
        training pairs use their sources at least :data:`SECOND_HALF_Z` standard errors less than their dev pairs,
        or their dev pairs' source use is not clear yet (:data:`MIN_DEV_Z`). A verdict is only ever reached on the
        whole sample, by the same test, so the chance of a false alarm does not grow."""
        return [n for n, z, dev_z in zip(self.names, self.z, self.dev_z)
                if z < -SECOND_HALF_Z or not dev_z >= MIN_DEV_Z]

    def not_measurable(self) -> list[str]:
        """Corpora the check cannot judge yet: the model does not clearly use the sources of their dev pairs (dev z
        below :data:`MIN_DEV_Z`), so broken training pairs there would go unseen. Silence is not health."""
        return [n for n, z in zip(self.names, self.dev_z) if not z >= MIN_DEV_Z]

    def verdicts(self) -> dict[str, str]:
        """Each corpus at this check: ``suspect``, ``not measurable yet`` or ``no sign of damage``."""
        suspects, unmeasured = set(self.suspects()), set(self.not_measurable())
        return {n: "suspect" if n in suspects else "not measurable yet" if n in unmeasured else "no sign of damage"
                for n in self.names}

    def describe(self, name: str) -> str:
        """What the numbers say of corpus ``name``, and what to check."""
        i = self.names.index(name)
        others = [s for n, s in zip(self.names, self.share) if n != name]
        span = f"{min(others):.2f}-{max(others):.2f}" if others else "none"
        return (f"Corpus {name!r} looks broken: at step {self.step} the model relies on the source of its training "
                f"pairs {self.share[i]:.2f}x as much as on that of its clean dev pairs (a target's loss rises by "
                f"{self.train[i].source_use:.3f} against {self.dev[i].source_use:.3f} when it is given another "
                f"sentence's source; {abs(self.z[i]):.1f} standard errors apart); the other corpora's ratios are "
                f"{span}. Its training pairs may be misaligned (source and target lines out of step), in another "
                "language, or noise: check a few of them, fix or drop the corpus, or give it a small fixed share "
                "(strategy 'fixed').")

    def as_dict(self) -> dict:
        verdicts = self.verdicts()
        return {"step": self.step, "suspects": self.suspects(), "not_measurable": self.not_measurable(), "corpora": {
            n: {"verdict": verdicts[n], "train_loss": round(t.loss, 4), "dev_loss": round(d.loss, 4),
                "train_source_use": round(t.source_use, 4), "dev_source_use": round(d.source_use, 4),
                "source_use_ratio": None if np.isnan(s) else round(s, 4), "z": round(z, 2),
                "train_sentences": len(t.gains)}
            for n, t, d, s, z in zip(self.names, self.train, self.dev, self.share, self.z)}}


def hold_out_pairs(corpora: Mapping[str, object], *, share: float, tokens: int, seed: int
                   ) -> tuple[dict[str, object], dict[str, object]]:
    """Each corpus split into the pairs it trains on and the pairs the checks measure and it never trains on: a
    random ``tokens`` worth (the checks' samples), at most ``share`` of its pairs; a corpus that cannot spare
    :data:`MIN_HELD_OUT` keeps them all and is absent from the held-out mapping. Both sides keep the corpus's order
    (``Dataset.select`` of sorted indices), and the split depends only on ``seed``, the corpus's position and its
    lengths, so every process and every resume of a run holds out the same pairs.

    A stream (``datasets.IterableDataset``) has no random access: its first ``tokens`` worth of pairs are held
    out (at most ``share`` of its size, when its metadata gives one), read into a Dataset, and it trains from the
    pair after them (``IterableDataset.skip``)."""
    trained, held = {}, {}
    for i, (name, dataset) in enumerate(corpora.items()):
        if is_stream(dataset):
            head = stream_head(dataset, tokens)
            size = streamed_size(dataset)
            count = len(head) if size is None else min(len(head), int(share * size))
            if count < MIN_HELD_OUT:
                trained[name] = dataset
                continue
            held[name], trained[name] = head.select(range(count)), dataset.skip(count)
            continue
        lengths = example_lengths(dataset)
        order = np.random.default_rng([seed, i, 2]).permutation(len(lengths))
        sample = int(np.searchsorted(np.cumsum(lengths[order]), tokens, side="left")) + 1
        count = min(sample, int(share * len(lengths)))
        if count < MIN_HELD_OUT:
            trained[name] = dataset
            continue
        held[name] = dataset.select(np.sort(order[:count]))
        trained[name] = dataset.select(np.sort(order[count:]))
    return trained, held


def fresh_parts(pool: datasets.Dataset, tokens: int, seed: int) -> list[np.ndarray]:
    """The indices of a held-out pool in disjoint random parts of about ``tokens`` each (at least one part: the whole
    pool), sorted, for the checks to take in turn: where the pool holds several samples, consecutive checks judge
    different pairs, and two verdicts in a row are two tests instead of one sample read twice."""
    lengths = example_lengths(pool)
    order = np.random.default_rng([seed, 3]).permutation(len(lengths))
    parts = max(1, int(lengths.sum() // max(int(tokens), 1)))
    bounds = np.searchsorted(np.cumsum(lengths[order]), tokens * np.arange(1, parts), side="right")
    return [np.sort(part) for part in np.split(order, bounds) if len(part)]


def stream_head(stream: object, tokens: int) -> datasets.Dataset:
    """The first ``tokens`` worth of a stream's examples (their model columns) as a Dataset: what the checks can
    sample of a corpus read as a stream."""
    rows, total = [], 0
    for row in copy.deepcopy(stream):  # a stream keeps its position in itself: the run's own stays at the start
        rows.append({column: row[column] for column in MODEL_COLUMNS if column in row})
        total += max(len(row[column]) for column in TOKEN_COLUMNS if column in row)
        if total >= tokens:
            break
    return datasets.Dataset.from_list(rows)


Versions = tuple[list[dict], list[dict]]


@dataclass
class HealthSample:
    """One corpus's fixed training and dev samples, each in two random halves (the second is read only where the
    first cannot clear the corpus, :meth:`CorpusHealth.undecided`) of collated sub-batches, each also with every
    target given its length-neighbour's source (the same sentences in the same order)."""

    train: list[Versions]
    dev: list[Versions]


def draw_health_sample(train: object, dev: object, collate_fn: Callable[[list[dict]], dict], *, tokens: int,
                       sub_batch_tokens: int, seed: int, causal: bool = False) -> HealthSample:
    """``tokens`` worth of random training and dev examples of one corpus, split into two random halves of about
    equal tokens (the same split of a training and a dev sample of the same pairs). ``causal``: prompt + completion
    examples of a decoder-only model, whose mismatched version is the neighbour's prompt before its own
    completion."""
    samples = []
    for purpose, dataset in enumerate((train, dev)):
        lengths = example_lengths(dataset)
        chosen = draw_token_batch(lengths, tokens, np.random.default_rng([seed, purpose]))
        chosen = chosen[np.lexsort((chosen, lengths[chosen]))]  # by length, then index: halves, neighbours fixed
        rows = dataset.select_columns([c for c in MODEL_COLUMNS if c in dataset.column_names]).select(
            chosen.tolist()).to_list()
        order = np.random.default_rng([seed, 2]).permutation(len(rows))
        cut = int(np.searchsorted(np.cumsum(lengths[chosen][order]), lengths[chosen].sum() / 2)) + 1
        cut = min(cut, len(rows) - 1) if len(rows) > 1 else len(rows)
        samples.append([_versions([rows[i] for i in half], lengths[chosen][half], collate_fn, sub_batch_tokens,
                                  causal) for half in (np.sort(order[:cut]), np.sort(order[cut:])) if len(half)])
    return HealthSample(*samples)


def _versions(rows: list[dict], lengths: np.ndarray, collate_fn: Callable[[list[dict]], dict],
              sub_batch_tokens: int, causal: bool) -> Versions:
    """Length-ordered ``rows`` as sub-batches, aligned and with each target given its neighbour's source."""
    mismatched = [_with_source_of(row, rows[j], causal) for row, j in zip(rows, _neighbours(len(rows)))]
    chunks = split_by_tokens(np.arange(len(rows)), lengths, sub_batch_tokens)
    return tuple([collate_fn([version[i] for i in chunk]) for chunk in chunks] for version in (rows, mismatched))


def _neighbours(count: int) -> np.ndarray:
    """The row whose source each of ``count`` length-ordered rows is given in the mismatched version: the one
    before it (the first gets the last)."""
    return np.roll(np.arange(count), 1)


def _with_source_of(row: dict, other: dict, causal: bool) -> dict:
    """``row`` with ``other``'s source: its encoder input, or for a decoder-only model its prompt (the leading
    positions whose label is ignored), the completion and its labels kept."""
    if not causal:
        return {**row, **{c: other[c] for c in _SOURCE_COLUMNS if c in row}}
    own, theirs = prompt_lengths([row["labels"], other["labels"]])
    input_ids = other["input_ids"][:theirs] + row["input_ids"][own:]
    return {**row, "input_ids": input_ids, "attention_mask": [1] * len(input_ids),
            "labels": [IGNORE_INDEX] * theirs + row["labels"][own:]}


def check_sample(model: nn.Module, batches: Versions,
                 language_code_ids: Collection[int] = ()) -> SampleCheck:
    """Loss and per-sentence source use of one sample (its aligned and mismatched sub-batches); language-code
    positions (which a multilingual tokenizer puts in the labels and the decoder is forced to) are not scored.

    An encoder-decoder model encodes each source once: the mismatched version's sources are the aligned version's,
    each moved to its neighbour's target (:func:`_neighbours`), so its decoder is given those encodings instead of
    encoding them again (a sixth of a check's compute at the demo's shape). A decoder-only model, whose source is
    its prompt, and a sharded one, which must be called whole, run both versions in full."""
    device = model_device(model)
    encoder = _encoder_of(model)
    with restored_modes(model), torch.no_grad():
        model.eval()
        if encoder is None:
            (aligned, tokens), (mismatched, _) = (
                _stacked([_sentence_losses(model, _on(batch, device), language_code_ids) for batch in version])
                for version in batches)
        else:
            (aligned, tokens), mismatched = _losses_sharing_encodings(model, encoder, batches, device,
                                                                      language_code_ids)
    tokens = np.maximum(tokens, 1)
    return SampleCheck(float(aligned.sum() / tokens.sum()), (mismatched - aligned) / tokens, float(tokens.sum()))


def _encoder_of(model: nn.Module) -> nn.Module | None:
    """The encoder of an encoder-decoder model that may be called apart from its decoder, else ``None``."""
    if is_causal_lm(model) or sharding(model) is not None:
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: adapters are in its layers
    if not getattr(getattr(base, "config", None), "is_encoder_decoder", False) or not hasattr(base, "get_encoder"):
        return None
    return base.get_encoder()


def _losses_sharing_encodings(model: nn.Module, encoder: nn.Module, batches: tuple[list[dict], list[dict]],
                              device: torch.device, language_code_ids: Collection[int]
                              ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """The aligned version's sentence losses and tokens, and the mismatched version's losses with each target's
    decoder given its neighbour's encoding from the aligned pass (no second encoder pass)."""
    aligned_batches, mismatched_batches = batches
    encodings, aligned = [], []
    for batch in aligned_batches:
        batch = _on(batch, device)
        encoded = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        encodings += [row[mask.bool()] for row, mask in zip(encoded, batch["attention_mask"])]
        aligned.append(_sentence_losses(model, {**batch, "encoder_outputs": BaseModelOutput(encoded)},
                                        language_code_ids))
    neighbour, first, mismatched = _neighbours(len(encodings)), 0, []
    for batch, given in zip(aligned_batches, mismatched_batches):
        batch, mask = _on(batch, device), given["attention_mask"].to(device).bool()  # the neighbours' sources
        rows = neighbour[first:first + len(mask)]
        first += len(mask)
        encoded = encodings[0].new_zeros((*mask.shape, encodings[0].shape[-1]))
        encoded[mask] = torch.cat([encodings[r] for r in rows])
        mismatched.append(_sentence_losses(
            model, {**batch, "attention_mask": mask.long(), "encoder_outputs": BaseModelOutput(encoded)},
            language_code_ids)[0])
    return _stacked(aligned), np.concatenate(mismatched)


def _on(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _stacked(losses: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return tuple(np.concatenate(part).astype(np.float64) for part in zip(*losses))


def _sentence_losses(model: nn.Module, batch: Mapping[str, object], language_code_ids: Collection[int]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Each sentence's summed token cross-entropy and scored tokens in one sub-batch, teacher-forced (the model in
    eval mode, no gradients: the caller's)."""
    mask = scored_mask(batch["labels"], language_code_ids)
    logits = target_logits(model, batch, mask)
    losses = F.cross_entropy(logits.float(), batch["labels"][mask], reduction="none")
    sums = torch.zeros(mask.shape[0], device=losses.device).index_add_(0, mask.nonzero()[:, 0], losses)
    return sums.cpu().numpy(), mask.sum(dim=1).cpu().numpy()
