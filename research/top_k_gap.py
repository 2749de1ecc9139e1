"""Which tasks make the top-k gap between two students: per-task scores and each task's share.

    .venv/bin/python -m research.top_k_gap --data data/<platform> --a A.pt [...] --b B.pt [...] [--split eval] [--k 1]

A held-out top-k is a weighted mean over a few dozen tasks, and one task's top-1 jumps between
about 1 and a fraction of it when the candidate ranked first changes. So two students' top-1
can differ by points because of two or three tasks. This scores both students on the split and
lists each task's top-k for A and B and its contribution to the gap, (B - A) * weight / total
weight, largest first; the contributions sum to B's top-k minus A's. A 95% interval from
resampling the tasks says whether the sign would survive another set of tasks. Several students
per side (`--a X.pt Y.pt --b ...`) are averaged per task, so a gap shared by training seeds
stands out from one seed's luck. Writes research/results/top_k_gap_<stem>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.evaluate import open_student, score_tasks  # noqa: E402
from tcl_core.metrics import top_k_score  # noqa: E402
from tcl_core.train import load_split, split_databases  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def task_gap(per_task_a: np.ndarray, per_task_b: np.ndarray, weights: np.ndarray, *, top: int = 5,
             resamples: int = 2000, seed: int = 0) -> dict:
    """Per-task contributions to B's weighted top-k minus A's, (t,) arrays in; NaN tasks left out.

    Returns the gap, its 95% interval when the tasks are resampled with replacement (would another
    draw of tasks of this kind give the same sign?), the tasks sorted by |contribution| (index,
    weight, a, b, contribution) and the share of the gap the `top` largest carry.
    """
    a, b, w = (np.asarray(x, dtype=np.float64) for x in (per_task_a, per_task_b, weights))  # (t,) each
    ok = np.isfinite(a) & np.isfinite(b)  # (t,)
    weighted_difference = np.where(ok, (b - a) * w, 0.0)  # (t,): 0 where a task is not scored
    contribution = weighted_difference / w[ok].sum()  # (t,)
    order = np.argsort(-np.abs(contribution), kind="stable")
    gap = float(contribution.sum())
    scored = np.flatnonzero(ok)
    draws = np.random.default_rng(seed).choice(scored, size=(resamples, len(scored)))  # (r, t_ok)
    resampled = weighted_difference[draws].sum(axis=1) / w[draws].sum(axis=1)  # (r,)
    tasks = [{"task": int(i), "weight": float(w[i]), "a": round(float(a[i]), 4), "b": round(float(b[i]), 4),
              "contribution": round(float(contribution[i]), 4)} for i in order if ok[i]]
    return {"gap": round(gap, 4), "gap_ci95": [round(float(q), 4) for q in np.percentile(resampled, [2.5, 97.5])],
            "tasks_scored": int(ok.sum()),
            "top_share": round(float(contribution[order[:top]].sum() / gap), 3) if gap else None, "top": top,
            "tasks": tasks}


def _per_task(paths: list[Path], tasks, k: int) -> np.ndarray:
    """(t,) top-k per task, averaged over the students at `paths`."""
    runs = [[top_k_score(s, t.run_seconds, k) for s, t in zip(score_tasks(open_student(p), tasks), tasks)]
            for p in paths]
    return np.mean(np.array(runs, dtype=np.float64), axis=0)  # (t,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a collected platform folder")
    parser.add_argument("--split", choices=("train", "eval"), default="eval")
    parser.add_argument("--a", type=Path, nargs="+", required=True, help="student(s) on side A")
    parser.add_argument("--b", type=Path, nargs="+", required=True, help="student(s) on side B")
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--top", type=int, default=5, help="report the share of the gap these many tasks carry")
    parser.add_argument("--results", default=None, help="results file stem (default: the data folder's name)")
    args = parser.parse_args()
    tasks = load_split(split_databases(args.data)[args.split])
    result = task_gap(_per_task(args.a, tasks, args.k), _per_task(args.b, tasks, args.k),
                      np.array([t.weight for t in tasks]), top=args.top)
    for row in result["tasks"]:
        row["workload"], row["candidates"] = tasks[row["task"]].workload_hash, tasks[row["task"]].size
    result = {"command": "research/top_k_gap.py " + " ".join(sys.argv[1:]), "k": args.k,
              "a": [str(p) for p in args.a], "b": [str(p) for p in args.b], **result}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = args.results or args.data.name
    (RESULTS / f"top_k_gap_{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"top-{args.k}: B - A = {result['gap']:+.4f} (95% over resampled tasks {result['gap_ci95']}) "
          f"over {result['tasks_scored']} tasks; "
          f"the {args.top} largest contributions carry {result['top_share']} of it")
    for row in result["tasks"][:10]:
        print(f"  task {row['task']:3d} weight {row['weight']:.0f} candidates {row['candidates']:3d}: "
              f"A {row['a']:.2f}  B {row['b']:.2f}  contribution {row['contribution']:+.4f}")


if __name__ == "__main__":
    main()
