"""Does one round of the feedback loop on today's records make the student rank a held-out model better?

    .venv/bin/python -m research.student_refresh --hold-out vit_block \
        --work benchmarks/results/.work/fair-2026-12-07-znver4 \
               benchmarks/results/llvm-znver4-2c-3de11c59/.work/tune-minutes-cold-2026-12-07 [--steps 300]

Why: the shipped students learnt from `data/<platform>` (`tcl-tuned collect`), whose candidates
were lowered with TVM's defaults (NCHW convolutions, unpacked weights, libm's erf) and, before
2026-12-07, timed on one thread, while jobs now tune NHWC convolutions, packed weights and fast
math on every core. The daemon closes that gap by itself: every job's measurements feed a
distillation round (tcl_core.continual). This runs that round by hand (`run_round`, the daemon's
settings) on the kept databases (`--keep-work`) of every model in the `--work` runs but
`--hold-out`, then scores the shipped student, the distilled one and an untrained one on the
held-out model's records from the same runs: TenSet top-1 / top-5 (each task weighs 1) and
pairwise accuracy. No workload of the held-out model is trained on; pass runs tuned from an
empty database (not `--warm-from`, whose databases hold the other models' records). Writes `<out>/student_refresh_<hold-out>.json` and the distilled student
beside it (`student_refresh_<hold-out>.pt`, for `python -m benchmarks run --student`).
CPU-bound (a few minutes of training): run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.harness import seed_database
from deploy.layout import database_dir, databases_root
from tcl_core import tvm_api
from tcl_core.continual import RoundSettings, run_round
from tcl_core.evaluate import evaluate, open_student
from tcl_core.records import load_task_records
from tcl_core.students import find_student


def _databases(works: list[Path], keep) -> list[Path]:
    """The platform databases of every kept run (<work>/<model>/<cost model>/state) whose model `keep` accepts."""
    return [folder for work in works for model in sorted(work.iterdir()) if model.is_dir() and keep(model.name)
            for run in sorted(model.iterdir()) if databases_root(run / "state").is_dir()
            for folder in sorted(databases_root(run / "state").iterdir())]


def _workloads(database_dir: Path) -> set[int]:
    """The structural hashes of the workloads the database holds records of."""
    return {tvm_api.structural_hash(record.workload.mod)
            for record in tvm_api.open_database(database_dir).get_all_tuning_records()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.student_refresh", description=__doc__.splitlines()[0])
    parser.add_argument("--hold-out", required=True, help="the model scored, left out of the round")
    parser.add_argument("--work", type=Path, nargs="+", required=True, help="kept benchmark runs' work folders")
    parser.add_argument("--steps", type=int, default=RoundSettings().steps)
    parser.add_argument("--out", type=Path, default=None, help="default research/results/<platform>/")
    args = parser.parse_args(argv)
    train_sources = _databases(args.work, lambda name: name != args.hold_out)
    eval_sources = _databases(args.work, lambda name: name == args.hold_out)
    if not train_sources or not eval_sources:
        raise SystemExit(f"need kept databases of {args.hold_out} and of other models in {args.work}")
    platform = train_sources[0].name
    out = args.out or Path("research/results") / platform
    with tempfile.TemporaryDirectory(prefix="student-refresh-") as scratch:
        state = Path(scratch) / "state"
        held_out = Path(scratch) / "held-out"
        seed_database(held_out, eval_sources)
        # a workload the held-out model shares with another (a transpose, a layer norm) is not trained on
        copied = seed_database(database_dir(state, platform), train_sources, leave_out=frozenset(_workloads(held_out)))
        result = run_round(platform, database_dir(state, platform), state, RoundSettings(steps=args.steps))
        distilled = state / "student_versions" / platform / f"v{result.version}" / "student.pt"
        shipped = find_student(platform)
        tasks = load_task_records(held_out)
        scores = {
            "shipped": evaluate(open_student(shipped.path), tasks),
            "distilled": evaluate(open_student(distilled), tasks),
            "untrained": evaluate(open_student(None), tasks),
        }
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(distilled, out / f"student_refresh_{args.hold_out}.pt")
    report = {
        "hold_out": args.hold_out, "platform": platform, "work": [str(w) for w in args.work],
        "train_records": copied, "train_databases": [str(s) for s in train_sources],
        "held_out_tasks": len(tasks), "held_out_records": sum(t.size for t in tasks),
        "round": {"decision": result.decision, "reason": result.reason, "steps": args.steps,
                  "train_tasks": result.train_tasks, "validation_tasks": result.validation_tasks,
                  "seconds": result.seconds},
        "scores": {name: {k: round(float(v), 4) for k, v in summary.items()} for name, summary in scores.items()},
    }
    (out / f"student_refresh_{args.hold_out}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["scores"], indent=2))


if __name__ == "__main__":
    main()
