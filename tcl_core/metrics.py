"""How well a cost model ranks one task's candidates: TenSet's top-k score and pairwise accuracy.

Pure numpy, so the numbers can be checked by hand (tests/test_metrics.py) and computed for any
model's scores. Conventions:

* Higher score = predicted faster; true throughput is 1 / run_seconds, 0 for a failed run
  (run_seconds inf, NaN or <= 0), so a model that puts a failure first scores 0 on that task.
* Ties in the scores are broken uniformly at random and the *expected* value is reported, computed
  exactly. A constant model therefore scores exactly the random-ranking baseline, instead of
  whatever the record order happens to give it.
* Tasks with no successful candidate (top-k undefined) or no ordered pair (accuracy undefined)
  are left out of the averages, which weight each task by how often it occurs in its model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "throughput", "top_k_score", "random_top_k_score", "pairwise_accuracy", "weighted_mean", "ranking_summary",
]


def throughput(run_seconds: np.ndarray) -> np.ndarray:
    """(g,) 1 / run_seconds, with 0 where the measurement failed (inf, NaN, <= 0)."""
    seconds = np.asarray(run_seconds, dtype=np.float64)  # (g,)
    ok = np.isfinite(seconds) & (seconds > 0)  # (g,)
    return np.where(ok, 1.0 / np.where(ok, seconds, 1.0), 0.0)  # (g,)


def top_k_score(scores: np.ndarray, run_seconds: np.ndarray, k: int) -> float:
    """Best true throughput among the k top-scored candidates / best throughput of all of them.

    In [0, 1]; 1 when the model's top k include the fastest candidate. With tied scores at the
    k-th place, the expectation over a uniformly random choice among the tied ones. NaN when no
    candidate of the task succeeded.
    """
    scores = np.asarray(scores, dtype=np.float64)  # (g,)
    speed = throughput(run_seconds)  # (g,)
    if scores.shape != speed.shape or scores.ndim != 1:
        raise ValueError(f"scores {scores.shape} and run_seconds {speed.shape} must be the same (g,)")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    best = speed.max(initial=0.0)
    if best <= 0:
        return math.nan
    k = min(k, len(scores))
    cutoff = np.sort(scores)[::-1][k - 1]  # the k-th highest score
    above = scores > cutoff  # (g,): surely in the top k
    tied = scores == cutoff  # (g,): r of these m fill the remaining places, chosen at random
    sure = speed[above].max(initial=0.0)
    r = k - int(above.sum())
    return _expected_max_of_subset(speed[tied], r, floor=sure) / best


def _expected_max_of_subset(values: np.ndarray, r: int, *, floor: float) -> float:
    """E[max(floor, max of a uniformly random r-subset of `values`)], exactly.

    With values sorted descending v_1 >= ... >= v_m, the subset's maximum is v_i (by position)
    with probability C(m - i, r - 1) / C(m, r): v_i is picked and the other r - 1 come from the
    m - i below it.
    """
    ordered = np.sort(values)[::-1]  # (m,)
    m = len(ordered)
    total = math.comb(m, r)
    return sum(math.comb(m - i, r - 1) / total * max(floor, float(ordered[i - 1])) for i in range(1, m - r + 2))


def random_top_k_score(run_seconds: np.ndarray, k: int) -> float:
    """Expected top-k score of a uniformly random ranking (exact): the baseline any model must beat."""
    return top_k_score(np.zeros(len(run_seconds)), run_seconds, k)


def pairwise_accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of pairs with label_i > label_j that the scores order the same way.

    Tied scores count 1/2 (a random tie-break's expectation), so a constant model gets 0.5;
    pairs with equal labels (for instance two failures) say nothing and are skipped. NaN when
    there is no such pair. (student.pairwise_accuracy, the training-time version, counts score
    ties as wrong.)
    """
    scores = np.asarray(scores, dtype=np.float64)  # (g,)
    labels = np.asarray(labels, dtype=np.float64)  # (g,)
    pairs = labels[:, None] > labels[None, :]  # (g, g): i should rank above j
    if not pairs.any():
        return math.nan
    diff = (scores[:, None] - scores[None, :])[pairs]  # (p,)
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """Σ w·v / Σ w over the finite values; NaN when there are none."""
    values = np.asarray(values, dtype=np.float64)  # (t,)
    weights = np.asarray(weights, dtype=np.float64)  # (t,)
    keep = np.isfinite(values)  # (t,)
    if not keep.any() or weights[keep].sum() <= 0:
        return math.nan
    return float((values[keep] * weights[keep]).sum() / weights[keep].sum())


def ranking_summary(
    scores: Sequence[np.ndarray],
    run_seconds: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    weights: Sequence[float],
    *,
    ks: Sequence[int] = (1, 5),
) -> dict[str, float]:
    """Task-weighted top-k (model and random baseline) and pairwise accuracy over many tasks.

    One entry per task in each sequence: scores (g_t,), run_seconds (g_t,), labels (g_t,).
    Keys: "top{k}", "random_top{k}" for each k, "pairwise_accuracy".
    """
    summary: dict[str, float] = {}
    for k in ks:
        summary[f"top{k}"] = weighted_mean([top_k_score(s, t, k) for s, t in zip(scores, run_seconds)], weights)
        summary[f"random_top{k}"] = weighted_mean([random_top_k_score(t, k) for t in run_seconds], weights)
    summary["pairwise_accuracy"] = weighted_mean(
        [pairwise_accuracy(s, y) for s, y in zip(scores, labels)], weights
    )
    return summary
