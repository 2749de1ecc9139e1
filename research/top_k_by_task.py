"""Which tasks cost a student its top-k on one model: per-task top-k beside random ranking's.

    .venv/bin/python -m research.top_k_by_task --data data/<platform> --model mobilenet_v2 \
        --student tcl_core/students/<platform>/student.pt [--k 5] [--top 10]

Scores every task of `--data/--model` with the student and prints one JSON line per task, the
tasks that lose the most weighted top-k first: its name (from the collect card), weight,
candidates, top-k, random ranking's expected top-k, and its share of the model's loss
(weight x (1 - top-k) / total weight). Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.evaluate import open_student, score_tasks  # noqa: E402
from tcl_core.metrics import random_top_k_score, top_k_score  # noqa: E402
from tcl_core.records import TaskRecords  # noqa: E402
from tcl_core.train import load_split  # noqa: E402


def task_rows(tasks: list[TaskRecords], scores: list[np.ndarray], names: dict[int, str], k: int) -> list[dict]:
    """One row per task (see the module docstring), the largest share of the model's top-k loss first."""
    total_weight = sum(task.weight for task in tasks)
    rows = []
    for task, task_scores in zip(tasks, scores):
        top_k = top_k_score(task_scores, task.run_seconds, k)
        rows.append({"task": task.task_index, "name": names.get(task.task_index, "?"), "weight": task.weight,
                     "candidates": task.size, f"top{k}": round(top_k, 3),
                     f"random_top{k}": round(random_top_k_score(task.run_seconds, k), 3),
                     "loss_share": round(task.weight * (1 - top_k) / total_weight, 4)})
    return sorted(rows, key=lambda row: -row["loss_share"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a collected platform folder")
    parser.add_argument("--model", required=True, help="one model folder in it")
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--top", type=int, default=10, help="print this many tasks (0: all)")
    args = parser.parse_args()
    card = json.loads((args.data / "card.json").read_text())
    name_by_hash = {task["structural_hash"]: task["name"] for task in card["models"][args.model]["tasks"]}
    lines = (args.data / args.model / "database_workload.json").read_text().splitlines()
    names = {index: name_by_hash.get(str(json.loads(line)[0]), "?") for index, line in enumerate(lines)}
    tasks = load_split([args.data / args.model])
    rows = task_rows(tasks, score_tasks(open_student(args.student), tasks), names, args.k)
    for row in rows[: args.top or None]:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
