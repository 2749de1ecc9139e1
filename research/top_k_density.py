"""How a student's top-k scores move with the number of candidates measured per task.

    .venv/bin/python -m research.top_k_density --data data/<platform> --student PATH [--split eval]
        [--sizes 8 16 32 64 128] [--draws 200]

TenSet's tasks hold thousands of candidates; ours hold 32 to 128. Whether top-5 >= 0.95 is out
of reach because the student ranks badly or because a sparse task's best is a lone outlier is a
question about density, and this answers it on one dataset without measuring anything: score
every candidate once, then for each size n draw `draws` uniform subsets of n candidates per task
and report the task-weighted top-1 / top-5 of the student and of a random ranking on the subsets
(mean and standard deviation over the draws). A task with fewer than n candidates enters whole.
Writes research/results/top_k_density_<stem>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.evaluate import open_student, score_tasks  # noqa: E402
from tcl_core.metrics import random_top_k_score, top_k_score, weighted_mean  # noqa: E402
from tcl_core.records import card_weights, load_task_records  # noqa: E402
from tcl_core.train import load_split, split_databases  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def density_curve(scores: list[np.ndarray], run_seconds: list[np.ndarray], weights: list[float], *,
                  sizes: list[int], draws: int, seed: int = 0, ks: tuple[int, ...] = (1, 5)) -> list[dict]:
    """One row per size: mean / std over `draws` of the task-weighted top-k of the scores and of random.

    scores[t], run_seconds[t]: (g_t,) for task t. Every draw takes min(n, g_t) candidates of each
    task uniformly without replacement.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        samples: dict[str, list[float]] = {f"{who}top{k}": [] for who in ("", "random_") for k in ks}
        for _ in range(draws):
            picks = [rng.choice(len(s), size=min(n, len(s)), replace=False) for s in scores]
            for k in ks:
                samples[f"top{k}"].append(weighted_mean(
                    [top_k_score(s[p], t[p], k) for s, t, p in zip(scores, run_seconds, picks)], weights))
                samples[f"random_top{k}"].append(weighted_mean(
                    [random_top_k_score(t[p], k) for t, p in zip(run_seconds, picks)], weights))
        row = {"candidates": n, "tasks_smaller": sum(len(s) < n for s in scores)}
        for key, values in samples.items():
            row[key], row[f"{key}_std"] = round(float(np.mean(values)), 4), round(float(np.std(values)), 4)
        rows.append(row)
    return rows


def _markdown(result: dict) -> str:
    lines = ["# Top-k against candidates per task", "", f"Command: `{result['command']}`", "",
             f"{result['tasks']} tasks ({result['candidates_per_task'][0]}-{result['candidates_per_task'][1]} candidates "
             f"each), student {result['student']}; {result['draws']} uniform draws per size, mean ± std over draws. "
             "A task with fewer candidates than the size enters whole (`smaller`).", "",
             "| candidates per task | smaller | top-1 | top-5 | random top-1 | random top-5 |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['candidates']} | {r['tasks_smaller']} | {r['top1']:.3f} ± {r['top1_std']:.3f} | "
                     f"{r['top5']:.3f} ± {r['top5_std']:.3f} | {r['random_top1']:.3f} | {r['random_top5']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="a collected platform folder (its --split models)")
    source.add_argument("--database", type=Path, help="one model's tuning database folder")
    parser.add_argument("--split", choices=("train", "eval"), default="eval")
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--results", default=None, help="results file stem (default: the data folder's name)")
    args = parser.parse_args()
    if args.data:
        tasks = load_split(split_databases(args.data)[args.split])
    else:
        tasks = load_task_records(args.database, weights=card_weights(args.database))
    tasks = [t for t in tasks if t.size >= 2 and np.isfinite(t.run_seconds).any()]
    if not tasks:
        raise SystemExit("no task with two or more candidates and a successful run")
    scores = score_tasks(open_student(args.student), tasks)
    command = "research/top_k_density.py " + " ".join(sys.argv[1:])
    result = {"command": command, "student": str(args.student), "tasks": len(tasks), "draws": args.draws,
              "candidates_per_task": [min(t.size for t in tasks), max(t.size for t in tasks)],
              "rows": density_curve(scores, [t.run_seconds for t in tasks], [t.weight for t in tasks],
                                    sizes=args.sizes, draws=args.draws)}
    stem = args.results or (args.data or args.database).name
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"top_k_density_{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"top_k_density_{stem}.md").write_text(_markdown(result))
    print(_markdown(result))


if __name__ == "__main__":
    main()
