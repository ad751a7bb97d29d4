"""The model card ``uat-train`` writes beside a trained model: a ``huggingface_hub.ModelCard`` from a recipe.

The metadata is the Hub's own (``ModelCardData``): the languages of the corpora, the Hub datasets among
the corpus specs, BLEU and chrF as metrics, the base model when a pretrained checkpoint was fine-tuned, and
the per-corpus scores as ``model-index`` evaluation results. The text says what was trained on what, how
it was balanced, how to reproduce it (the recipe and the framework versions), and the scores: one row per corpus
in name order, the means last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..data.corpus_specs import DIRECTIONS
from ..strategies.registry import describe_strategy
from ..utils.hub_errors import is_hub_id
from ..utils.version import framework_versions

__all__ = ["METRICS", "build_model_card", "stopped_early_note"]

#: The scores a run reports per corpus (``eval_<corpus>_<metric>``), in table order.
METRICS = ("bleu", "chrf")
#: Averages ``uat-train`` reports beside the corpora (``eval_<name>_bleu``), listed after them in this order.
_MEANS = {"in_domain_mean": "in-domain mean", "out_of_domain_mean": "out-of-domain mean", "mean": "mean"}


def build_model_card(fields: Mapping[str, Any], results: Mapping[str, float] | None = None, *,
                     recipe_file: str = "recipe.yaml") -> ModelCard:
    """The card of a run of the recipe ``fields`` with the evaluation ``results`` (``eval_results.json``)."""
    get = fields.get
    specs = _mappings(get("corpus_specs"))
    eval_specs = _mappings(get("eval_corpus_specs"))
    strategy = get("strategy", "proportional")
    scores = _scores(results or {})
    model = str(get("model_name_or_path", "small"))
    data = ModelCardData(
        language=_languages(fields, specs + eval_specs) or None,
        datasets=_hub_datasets(specs + eval_specs) or None,
        metrics=list(METRICS),
        base_model=model if is_hub_id(model) else None,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "uat-hf", *_strategy_tag(str(strategy))],
        model_name=Path(str(get("output_dir") or "uat-hf-model")).name if scores else None,
        eval_results=_eval_results(scores, specs + eval_specs, get("eval_split", "test")) or None,
    )
    text = _text(fields, specs, eval_specs, scores, recipe_file) + _audit_text((results or {}).get("corpus_audit"))
    health = (results or {}).get("corpus_health", {})
    notes = [stopped_early_note(results or {}), *health.get("warnings", []), health.get("note")]
    for note in reversed([n for n in notes if n]):
        text = text.replace("\n## Results\n", f"\n## Results\n\n**{note}**\n", 1)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")


def _strategy_tag(strategy: str) -> list[str]:
    """The strategy as a Hub tag, when it is one: a registered name (``multiuat``), not an outside class's
    ``module:Class`` path (the Hub's tags are words; the card's text names the class)."""
    return [] if ":" in strategy or "/" in strategy else [strategy]


def _audit_text(audit: Mapping[str, Any] | None) -> str:
    """The corpus audit's verdicts (``uat_hf.data.audit``), one row per training corpus."""
    if not audit:
        return ""
    lines = ["", "## Corpus audit", "", "Each training corpus against its own dev set, before training "
             "(docs/corpus_audit.md).", "", "| corpus | pairs | effective size | verdict |", "|---|---|---|---|"]
    lines += [f"| {name} | {c['pairs']} | {c['effective_size']:.0f} | {c['verdict']}"
              + (f" ({c['action']})" if c.get("action") else "") + " |"
              for name, c in audit.get("corpora", {}).items()]
    return "\n".join(lines) + "\n"


def stopped_early_note(results: Mapping[str, Any]) -> str | None:
    """One sentence for the results table and the model card when the time budget stopped training early."""
    if not results.get("stopped_early"):
        return None
    return (f"STOPPED EARLY: the time budget (max_train_minutes {results['max_train_minutes']:g}) ended training "
            f"after {results['steps_done']} of {results['steps_planned']} steps, so these scores are of a shorter "
            "run than the recipe's, not comparable with a full run's (the README's numbers for recipes/demo.yaml "
            "are of a full run).")


