"""Confidence intervals of the cue-effect probe, in plain Python (no scipy): Wilson's and Newcombe's for pass
rates, Welch's for a dense reward, the task-paired t interval, and Student's t quantile they rest on.

Kept apart from :mod:`seal_verl.core.cue_effect` (what a probe measures and when) because these are statistics
with published reference values (the tests hold them to tables), not probe logic.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

def wilson_interval(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``k / n`` (``(0, 1)`` for ``n == 0``)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of ``k1/n1 - k2/n2`` (his method 10): the Wilson intervals of both
    proportions, combined in quadrature on each side."""
    z = _z(confidence)
    p1 = k1 / n1 if n1 else 0.0
    p2 = k2 / n2 if n2 else 0.0
    l1, u1 = wilson_interval(k1, n1, z)
    l2, u2 = wilson_interval(k2, n2, z)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, lo), min(1.0, hi)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        step = 1.0
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            step = c * d
            h *= step
        if abs(step - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` > 0 degrees of freedom (not necessarily whole:
    Welch-Satterthwaite's are not); the normal quantile for infinite ``df``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    if math.isinf(df):
        return _z(2.0 * p - 1.0)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):  # bisection down to the float resolution
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def mean_difference_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Welch's interval of ``mean(a) - mean(b)`` for rewards in [0, 1] that are not all 0 or 1 (a dense reward):
    each side's sample variance (widened to the variance of a rate of 1/2 when a side has fewer than two values),
    Welch's standard error and the t quantile with Welch-Satterthwaite degrees of freedom (each side counting at
    least one); clipped to [-1, 1]."""

    def var(x):
        if len(x) < 2:
            return 0.25
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x) / (len(x) - 1)

    d = (sum(a) / len(a) if a else 0.0) - (sum(b) / len(b) if b else 0.0)
    sa, sb = var(a) / max(1, len(a)), var(b) / max(1, len(b))
    se = math.sqrt(sa + sb)
    if se == 0.0:
        return max(-1.0, d), min(1.0, d)
    df = (sa + sb) ** 2 / (sa * sa / max(1, len(a) - 1) + sb * sb / max(1, len(b) - 1))
    t = t_quantile(0.5 + confidence / 2.0, df)
    return max(-1.0, d - t * se), min(1.0, d + t * se)


def paired_interval(a: dict[str, Sequence[float]], b: dict[str, Sequence[float]], confidence: float = 0.95
                    ) -> tuple[Optional[tuple[float, float]], int]:
    """The task-paired t interval of the difference.

    For each task sampled under both conditions, the mean of its values under ``a`` minus the mean under ``b``;
    over those n differences, mean +- t(n - 1) x sd / sqrt(n), clipped to [-1, 1]. Returns ``(interval, n)``. The
    interval is None where the pairing cannot estimate a spread: fewer than two such tasks (no variance from one
    difference), or the same difference on every task (a zero spread would claim certainty from a handful of
    tasks); :func:`effect` then keeps the unpaired interval.

    Args:
        a, b: task id -> that task's values under each condition.
        confidence: the interval's level, in (0, 1).
    """
    diffs = [sum(a[t]) / len(a[t]) - sum(b[t]) / len(b[t]) for t in a if a[t] and b.get(t)]
    n = len(diffs)
    if n < 2:
        return None, n
    m = sum(diffs) / n
    var = sum((x - m) ** 2 for x in diffs) / (n - 1)
    if var <= 1e-18:
        return None, n
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * math.sqrt(var / n)
    return (max(-1.0, m - half), min(1.0, m + half)), n
