"""Per-corpus translation metrics with reproducible signatures.

``evaluate.load("sacrebleu")`` fetches a metric script from the Hub, which fails offline; sacrebleu's own
API gives the same numbers and, unlike the script, the signature string that says exactly how each number
was computed (tokenizer, smoothing, casing, version). Scores are on detokenized text, as sacrebleu intends.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu


def detokenize(tokenizer: Any, token_ids: np.ndarray | Sequence[Sequence[int]]) -> list[str]:
    """The text of generated (or label) token ids, as sacreBLEU should see it.

    Negative ids (the ``-100`` that pads labels and multi-process gathers) become the pad id; special tokens
    (pad, EOS, language codes) are skipped; surrounding whitespace goes.
    """
    pad = tokenizer.pad_token_id
    if isinstance(token_ids, np.ndarray):
        ids: Any = np.where(token_ids < 0, pad, token_ids)
    else:
        ids = [[pad if token < 0 else token for token in row] for row in token_ids]
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


#: sacreBLEU's corpus-level metrics a run can score each corpus with (``UATConfig.corpus_metrics``). BLEU and chrF
#: are always scored (the tables, the copy baseline and best-model selection read them); ``chrfpp`` is chrF++
#: (word bigrams too) and ``ter`` the translation edit rate, for which lower is better. A local folder or ``.py``
#: file of a Hugging Face ``evaluate`` metric (``evaluate.load`` of a path: no download) scores each corpus too.
CORPUS_METRICS = ("bleu", "chrf", "chrfpp", "ter")


def check_corpus_metrics(names: Sequence[str]) -> list[str]:
    """``names`` with BLEU and chrF first, each once, then the local ``evaluate`` metrics; an unknown name is
    refused, naming the known ones."""
    unknown = [name for name in names if name not in CORPUS_METRICS and not _is_local_metric(name)]
    if unknown:
        raise ValueError(f"corpus_metrics: unknown metric {unknown[0]!r}; choose from {', '.join(CORPUS_METRICS)} "
                         "(sacreBLEU's) or give the path of a local `evaluate` metric (a folder or .py file: Hub "
                         "metrics are downloaded scripts); a function of your own goes in compute_metrics.")
    local = list(dict.fromkeys(name for name in names if name not in CORPUS_METRICS))
    return [name for name in CORPUS_METRICS if name in ("bleu", "chrf") or name in names] + local


def translation_scores(
    hypotheses: Sequence[str], references: Sequence[str], *, bleu_tokenize: str = "13a",
    metrics: Sequence[str] = ("bleu", "chrf"),
) -> tuple[dict[str, float], dict[str, str]]:
    """Corpus-level ``metrics`` (:func:`check_corpus_metrics`) of ``hypotheses`` against one reference each.

    Returns ``({"bleu": ..., "chrf": ..., ...}, {"bleu": signature, "chrf": signature, ...})``; a local ``evaluate``
    metric adds each number it returns under its own key, its signature being its path.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"Got {len(hypotheses)} hypotheses for {len(references)} references; they must pair up.")
    scorers = {"bleu": lambda: sacrebleu.BLEU(tokenize=bleu_tokenize), "chrf": sacrebleu.CHRF,
               "chrfpp": lambda: sacrebleu.CHRF(word_order=2), "ter": sacrebleu.TER}
    scores, signatures = {}, {}
    for name in check_corpus_metrics(metrics):
        if name not in scorers:
            result = _local_metric(name).compute(predictions=list(hypotheses), references=list(references))
            numbers = {key: float(value) for key, value in result.items() if _is_number(value)}
            scores.update({key: value for key, value in numbers.items() if key not in scores})
            signatures[name] = f"evaluate:{name}"
            continue
        metric = scorers[name]()
        scores[name] = float(metric.corpus_score(list(hypotheses), [list(references)]).score)
        signatures[name] = str(metric.get_signature())
    return scores, signatures


def _is_local_metric(name: str) -> bool:
    path = Path(name)
    return path.is_dir() or (path.is_file() and path.suffix == ".py")


@functools.cache
def _local_metric(path: str) -> Any:
    """``evaluate.load`` of a local metric, once per path (loading imports its script)."""
    try:
        import evaluate
    except ImportError:
        raise ImportError(f"corpus_metrics names the local evaluate metric {path!r}, but `evaluate` is not "
                          "installed: pip install \"uat-hf[evaluate]\".") from None
    return evaluate.load(path)


def macro_average(per_corpus: Mapping[str, Mapping[str, float]], key: str) -> float:
    """Unweighted mean over corpora: every corpus counts the same, however large its test set."""
    values = [scores[key] for scores in per_corpus.values()]
    if not values:
        raise ValueError("No corpora to average over.")
    return float(sum(values) / len(values))


def macro_means(metrics: Mapping[str, Any], names: Sequence[str], prefix: str, keys: Sequence[str] = ("bleu", "chrf"),
                *, label: str = "mean") -> dict[str, float]:
    """``<prefix>_<label>_<key>``: for each key, the :func:`macro_average` of ``<prefix>_<name>_<key>`` over the
    corpora ``names`` that have it as a number (none: no mean). The one macro mean of prefixed metrics, used by
    the trainer, both command-line tools and :class:`~uat_hf.evaluation.corpus_evaluation.CorpusEvaluation`."""
    def joined(*parts: str) -> str:
        return "_".join(part for part in (prefix, *parts) if part)

    means = {}
    for key in keys:
        per_corpus = {name: {key: metrics[joined(name, key)]} for name in names
                      if _is_number(metrics.get(joined(name, key)))}
        if per_corpus:
            means[joined(label, key)] = macro_average(per_corpus, key)
    return means


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_table(per_corpus: Mapping[str, Mapping[str, float]]) -> str:
    """A plain-text table of BLEU and chrF per corpus with the macro average as the last row; with the copy
    baseline (:mod:`~uat_hf.evaluation.copy_baseline`) in every row, its BLEU and chrF and the share of words
    copied from the source by the system and by the references follow."""
    width = max([len("mean")] + [len(name) for name in per_corpus])
    copies = all("bleu_copy" in scores and "copy_rate" in scores for scores in per_corpus.values())
    header = f"{'corpus':<{width}}  {'BLEU':>6}  {'chrF':>6}"
    lines = [header + (f"  {'copy BLEU':>9}  {'copy chrF':>9}  {'copied':>6}  {'ref':>5}" if copies else "")]
    for name, scores in per_corpus.items():
        line = f"{name:<{width}}  {scores['bleu']:6.2f}  {scores['chrf']:6.2f}"
        if copies:
            line += (f"  {scores['bleu_copy']:9.2f}  {scores['chrf_copy']:9.2f}  {scores['copy_rate']:6.0%}  "
                     f"{scores['reference_copy_rate']:5.0%}")
        lines.append(line)
    mean = f"{'mean':<{width}}  {macro_average(per_corpus, 'bleu'):6.2f}  {macro_average(per_corpus, 'chrf'):6.2f}"
    if copies:
        mean += f"  {macro_average(per_corpus, 'bleu_copy'):9.2f}  {macro_average(per_corpus, 'chrf_copy'):9.2f}"
    lines.append(mean)
    if copies:
        lines.append("copy BLEU/chrF: the source itself as the translation; copied: share of words that stand in the "
                     "source (system, references)")
    return "\n".join(lines)