def _mappings(value: Any) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(fields: Mapping[str, Any], specs: list[dict], eval_specs: list[dict],
          scores: dict[str, dict[str, float]], recipe_file: str) -> str:
    get = fields.get
    corpora = get("corpora") or [spec.get("name") for spec in specs]
    ood = [spec.get("name") for spec in eval_specs]
    strategy = describe_strategy(fields)
    data = f"- Training data: `{get('corpus_dir') or 'corpus_specs'}`"
    lines = [
        "# Multi-corpus translation model trained with uat-hf",
        "",
        f"- Model: `{get('model_name_or_path', 'small')}`",
        data + (f" — corpora {', '.join(map(str, corpora))}" if corpora else ""),
        f"- Direction: {get('direction', 'multi-domain')}",
        f"- Corpus balancing: {strategy}",
    ]
    if ood:
        lines.append(f"- Out-of-domain evaluation: {', '.join(map(str, ood))}")
    lines += ["", "## Reproduce", "", "```bash", "uat-train --config <this directory or repo id>", "```", "",
              f"The full configuration is in `{recipe_file}`.", "", "### Framework versions", ""]
    lines += [f"- {label} {found}" for label, found in framework_versions().items()]
    if scores:
        copies = any("bleu_copy" in values for values in scores.values())
        lines += ["", "## Results", "", "| corpus | BLEU | chrF |" + (" copy BLEU | copy chrF |" if copies else ""),
                  "|---|---|---|" + ("---|---|" if copies else "")]
        rows = [(name, name) for name in scores if name not in _MEANS]
        rows += [(label, key) for key, label in _MEANS.items() if key in scores]
        keys = ("bleu", "chrf", "bleu_copy", "chrf_copy") if copies else ("bleu", "chrf")
        lines += [f"| {label} | " + " | ".join(_number(scores[key].get(k)) for k in keys) + " |"
                  for label, key in rows]
        if copies:
            lines += ["", "Copy BLEU/chrF: the source sentence itself scored as the translation, a baseline that "
                      "names, numbers and shared words earn without translating."]
    return "\n".join(lines) + "\n"


def _scores(results: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``{"eval_bible_bleu": 3.5, ...}`` → ``{"bible": {"bleu": 3.5, ...}}``, corpora in name order."""
    scores: dict[str, dict[str, float]] = {}
    for key, value in results.items():
        for metric in METRICS:
            if key.startswith("eval_") and key.endswith(f"_{metric}") and isinstance(value, (int, float)):
                scores.setdefault(key[len("eval_"):-len(metric) - 1], {})[metric] = float(value)
    for name, values in scores.items():
        for key in ("bleu_copy", "chrf_copy"):
            if isinstance(results.get(f"eval_{name}_{key}"), (int, float)):
                values[key] = float(results[f"eval_{name}_{key}"])
    return {name: scores[name] for name in sorted(scores) if "bleu" in scores[name]}


def _number(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "–"


def _languages(fields: Mapping[str, Any], specs: list[dict]) -> list[str]:
    """Source and target languages of the corpora, as far as the recipe names them (first seen first)."""
    get = fields.get
    languages: list[Any] = []
    if get("corpus_dir"):
        direction = DIRECTIONS.get(get("direction", "multi-domain"))
        names = list(get("corpora") or [])
        if direction == "multi-domain":
            languages += [get("source_lang"), get("target_lang")]
        elif direction == "many-to-one":
            languages += names + [get("target_lang") or "en"]
        elif direction == "one-to-many":
            languages += [get("source_lang") or "en"] + names
    for spec in specs:
        languages += [spec.get("source_lang"), spec.get("target_lang")]
    return _unique(str(language) for language in languages if language)


def _hub_datasets(specs: list[dict]) -> list[str]:
    """The Hub dataset ids the corpus specs read (``path``, or a split given as ``org/name``)."""
    return _unique(value for spec in specs for value in _hub_ids(spec))


def _hub_ids(spec: dict) -> list[str]:
    if spec.get("path") is not None:
        return [spec["path"]] if is_hub_id(str(spec["path"])) else []
    return [str(spec[split]) for split in ("train", "dev", "test") if spec.get(split) and is_hub_id(str(spec[split]))]


def _eval_results(scores: dict[str, dict[str, float]], specs: list[dict], split: str) -> list[EvalResult]:
    """``model-index`` entries: one per corpus and metric (the means are no dataset of their own)."""
    by_name = {spec.get("name"): spec for spec in specs}
    results = []
    for name, values in scores.items():
        if name in _MEANS:
            continue
        spec = by_name.get(name, {})
        hub = _hub_ids(spec)
        results += [
            EvalResult(task_type="translation", dataset_type=hub[0] if hub else name, dataset_name=name,
                       dataset_config=spec.get("hub_config") if hub else None, dataset_split=split,
                       metric_type=metric, metric_value=round(value, 2))
            for metric, value in values.items()
        ]
    return results


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))
