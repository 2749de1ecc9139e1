"""How much a collected dataset's top-k scores can say: how far each task's best stands out.

    .venv/bin/python -m research.top_k_headroom --data data/<platform> [--split eval]

TenSet's top-k divides the best throughput among the k highest-ranked candidates by the best of
all. With few candidates per task the best is often a lone outlier, and then top-k is close to
"did the model put that one candidate in its top k". This prints, for the split's tasks
(weighted as top-k weights them): candidates per task, the score a model would get by always
ranking the second-best candidate first (and the fifth-best), and the tasks where the runner-up
is far behind. No model is involved; writes research/results/top_k_headroom_<platform>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.metrics import throughput, weighted_mean  # noqa: E402
from tcl_core.records import TaskRecords  # noqa: E402
from tcl_core.train import load_split, split_databases  # noqa: E402


def headroom(tasks: list[TaskRecords], *, far: float = 0.7) -> dict:
    """Runner-up oracles over `tasks` (those with >= 2 candidates and a success), weighted as top-k is."""
    rows = []
    for task in tasks:
        speeds = np.sort(throughput(task.run_seconds))[::-1]  # (g,) fastest first
        if len(speeds) < 2 or speeds[0] <= 0:
            continue
        padded = np.concatenate([speeds, np.zeros(5)])  # a task of fewer than 5 has a 0 fifth
        rows.append({"workload": task.workload_hash, "weight": task.weight, "candidates": task.size,
                     "second_over_best": float(padded[1] / speeds[0]), "fifth_over_best": float(padded[4] / speeds[0])})
    if not rows:
        raise ValueError("no task has two or more candidates with a successful run: top-k has nothing to rank")
    weights = [r["weight"] for r in rows]
    return {
        "tasks": len(rows), "candidates_per_task": [min(r["candidates"] for r in rows), max(r["candidates"] for r in rows)],
        "top1_if_second_best_first": weighted_mean([r["second_over_best"] for r in rows], weights),
        "top1_if_fifth_best_first": weighted_mean([r["fifth_over_best"] for r in rows], weights),
        "far": far, "tasks_runner_up_far_behind": sorted((r for r in rows if r["second_over_best"] < far),
                                                        key=lambda r: r["second_over_best"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", choices=("train", "eval"), default="eval")
    parser.add_argument("--far", type=float, default=0.7, help="list tasks whose runner-up is below this share of the best")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    tasks = load_split(split_databases(args.data)[args.split])
    result = {"command": f"research/top_k_headroom.py --data {args.data} --split {args.split}",
              **headroom(tasks, far=args.far)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"top_k_headroom_{args.data.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "tasks_runner_up_far_behind"}, indent=2))
    print(f"{len(result['tasks_runner_up_far_behind'])} tasks with the runner-up below {args.far} of the best")


if __name__ == "__main__":
    main()
