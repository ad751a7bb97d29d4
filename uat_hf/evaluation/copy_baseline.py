"""The copy baseline: what a system that outputs its source unchanged scores, and how much a system copies.

Between related languages, and in corpora full of names, numbers, placeholders and markup, copying the source
earns BLEU and chrF with no translation at all; a weak model that learned to copy earns the same credit. So every
table of scores carries, per corpus, the scores of the source itself as hypothesis (``bleu_copy``,
``chrf_copy``, the same sacreBLEU settings as the system's) and the share of hypothesis words that stand in
their source (``copy_rate``) beside the references' own share (``reference_copy_rate``): a system above the
copy baseline with a copy rate near the references' translates; one near the baseline with a copy rate far above
the references' copies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .metrics import translation_scores

#: The keys :func:`copy_metrics` returns, in table order.
COPY_KEYS = ("bleu_copy", "chrf_copy", "copy_rate", "reference_copy_rate")


def copy_rate(texts: Sequence[str], sources: Sequence[str]) -> float:
    """The share of the whitespace words of ``texts`` that also stand in their own source (case kept; 0 when
    ``texts`` have no words)."""
    if len(texts) != len(sources):
        raise ValueError(f"Got {len(texts)} texts for {len(sources)} sources; they must pair up.")
    copied = total = 0
    for text, source in zip(texts, sources):
        words, source_words = text.split(), set(source.split())
        copied += sum(word in source_words for word in words)
        total += len(words)
    return copied / total if total else 0.0


def copy_metrics(sources: Sequence[str], references: Sequence[str],
                 hypotheses: Sequence[str] | None = None) -> dict[str, float]:
    """``bleu_copy``, ``chrf_copy`` (the sources scored as hypotheses), ``reference_copy_rate`` and, given the
    system's ``hypotheses``, its ``copy_rate``."""
    scores, _ = translation_scores(list(sources), list(references))
    out = {"bleu_copy": scores["bleu"], "chrf_copy": scores["chrf"],
           "reference_copy_rate": copy_rate(references, sources)}
    if hypotheses is not None:
        out["copy_rate"] = copy_rate(hypotheses, sources)
    return out


def copy_baseline_metrics(sources: Mapping[str, Sequence[str]], translations: Mapping[str, Any],
                          prefix: str) -> dict[str, float]:
    """``<prefix>_<corpus>_<key>`` (:data:`COPY_KEYS`) for every translated corpus with references whose sources
    are given, and ``<prefix>_mean_bleu_copy`` / ``_chrf_copy`` over them. ``translations``: name →
    :class:`~uat_hf.training.uat_trainer.CorpusTranslation` (``hypotheses``, ``references``)."""
    from .metrics import macro_means

    metrics = {}
    for name, translation in translations.items():
        if translation.references is None or len(sources.get(name, ())) != len(translation.references):
            continue
        for key, value in copy_metrics(sources[name], translation.references, translation.hypotheses).items():
            metrics[f"{prefix}_{name}_{key}"] = value
    names = [name for name in translations if f"{prefix}_{name}_bleu_copy" in metrics]
    metrics.update(macro_means(metrics, names, prefix, keys=("bleu_copy", "chrf_copy")))
    return metrics
