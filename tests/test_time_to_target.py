"""benchmarks/time_to_target.py: best-so-far estimates and the time each run needs to reach the baseline's."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from time_to_target import estimate_curve, seconds_at, summarise  # noqa: E402


def test_estimate_is_inf_until_every_task_is_measured_then_weighted_best_so_far():
    order = [("a", 2.0), ("a", math.inf), ("b", 5.0), ("a", 1.0), ("b", 6.0)]
    assert estimate_curve(order, {"b": 2.0}) == [math.inf, math.inf, 12.0, 11.0, 11.0]


def test_seconds_at_reads_the_first_time_the_counter_got_there():
    assert seconds_at([(1.0, 4), (3.0, 8), (9.0, 12)], 5) == 3.0


def test_a_run_that_reaches_the_baseline_earlier_gets_its_speedup():
    baseline = {"model": "m", "budget": 4, "cost_model": "xgb", "latency_ms": {"tvm": 1.0},
                "measurements": [("a", 4.0), ("b", 4.0), ("a", 3.0), ("b", 2.0)],
                "timeline": [(10.0, 2), (20.0, 4)]}
    faster = {**baseline, "cost_model": "tcl", "measurements": [("a", 3.0), ("b", 2.0), ("a", 9.0), ("b", 9.0)],
              "timeline": [(8.0, 2), (16.0, 4)]}
    never = {**baseline, "cost_model": "random", "measurements": [("a", 9.0), ("b", 9.0)], "timeline": [(5.0, 2)]}
    rows = {r["cost_model"]: r for r in summarise({"runs": [baseline, faster, never]}, {}, "xgb")}
    assert rows["xgb"]["trials_to_target"] == 4 and rows["xgb"]["speedup"] == 1.0
    assert rows["tcl"]["trials_to_target"] == 2 and rows["tcl"]["speedup"] == 2.5  # 20 s / 8 s
    assert rows["random"]["trials_to_target"] is None and rows["random"]["speedup"] is None
