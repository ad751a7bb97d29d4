"""``uat-plot``: draw a training run's corpus-balancing history as PNG files.

Useful while a run trains (the history grows at every update) and afterwards; see
:func:`uat_hf.plotting.plot_run` for which figures are written.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from ..plotting import plot_run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="uat-plot",
        description="Plot the sampling probabilities and rewards of a MultiUAT / MultiDDS-S run over training "
        "steps, and the mean gradient-cosine heatmap of a MultiDDS-S run.",
    )
    parser.add_argument("output_dir", help="the run's output_dir (holding balancing_history.jsonl) or the history file")
    parser.add_argument("--out", default=None, help="folder for the PNG files (default: OUTPUT_DIR)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: prints the paths written, one per line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        written = plot_run(args.output_dir, args.out)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"uat-plot: error: {error}\n")
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
