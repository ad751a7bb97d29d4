"""The corpus audit: broken and redundant corpora seen before they cost a training step (docs/corpus_audit.md)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .corpus_audit import SIGNALS, AuditReport, CorpusAudit, SignalRate, audit_corpora

__all__ = ["SIGNALS", "AuditReport", "CorpusAudit", "SignalRate", "audit_corpora", "audit_specs"]


def audit_specs(specs: Sequence, preprocessing, *, sample: int = 4000, seed: int = 0, cache_dir: str | None = None,
                streamed: Collection[str] = (), failing: bool = False) -> AuditReport:
    """Audit the corpora of ``specs`` (:class:`~uat_hf.data.corpus_specs.CorpusSpec`) as a run reads them: the
    training pairs after ``preprocessing`` (the run's cleaning, a :class:`~uat_hf.data.preprocessing.
    PreprocessingConfig`), against each corpus's dev pairs. A corpus without a dev split is reported, not judged.
    A corpus named in ``streamed`` is read as the run streams it, and audited on its first ``sample`` pairs (a stream
    has no random access); its size is the one its metadata gives, when it gives one. ``failing``: mark the failing
    pairs of each suspect corpus (:attr:`~uat_hf.data.audit.corpus_audit.CorpusAudit.failing`; not of a stream)."""
    from ..corpora import load_corpus_split
    from ..preprocessing import preprocess

    train, dev, sizes = {}, {}, {}
    for spec in specs:
        if spec.name in streamed:
            pairs, sizes[spec.name] = _stream_head(spec, sample, cache_dir)
        else:
            pairs = load_corpus_split(spec, "train", cache_dir=cache_dir)
        train[spec.name] = _columns(preprocess(pairs, preprocessing, corpus=spec.name))
        if spec.split_location("dev") is not None:
            pairs = preprocess(load_corpus_split(spec, "dev", cache_dir=cache_dir), preprocessing, corpus=spec.name,
                               split="dev")
            dev[spec.name] = _columns(pairs)
    languages = {spec.name: (spec.source_lang, spec.target_lang) for spec in specs}
    report = audit_corpora(train, dev, languages, sample=sample, seed=seed, failing=failing)
    for name, size in sizes.items():
        audit = report.corpora[name]
        audit.streamed, audit.failing = True, None  # a stream's first pairs only: nothing to drop by index
        audit.pairs = size if size is not None else audit.pairs
    return report


def _stream_head(spec, count: int, cache_dir: str | None):
    """The first ``count`` training pairs of a streamed corpus, and its size from metadata (``None``: unknown)."""
    from itertools import islice

    import datasets

    from ..streams import load_corpus_stream, stream_size

    rows = list(islice(load_corpus_stream(spec, cache_dir=cache_dir), count))
    return datasets.Dataset.from_list(rows), stream_size(spec)


def _columns(pairs) -> tuple[list[str], list[str]]:
    """The two text columns as lists, read at once (indexing a Dataset row by row is far slower). Through
    ``to_dict``, which applies the rows a filter kept: the Arrow table under a filtered Dataset still holds all."""
    columns = pairs.select_columns(["source", "target"]).to_dict()
    return columns["source"], columns["target"]
