"""The small statistics of the study's report (``study_report.py``, ``known_answer_report.py``,
``paired_runs.py``): mean ± sd over seeds and the smallest difference a paired t-test over the seeds can detect.
Kept apart so that the report's modules share them without importing each other."""

from __future__ import annotations

import math
import statistics

#: Two-sided 97.5 % quantiles of Student's t by degrees of freedom (so no SciPy is needed).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def detectable(paired_sd: float, n: int) -> float | None:
    """The smallest mean difference over ``n`` seeds that a two-sided paired t-test calls significant at
    α = 0.05: t(0.975, n−1) · s_d / √n."""
    return T_975[n - 1] * paired_sd / math.sqrt(n) if n - 1 in T_975 else None


def num(value: float | None, spec: str = ".2f") -> str:
    """``value`` formatted, or a dash when there is none."""
    return "–" if value is None else format(value, spec)
