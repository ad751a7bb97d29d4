"""The corpus audit: broken and redundant corpora seen before they cost a training step (docs/corpus_audit.md)."""

from __future__ import annotations

from collections.abc import Sequence

from .corpus_audit import SIGNALS, AuditReport, CorpusAudit, SignalRate, audit_corpora

__all__ = ["SIGNALS", "AuditReport", "CorpusAudit", "SignalRate", "audit_corpora", "audit_specs"]


def audit_specs(specs: Sequence, preprocessing, *, sample: int = 4000, seed: int = 0,
                cache_dir: str | None = None) -> AuditReport:
    """Audit the corpora of ``specs`` (:class:`~uat_hf.data.corpus_specs.CorpusSpec`) as a run reads them: the
    training pairs after ``preprocessing`` (the run's cleaning, a :class:`~uat_hf.data.preprocessing.
    PreprocessingConfig`), against each corpus's dev pairs. A corpus without a dev split is reported, not judged."""
    from ..corpora import load_corpus_split
    from ..preprocessing import preprocess

    train, dev = {}, {}
    for spec in specs:
        pairs = preprocess(load_corpus_split(spec, "train", cache_dir=cache_dir), preprocessing, corpus=spec.name)
        train[spec.name] = _columns(pairs)
        if spec.split_location("dev") is not None:
            pairs = preprocess(load_corpus_split(spec, "dev", cache_dir=cache_dir), preprocessing, corpus=spec.name,
                               split="dev")
            dev[spec.name] = _columns(pairs)
    languages = {spec.name: (spec.source_lang, spec.target_lang) for spec in specs}
    return audit_corpora(train, dev, languages, sample=sample, seed=seed)


def _columns(pairs) -> tuple[list[str], list[str]]:
    """The two text columns as lists, read at once (indexing a Dataset row by row is far slower). Through
    ``to_dict``, which applies the rows a filter kept: the Arrow table under a filtered Dataset still holds all."""
    columns = pairs.select_columns(["source", "target"]).to_dict()
    return columns["source"], columns["target"]
