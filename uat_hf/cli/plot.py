"""``uat-plot``: draw a training run's corpus-balancing history as PNG files.

    uat-plot runs/demo                              # PNGs beside the history, in the run's output_dir
    uat-plot --output_dir runs/demo --plot_dir figures
    uat-plot runs/proportional runs/multiuat --plot_dir figures   # p of several runs on one chart

Useful while a run trains (the history grows at every update) and afterwards; see
:func:`uat_hf.evaluation.plotting.plot_run` for which figures are written. The run directory is ``uat-train``'s
``output_dir`` (first argument or ``--output_dir``). ``--out`` of the argparse version is now ``--plot_dir``
(a clean break: ``--out`` is an error). Given several runs first, it draws their p on one chart
(:func:`uat_hf.evaluation.plotting.plot_probability_comparison`, ``balancing_probabilities_compared.png`` in
``--plot_dir``, default the first run's folder): a static strategy's run is a flat line at its step-0 p.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

from .tool_arguments import PlotArguments, make_plot_parser


def build_parser():
    """The ``HfArgumentParser`` of ``uat-plot`` (:func:`uat_hf.cli.tool_arguments.make_plot_parser`)."""
    return make_plot_parser()


def parse_arguments(argv: Sequence[str] | None = None) -> PlotArguments:
    """``argv`` (RUN_DIR first or ``--output_dir``, optional ``--plot_dir``) → :class:`PlotArguments`."""
    (arguments,), _ = build_parser().parse(argv)
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: prints the paths written, one per line. Bad input exits 2 with ``uat-plot: error: ...``."""
    from ..evaluation.plotting import COMPARISON_PNG, plot_probability_comparison, plot_run  # matplotlib

    argv = list(sys.argv[1:] if argv is None else argv)
    runs = list(itertools.takewhile(lambda arg: not arg.startswith("-"), argv))
    parser = build_parser()
    try:
        args = parse_arguments(argv[:1] + argv[len(runs):] if len(runs) > 1 else argv)
        if len(runs) > 1:
            target = Path(args.plot_dir if args.plot_dir is not None else _folder(runs[0]))
            written = [plot_probability_comparison(runs, target / COMPARISON_PNG)]
        else:
            written = plot_run(args.output_dir, args.plot_dir)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"uat-plot: error: {error}\n")
    for path in written:
        print(path)


def _folder(run: str) -> Path:
    """A run's folder, given its output_dir or its history file."""
    return Path(run).parent if run.endswith(".jsonl") else Path(run)


if __name__ == "__main__":
    main()
