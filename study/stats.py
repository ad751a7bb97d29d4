"""The small statistics of the study's report (``report.py``, ``known_answer_report.py``, ``copy_view.py``,
``paired_runs.py``): mean ± sd over seeds, the paired t-test over seeds with Holm's correction across the tests of
one table, and the smallest difference the seeds detect with 80 % power. Kept apart so that the report's modules
share them without importing each other; exact for the few seeds a cell has, with no SciPy.

Two numbers are easy to confuse. The *significance threshold* is the mean difference at which the test's p is
α: a difference that large is called real half the time. The *smallest detectable difference* (minimum
detectable effect) is the true difference the test finds with 80 % power: smaller true effects are often
missed, so "no detectable difference" says nothing about effects below it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: The significance level of every test, and the power the smallest detectable difference is stated at.
ALPHA, POWER = 0.05, 0.80


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) of Student's t with an integer ``df`` >= 1, exactly (Abramowitz & Stegun 26.7.3-4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df}.")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: A = 2/π (θ + sin θ cos θ (1 + 2/3 cos²θ + ...))
        series, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        inside = (2 / math.pi) * (theta + sin * series)
    else:  # even: A = sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...)
        series, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            series += term
            term *= cos2 * (2 * k - 1) / (2 * k)
        inside = sin * series
    return 0.5 + math.copysign(inside / 2, t)


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}.")
    low, high = -1e7, 1e7
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < q else (low, middle)
    return (low + high) / 2


def paired_p(deltas: Sequence[float]) -> float | None:
    """Two-sided p of a paired t-test that the mean of ``deltas`` is 0 (``None`` below 2 pairs; 0 or 1 when
    every difference is the same)."""
    if len(deltas) < 2:
        return None
    mean, sd = statistics.mean(deltas), statistics.stdev(deltas)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(len(deltas)))
    return 2 * (1 - t_cdf(abs(t), len(deltas) - 1))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p values (``None``: no test, left out of the family): the
    adjusted p of the i-th smallest is the running maximum of min(1, (m − i + 1) p); compare each with α."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def significance_threshold(paired_sd: float, n: int) -> float:
    """The mean difference over ``n`` seeds at which a two-sided paired t-test has p = α: t(1 − α/2, n−1) · s/√n."""
    return t_quantile(1 - ALPHA / 2, n - 1) * paired_sd / math.sqrt(n)


def detectable(paired_sd: float, n: int) -> float | None:
    """The smallest true mean difference over ``n`` seeds that a two-sided paired t-test at α finds with
    :data:`POWER`: (t(1 − α/2, n−1) + t(power, n−1)) · s/√n, the usual approximation of the noncentral t
    (``None`` below 2 seeds)."""
    if n < 2:
        return None
    df = n - 1
    return (t_quantile(1 - ALPHA / 2, df) + t_quantile(POWER, df)) * paired_sd / math.sqrt(n)


def verdicts(families: Sequence[Sequence[float]]) -> list[tuple[str, float | None, float | None, float | None]]:
    """For each list of paired differences of one table (one test each, one family): (above / below / not
    detectable, or a note when fewer than 2 pairs; mean Δ; Holm-adjusted p; smallest detectable Δ)."""
    adjusted = holm([paired_p(deltas) for deltas in families])
    out = []
    for deltas, p in zip(families, adjusted):
        mean = statistics.mean(deltas) if deltas else None
        if p is None:
            out.append((f"{len(deltas)} paired seed(s)", mean, None, None))
            continue
        verdict = ("above" if mean > 0 else "below") if p < ALPHA else "not detectable"
        out.append((verdict, mean, p, detectable(statistics.stdev(deltas), len(deltas))))
    return out


def num(value: float | None, spec: str = ".2f") -> str:
    """``value`` formatted, or a dash when there is none."""
    return "–" if value is None else format(value, spec)
