"""``uat-plot``: draw a training run's corpus-balancing history as PNG files.

    uat-plot runs/demo                              # PNGs beside the history, in the run's output_dir
    uat-plot --output_dir runs/demo --plot_dir figures

Useful while a run trains (the history grows at every update) and afterwards; see
:func:`uat_hf.evaluation.plotting.plot_run` for which figures are written. The run directory is ``uat-train``'s
``output_dir`` (first argument or ``--output_dir``). ``--out`` of the argparse version is now ``--plot_dir``
(a clean break: ``--out`` is an error).
"""

from __future__ import annotations

from collections.abc import Sequence

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
    from ..evaluation.plotting import plot_run  # matplotlib: not needed for --help

    parser = build_parser()
    try:
        args = parse_arguments(argv)
        written = plot_run(args.output_dir, args.plot_dir)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"uat-plot: error: {error}\n")
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
