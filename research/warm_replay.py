"""How good are replayed schedules? Warm start on one model from other models' databases, against tuning it.

    .venv/bin/python -m research.warm_replay --model mobilenet_v2 \
        --work benchmarks/results/.work/fair-2026-12-07-znver4 [--candidates 4]

`--work` is a kept benchmark run (`python -m benchmarks run --keep-work`): its other models'
databases seed a fresh database, tcl_core.warm_start measures `--candidates` replayed schedules
per task (ranked by this platform's student), then the best record each task got in that run
(its own tuning, e.g. 16 trials per task) is measured again right after, in the same conditions.
Prints one JSON line per warm-started task and a summary line: the geometric mean of replayed
best / tuned best (below 1: the replays beat the run's own search). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from benchmarks.harness import MODELS, seed_database
from benchmarks.suite import warm_sources
from deploy.layout import databases_root
from deploy.options import TuningOptions
from deploy.pipeline import import_and_lower
from tcl_core import tvm_api
from tcl_core.students import choose_cost_model
from tcl_core.tuning import make_cost_model
from tcl_core.warm_start import WarmStartConfig, warm_start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.warm_replay", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2", choices=sorted(MODELS))
    parser.add_argument("--work", type=Path, required=True, help="a kept benchmark run's work folder")
    parser.add_argument("--candidates", type=int, default=4)
    args = parser.parse_args(argv)
    target = tvm_api.make_target(None)
    tuned_dirs = [folder for run in sorted((args.work / args.model).iterdir())
                  for folder in databases_root(run / "state").iterdir()]
    platform = tuned_dirs[0].name
    with tempfile.TemporaryDirectory(prefix="warm-replay-") as scratch:
        seeded = seed_database(Path(scratch) / "seeded", warm_sources(args.work, args.model))
        database = tvm_api.open_database(Path(scratch) / "seeded")  # after seeding: it reads the files once
        choice = choose_cost_model("tcl", platform, state_dir=Path(scratch) / "state", student_path=None)
        model = make_cost_model("tcl", choice.student.path if choice.student else None)
        tasks = tvm_api.extract_tasks(import_and_lower(MODELS[args.model](), target, TuningOptions()), target)
        started = time.perf_counter()
        result = warm_start(tasks, database=database, target=target, cost_model=model,
                            config=WarmStartConfig(candidates=args.candidates), on_measured=lambda n: None)
        seconds = time.perf_counter() - started
        # the run's own best for each warm-started task, measured again now
        tuned = tvm_api.open_database(tuned_dirs[0])
        warmed = [task for task in tasks if result.seconds_per_task.get(task.task_name)]
        best = [tuned.get_top_k(tuned.commit_workload(task.dispatched[0]), 1)[0] for task in warmed]
        again = tvm_api.measure_candidates([record.as_measure_candidate() for record in best],
                                           [task.dispatched[0] for task in warmed], target=target,
                                           database=tvm_api.open_database(Path(scratch) / "again"))
    ratios = []
    for task, now in zip(warmed, again):
        replayed = result.seconds_per_task[task.task_name]
        if now:
            ratios.append(replayed / now)
        print(json.dumps({"task": task.task_name, "replayed_us": round(replayed * 1e6, 2),
                          "tuned_us": round(now * 1e6, 2) if now else None}))
    print(json.dumps({"model": args.model, "seeded_records": seeded, "tasks": len(tasks),
                      "tasks_warm_started": result.tasks_warm_started, "measured": result.measured,
                      "warm_start_seconds": round(seconds, 1), "student": str(choice.student.path) if choice.student else None,
                      "replayed_over_tuned_geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3)
                      if ratios else None}))


if __name__ == "__main__":
    main()
