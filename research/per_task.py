"""What each search found, kernel by kernel: weighted sums of the best measured run time per task.

    .venv/bin/python -m research.per_task research/results/llvm-znver4-2c-3de11c59/tcl_vs_xgb_gentle_update.json \
        --card data/llvm-znver5-2c-c69ac8f7/card.json --model vit_block

`research/run.py` stores, for every run, the fastest mean run time the search measured for
each task (`best_seconds_per_task`, keyed by workload hash). Weighted by how often each task
occurs in its model (from a collect card that lists the model's tasks; weight 1 otherwise),
their sum is the model's latency as the search's own measurements predict it, to set beside
the end-to-end latency of the built library. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--card", type=Path, default=None, help="a collect card.json listing the model's tasks")
    parser.add_argument("--model", default=None, help="the zoo model's name in the card (default: each run's)")
    args = parser.parse_args()
    card = json.loads(args.card.read_text()) if args.card else {"models": {}}
    for run in json.loads(args.results.read_text())["runs"]:
        best = run.get("best_seconds_per_task")
        if not best:
            continue
        tasks = card["models"].get(args.model or run["model"], {}).get("tasks", [])
        weights = {str(t["structural_hash"]): float(t["weight"]) for t in tasks}
        print(json.dumps({
            "model": run["model"], "budget": run["budget"], "cost_model": run["cost_model"],
            "tasks": len(best), "tasks_weighted_from_card": sum(key in weights for key in best),
            "weighted_best_kernels_ms": round(1e3 * sum(weights.get(k, 1.0) * s for k, s in best.items()), 4),
            "end_to_end_ms": run["latency_ms"]["tvm"],
        }))


if __name__ == "__main__":
    main()
