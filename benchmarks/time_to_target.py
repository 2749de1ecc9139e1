"""Tuning time to reach XGBoost's final latency: best-so-far curves from research/run.py results.

    .venv/bin/python benchmarks/time_to_target.py research/results/llvm-x86-64-2c-e8804b7a/x86_unseen.json \
        [--card data/<platform>/card.json] [--baseline xgb]

`run.py` stores each run's measurements in the order they were made (`measurements`: workload
hash, mean seconds) and when the trial counter moved (`timeline`: seconds, trials). The
estimated latency after n measurements is the sum over tasks of weight x the fastest run time
measured so far (TenSet's estimate; weights from a collect card listing the model's tasks,
else 1), defined once every task has a measurement. For each (model, budget): the baseline's
final estimate is the target, and for every run the trials and seconds it took to reach it;
speed-up = baseline's seconds / the run's. A run that never reaches it is reported as such.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def estimate_curve(measurements: list, weights: dict[str, float]) -> list[float]:
    """Estimated latency (seconds) after each measurement; inf until every task has one that succeeded."""
    tasks = {workload for workload, _ in measurements}
    best: dict[str, float] = {}
    curve = []
    for workload, seconds in measurements:
        if math.isfinite(seconds) and seconds < best.get(workload, math.inf):
            best[workload] = seconds
        curve.append(sum(weights.get(w, 1.0) * s for w, s in best.items()) if len(best) == len(tasks) else math.inf)
    return curve


def seconds_at(timeline: list, trials: int) -> float:
    """Wall seconds when the trial counter first reached `trials` (timeline: [(seconds, trials), ...])."""
    for seconds, done in timeline:
        if done >= trials:
            return float(seconds)
    return float(timeline[-1][0]) if timeline else math.nan


def summarise(results: dict, weights: dict[str, float], baseline: str) -> list[dict]:
    runs = [r for r in results["runs"] if r.get("measurements")]
    rows = []
    for run in runs:
        base = next((r for r in runs if (r["model"], r["budget"], r["cost_model"]) ==
                     (run["model"], run["budget"], baseline)), None)
        if base is None:
            continue
        target = estimate_curve(base["measurements"], weights)[-1]
        base_trials = len(base["measurements"])
        base_seconds = seconds_at(base["timeline"], base_trials)
        curve = estimate_curve(run["measurements"], weights)
        reached = next((i + 1 for i, value in enumerate(curve) if value <= target), None)
        seconds = seconds_at(run["timeline"], reached) if reached else None
        rows.append({
            "model": run["model"], "budget": run["budget"], "cost_model": run["cost_model"],
            "final_estimate_ms": round(1e3 * curve[-1], 4), "target_ms": round(1e3 * target, 4),
            "trials_to_target": reached, "seconds_to_target": seconds,
            "baseline_seconds": base_seconds,
            "speedup": round(base_seconds / seconds, 2) if seconds else None,
            "end_to_end_ms": run["latency_ms"]["tvm"],
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--card", type=Path, default=None, help="collect card.json listing the model's tasks")
    parser.add_argument("--baseline", default="xgb")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    card = json.loads(args.card.read_text()) if args.card else {"models": {}}
    for model in {r["model"] for r in results["runs"]}:
        tasks = card["models"].get(model, {}).get("tasks", [])
        weights = {str(t["structural_hash"]): float(t["weight"]) for t in tasks}
        for row in summarise({"runs": [r for r in results["runs"] if r["model"] == model]}, weights, args.baseline):
            print(json.dumps(row))


if __name__ == "__main__":
    main()
