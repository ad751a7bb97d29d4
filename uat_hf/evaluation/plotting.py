"""Pictures of a balancing run, drawn from the ``balancing_history.jsonl`` a run leaves in its output dir.

The point of MultiUAT is *how* the corpus distribution moves during training, so the paper shows it as
curves of each corpus's sampling probability over training steps (its Figures 1–3); for MultiDDS-S the
gradient-cosine matrix between training and dev corpora explains why a corpus gains or loses share, and for
mixing-law the fitted law A (how training on one corpus lowers the dev loss of each). All
are read back from the history file the :class:`~uat_hf.training.callback.CorpusBalancingCallback` writes at each
update, so a run can be plotted while it trains, after it finished, or on another machine.

Figures are drawn on the Agg canvas of a standalone ``matplotlib.figure.Figure``: nothing here touches
pyplot's global state or backend, so importing this module inside a notebook or a GUI session changes
nothing there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .history import HistorySource, load_history, strategy_fields

__all__ = [
    "COSINE_PNG",
    "LAW_PNG",
    "PROBABILITIES_PNG",
    "REWARDS_PNG",
    "average_cosine",
    "average_law",
    "compare_probabilities",
    "corpus_curves",
    "distinct_labels",
    "load_history",
    "mix_figure",
    "plot_cosine_heatmap",
    "plot_law_heatmap",
    "plot_probabilities",
    "plot_probability_comparison",
    "plot_rewards",
    "plot_run",
    "probability_comparison_figure",
]

logger = logging.getLogger(__name__)

PROBABILITIES_PNG = "balancing_probabilities.png"
REWARDS_PNG = "balancing_rewards.png"
COSINE_PNG = "gradient_cosine.png"
LAW_PNG = "mixing_law.png"
COMPARISON_PNG = "balancing_probabilities_compared.png"

_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P")

History = Sequence[Mapping[str, Any]]


def average_cosine(history_or_output_dir: HistorySource) -> tuple[list[str], np.ndarray, int]:
    """The element-wise mean of the MultiDDS-S gradient-cosine matrices over all updates that recorded one.

    Row ``j`` is training corpus ``j``, column ``i`` dev corpus ``i`` (so a row's mean is the reward
    R(j) of that update), both in the order of the records' ``probabilities``. A matrix with a non-finite
    entry (an update the scorer skipped) is left out of the mean and logged.

    Returns ``(corpus_names, mean_matrix, number_of_matrices_averaged)``. Raises ``ValueError`` when no
    record has a finite ``cosine`` matrix or the corpora differ between records.
    """
    return _average_matrix(load_history(history_or_output_dir), "cosine", "multidds-s runs record gradient cosines")


def average_law(history_or_output_dir: HistorySource) -> tuple[list[str], np.ndarray, int]:
    """The element-wise mean of the mixing-law matrices A over all updates that fitted one, transposed to the
    layout of :func:`average_cosine`: row ``j`` is training corpus ``j``, column ``i`` dev corpus ``i``, the cell
    the fall of dev loss i per step of training on j (a row's sum is what corpus j gains the average dev loss)."""
    names, matrix, count = _average_matrix(load_history(history_or_output_dir), "law",
                                           "mixing-law runs record a fitted law")
    return names, matrix.T, count


def _average_matrix(history: History, key: str, who: str) -> tuple[list[str], np.ndarray, int]:
    records = [r for r in history if strategy_fields(r).get(key) is not None]
    if not records:
        raise ValueError(f"No record of this history has a {key!r} matrix: only {who}.")
    names = list(records[0]["probabilities"])
    total = np.zeros((len(names), len(names)), dtype=np.float64)
    count = 0
    for record in records:
        if list(record["probabilities"]) != names:
            raise ValueError(
                f"The update at step {record['step']} lists corpora {list(record['probabilities'])}, the first one "
                f"{names}; one history must come from one run."
            )
        matrix = np.asarray(strategy_fields(record)[key], dtype=np.float64)
        if matrix.shape != total.shape:
            raise ValueError(
                f"The {key} matrix at step {record['step']} has shape {matrix.shape}; expected {total.shape} "
                f"(corpora {names})."
            )
        if not np.isfinite(matrix).all():
            logger.warning("Leaving the non-finite %s matrix of step %s out of the average.", key, record["step"])
            continue
        total += matrix
        count += 1
    if count == 0:
        raise ValueError(f"Every recorded {key} matrix has non-finite entries; there is nothing to average.")
    return names, total / count, count


def corpus_curves(history_or_output_dir: HistorySource, key: str = "probabilities"
                  ) -> dict[str, tuple[list[int], list[float]]]:
    """Each corpus's ``(steps, values)`` of ``key`` over the records: ``probabilities`` (p), or a per-corpus field
    of the strategy's own (``rewards``, mixing-law's ``gains``) in the records that have it.

    p starts at step 0 at the prior, which the first record carries (``prior``), whatever the strategy: without
    that point the first value drawn is p after the first update, and the move away from the prior, the very
    thing a learned strategy does, is not on the plot (a static strategy's one record is at step 0 already). A
    history written before records carried the prior starts at its first update. Rewards have no step-0 value.
    """
    history = load_history(history_or_output_dir)
    if key == "probabilities":
        rows = [(int(record["step"]), record["probabilities"]) for record in history]
        prior = history[0].get("prior")
        if prior is not None and rows[0][0] != 0:
            rows.insert(0, (0, prior))
    else:
        rows = [(int(record["step"]), strategy_fields(record)[key]) for record in history
                if strategy_fields(record).get(key) is not None]
    if not rows:
        raise ValueError(f"No record of this history has {key!r}.")
    return {name: ([step for step, _ in rows], [float(values.get(name, math.nan)) for _, values in rows])
            for name in rows[0][1]}


def plot_probabilities(history_or_output_dir: HistorySource, path: str | Path, *, title: str | None = None) -> Path:
    """One line per corpus: its sampling probability from the prior at step 0 (when the history records it,
    see :func:`corpus_curves`) through each balancing update. Returns ``path``."""
    history = load_history(history_or_output_dir)
    return _plot_per_corpus(history, "probabilities", "sampling probability p", Path(path),
                            title or _title("Corpus sampling probabilities", history))


def mix_figure(history_or_output_dir: HistorySource, *, title: str | None = None) -> Figure:
    """p over the training steps as a stacked area (the corpora's shares of each batch add up to 1): the mix at
    a glance, for a tracker's image panel (:mod:`~uat_hf.training.mix_figure`)."""
    history = load_history(history_or_output_dir)
    curves = corpus_curves(history, "probabilities")
    steps = next(iter(curves.values()))[0]
    figure = Figure(figsize=(7.5, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.stackplot(steps, *[values for _, values in curves.values()], labels=list(curves), alpha=0.85)
    axes.set_xlim(steps[0], max(steps[-1], steps[0] + 1))
    axes.set_ylim(0.0, 1.0)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("training step")
    axes.set_ylabel("share of training batches (p)")
    axes.set_title(title or _title("Corpus mix", history), fontsize=11)
    axes.legend(title="corpus", fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure


def plot_rewards(history_or_output_dir: HistorySource, path: str | Path, *, title: str | None = None) -> Path:
    """One line per corpus: the reward R(n) measured at each update (uncertainty or gradient cosine) by a reward
    strategy."""
    history = load_history(history_or_output_dir)
    return _plot_per_corpus(history, "rewards", "reward R(n)", Path(path), title or _title("Corpus rewards", history))


def plot_cosine_heatmap(history_or_output_dir: HistorySource, path: str | Path, *, title: str | None = None) -> Path:
    """Heatmap of :func:`average_cosine`: training corpora as rows, dev corpora as columns, cells annotated."""
    history = load_history(history_or_output_dir)
    names, matrix, count = average_cosine(history)
    return _heatmap(names, matrix, Path(path), "cos(∇ dev loss, ∇ train loss)",
                    "train corpus j  (row mean = reward R(j))",
                    title or f"{_title('Gradient cosine', history)}\nmean over {_updates(count)}", digits=3)


def plot_law_heatmap(history_or_output_dir: HistorySource, path: str | Path, *, title: str | None = None) -> Path:
    """Heatmap of :func:`average_law`: training corpora as rows, dev corpora as columns, cells annotated."""
    history = load_history(history_or_output_dir)
    names, matrix, count = average_law(history)
    return _heatmap(names, matrix, Path(path), "fall of dev loss per step", "train corpus j  (row sum = gain of j)",
                    title or f"{_title('Mixing law A', history)}\nmean over {_updates(count)}", digits=4)


def _updates(count: int) -> str:
    return f"{count} update" + ("s" if count != 1 else "")


def _heatmap(names: list[str], matrix: np.ndarray, path: Path, label: str, ylabel: str, title: str,
             digits: int) -> Path:
    limit = float(np.abs(matrix).max()) or 1.0
    size = max(4.0, 1.1 * len(names) + 2.5)
    figure = Figure(figsize=(size + 1.2, size), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    colorbar = figure.colorbar(image, ax=axes, shrink=0.8)
    colorbar.set_label(label)
    for row in range(len(names)):
        for column in range(len(names)):
            value = matrix[row, column]
            axes.text(column, row, f"{value:.{digits}f}", ha="center", va="center",
                      color="white" if abs(value) > 0.6 * limit else "black", fontsize=9)
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("dev corpus i")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=11)
    return _save(figure, path)


def plot_run(output_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write every plot a run's history supports; returns the paths written.

    Always :data:`PROBABILITIES_PNG` (every strategy's history records p); :data:`REWARDS_PNG` when the run
    recorded rewards (MultiUAT, MultiDDS-S), :data:`COSINE_PNG` when it recorded gradient cosines (MultiDDS-S),
    :data:`LAW_PNG` when it fitted a mixing law. Files go to ``out_dir`` (default: ``output_dir`` itself).
    """
    history = load_history(output_dir)
    target = Path(out_dir) if out_dir is not None else Path(output_dir)
    if target.suffix == ".jsonl":
        target = target.parent
    recorded = {key for record in history for key, value in strategy_fields(record).items() if value is not None}
    written = [plot_probabilities(history, target / PROBABILITIES_PNG)]
    if "rewards" in recorded:
        written.append(plot_rewards(history, target / REWARDS_PNG))
    if "cosine" in recorded:
        written.append(plot_cosine_heatmap(history, target / COSINE_PNG))
    if "law" in recorded:
        written.append(plot_law_heatmap(history, target / LAW_PNG))
    return written


def compare_probabilities(runs: Sequence[str | Path]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Run label → :func:`corpus_curves` of p, for several runs on one chart. A static strategy's run (one record,
    at step 0) holds its p flat to the last step any run reached, so that a proportional baseline lies beside a
    learned run. Labels are the parts of the runs' paths that tell them apart (:func:`distinct_labels`)."""
    histories = [load_history(run) for run in runs]
    labels = distinct_labels([Path(run).parent if Path(run).suffix == ".jsonl" else Path(run) for run in runs])
    last = max(int(record["step"]) for history in histories for record in history)
    compared = {}
    for label, history in zip(labels, histories):
        curves = corpus_curves(history)
        if last > 0:
            curves = {name: (steps + [last], values + [values[-1]]) if steps[-1] < last and len(history) == 1
                      else (steps, values) for name, (steps, values) in curves.items()}
        compared[f"{label} ({history[0].get('strategy') or '?'})"] = curves
    return compared


def distinct_labels(folders: Sequence[Path]) -> list[str]:
    """What tells run folders apart: their paths without the leading and trailing parts they all share
    (``runs/multiuat/seed1`` and ``runs/proportional/seed1``: ``multiuat`` and ``proportional``; ``a/seed1`` and
    ``a/seed2``: ``seed1`` and ``seed2``). One folder, or folders that differ in nothing: their names."""
    parts = [Path(folder).resolve().parts for folder in folders]
    shortest = min((len(p) for p in parts), default=0)
    lead = next((i for i in range(shortest) if len({p[i] for p in parts}) > 1), shortest)
    trail = next((i for i in range(shortest - lead) if len({p[len(p) - 1 - i] for p in parts}) > 1), shortest - lead)
    labels = ["/".join(p[lead:len(p) - trail]) for p in parts]
    if len(folders) < 2 or not all(labels) or len(set(labels)) < len(labels):
        return [Path(folder).name or str(folder) for folder in folders]
    return labels


def probability_comparison_figure(runs: Sequence[str | Path], *, title: str | None = None) -> Figure:
    """p of several runs on one chart: a colour per corpus, a line style per run (a line is labelled
    ``run (strategy): corpus``)."""
    compared = compare_probabilities(runs)
    figure = Figure(figsize=(8.5, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    corpora = list(dict.fromkeys(name for curves in compared.values() for name in curves))
    colours = {name: f"C{index % 10}" for index, name in enumerate(corpora)}
    for index, (label, curves) in enumerate(compared.items()):
        for name, (steps, values) in curves.items():
            axes.plot(steps, values, color=colours[name], linestyle=_LINESTYLES[index % len(_LINESTYLES)],
                      linewidth=1.8, label=f"{label}: {name}")
    axes.set_ylim(0.0, min(1.0, 1.1 * max(max(v) for curves in compared.values() for _, v in curves.values())) or 1.0)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("training step")
    axes.set_ylabel("sampling probability p")
    axes.set_title(title or f"Corpus sampling probabilities of {len(compared)} runs", fontsize=11)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure


def plot_probability_comparison(runs: Sequence[str | Path], path: str | Path, *, title: str | None = None) -> Path:
    """:func:`probability_comparison_figure` saved to ``path`` (what ``uat-plot RUN_A RUN_B`` writes)."""
    return _save(probability_comparison_figure(runs, title=title), Path(path))


# --- helpers ------------------------------------------------------------------------------------------


def _plot_per_corpus(history: History, key: str, ylabel: str, path: Path, title: str) -> Path:
    curves = corpus_curves(history, key)
    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    show_markers = len(history) <= 40
    for index, (name, (steps, values)) in enumerate(curves.items()):
        # Line styles and markers vary too, so corpora with equal values stay visible on top of each other.
        axes.plot(steps, values, linestyle=_LINESTYLES[index % len(_LINESTYLES)], linewidth=1.8, label=name,
                  marker=_MARKERS[index % len(_MARKERS)] if show_markers else None, markersize=4)
    skipped = [int(record["step"]) for record in history if record.get("skipped")]
    for index, step in enumerate(skipped):
        axes.axvline(step, color="grey", linestyle=":", linewidth=1, label="skipped update" if index == 0 else None)
    if key == "probabilities":
        axes.set_ylim(0.0, min(1.0, 1.1 * max(max(values) for _, values in curves.values())) or 1.0)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=11)
    axes.grid(alpha=0.3)
    axes.legend(title="corpus", fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(figure, path)


def _title(what: str, history: History) -> str:
    first = history[0]
    strategy = first.get("strategy") or "?"
    measure = strategy_fields(first).get("measure")
    return f"{what} — {strategy}" + (f" ({measure})" if measure else "")


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path
