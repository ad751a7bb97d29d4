"""The corpus audit: broken and redundant corpora seen before they cost a training step (docs/corpus_audit.md)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import datasets
import numpy as np

from . import signals
from .corpus_audit import MIN_DEV_PAIRS, SAMPLE, SIGNALS, AuditReport, CorpusAudit, SignalRate, audit_corpora

__all__ = ["SAMPLE", "SIGNALS", "AuditReport", "CorpusAudit", "SignalRate", "audit_corpora", "audit_specs"]


def audit_specs(specs: Sequence, preprocessing, *, sample: int = SAMPLE, seed: int = 0, cache_dir: str | None = None,
                streamed: Collection[str] = (), failing: bool = False,
                cleaned: Mapping[str, Mapping[str, datasets.Dataset]] | None = None,
                num_proc: int | None = None) -> AuditReport:
    """Audit the corpora of ``specs`` (:class:`~uat_hf.data.corpus_specs.CorpusSpec`) as a run reads them: the
    training pairs after ``preprocessing`` (the run's cleaning, a :class:`~uat_hf.data.preprocessing.
    PreprocessingConfig`), against each corpus's dev pairs. A corpus without a dev split is reported, not judged.
    ``cleaned``: the pairs :func:`~uat_hf.data.corpora.clean_corpora` read and cleaned for the run, ``{split:
    {corpus: Dataset}}``, audited as they are (a corpus missing there is read and cleaned here). Every training
    pair is hashed for the repeat signal in ``num_proc`` processes; otherwise only the sampled pairs are read.
    A corpus named in ``streamed`` is read as the run streams it, and audited on its first ``sample`` pairs (a stream
    has no random access); its size is the one its metadata gives, when it gives one. ``failing``: mark the failing
    pairs of each suspect corpus (:attr:`~uat_hf.data.audit.corpus_audit.CorpusAudit.failing`; not of a stream)."""
    from ..corpora import clean_corpora
    from ..preprocessing import preprocess

    def cleaned_split(spec, split: str) -> datasets.Dataset:
        given = (cleaned or {}).get(split, {}).get(spec.name)
        if given is not None:
            return given
        return clean_corpora([spec], preprocessing, splits=(split,), num_proc=num_proc, cache_dir=cache_dir)[split][
            spec.name]

    train, dev, sizes, keys = {}, {}, {}, {}
    for spec in specs:
        if spec.name in streamed:
            pairs, sizes[spec.name] = _stream_head(spec, sample, cache_dir)
            train[spec.name] = preprocess(pairs, preprocessing, corpus=spec.name)
        else:
            train[spec.name] = cleaned_split(spec, "train")
        if spec.split_location("dev") is not None:
            pairs = cleaned_split(spec, "dev").select_columns(["source", "target"]).to_dict()
            dev[spec.name] = pairs["source"], pairs["target"]
        dev_pairs = len(dev[spec.name][0]) if spec.name in dev else 0
        if dev_pairs >= MIN_DEV_PAIRS:  # a corpus that cannot be judged is not hashed
            keys[spec.name] = _pair_keys(train[spec.name], spec.name, num_proc)
    languages = {spec.name: (spec.source_lang, spec.target_lang) for spec in specs}
    report = audit_corpora(train, dev, languages, sample=sample, seed=seed, failing=failing, keys=keys)
    for name, size in sizes.items():
        audit = report.corpora[name]
        audit.streamed, audit.failing = True, None  # a stream's first pairs only: nothing to drop by index
        audit.pairs = size if size is not None else audit.pairs
    return report


def _pair_keys(pairs: datasets.Dataset, corpus: str, num_proc: int | None) -> np.ndarray:
    """:func:`~.signals.pair_keys` of every pair, hashed in ``num_proc`` processes (``datasets`` keeps the result
    in its cache beside the cleaned corpus, so a rerun reads it)."""
    workers = num_proc if num_proc and num_proc > 1 and len(pairs) >= 2 * _KEY_BATCH else None
    hashed = pairs.map(_key_batch, batched=True, batch_size=_KEY_BATCH, num_proc=workers,
                       remove_columns=pairs.column_names, desc=f"{corpus}/train: audit keys")
    return hashed.with_format("numpy")[:]["key"]


_KEY_BATCH = 10_000


def _key_batch(batch: dict) -> dict:
    return {"key": signals.pair_keys(batch["source"], batch["target"])}


def _stream_head(spec, count: int, cache_dir: str | None):
    """The first ``count`` training pairs of a streamed corpus, and its size from metadata (``None``: unknown)."""
    from itertools import islice

    from ..streams import load_corpus_stream, stream_size

    rows = list(islice(load_corpus_stream(spec, cache_dir=cache_dir), count))
    return datasets.Dataset.from_list(rows), stream_size(spec)
