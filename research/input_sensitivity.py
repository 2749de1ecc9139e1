"""How much a tuned kernel's run time depends on its input values, which the search never varies.

    .venv/bin/python -m research.input_sensitivity DATABASE_DIR [--contains erf] \
        [--card data/<platform>/card.json --model vit_block] [--target JSON]

MetaSchedule measures every candidate on inputs filled uniformly from [1, 10)
(`tvm.contrib.random.random_fill_for_measure`). A kernel whose cost depends on the values (the
`erf` of a fused GELU compiles to libm's `erff`, which is cheap once its argument saturates) is
then known at one point of that dependence only. For the best record of each task in a tuning
database (the schedule a build would use) this builds the schedule and times it alone on the
runner's fill and on inputs centred on 0. Prints one JSON line per task, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core import tvm_api  # noqa: E402
from tcl_core.records import mean_seconds  # noqa: E402

RUNNER_FILL = "runner U[1,10)"
# label -> how to fill one argument: (rng, shape, dtype) -> array; None: the runner's own fill
DISTRIBUTIONS = {
    RUNNER_FILL: None,
    "U(0,1)": lambda rng, shape, dtype: rng.random(shape).astype(dtype),
    "N(0,0.1)": lambda rng, shape, dtype: (0.1 * rng.standard_normal(shape)).astype(dtype),
    "N(0,1)": lambda rng, shape, dtype: rng.standard_normal(shape).astype(dtype),
}


def best_records(database_dir: Path, contains: str | None = None) -> dict[str, tuple[float, object]]:
    """Workload hash -> (mean seconds, record) of each task's fastest record, for tasks whose TIR mentions `contains`."""
    best: dict[str, tuple[float, object]] = {}
    for record in tvm_api.open_database(database_dir).get_all_tuning_records():
        seconds = mean_seconds([float(s) for s in record.run_secs or []])
        if not math.isfinite(seconds):
            continue
        key = str(tvm_api.structural_hash(record.workload.mod))
        if seconds < best.get(key, (math.inf,))[0]:
            best[key] = (seconds, record)
    if contains is None:
        return best
    return {key: entry for key, entry in best.items() if contains in entry[1].workload.mod.script()}  # once a task


def time_on_inputs(record, target, *, seed: int = 0, repeat: int = 15, min_repeat_ms: int = 20) -> dict[str, float]:
    """Median ms of the record's schedule, timed alone (warm, as the runner does), per input distribution."""
    tvm = tvm_api.tvm
    candidate = record.as_measure_candidate()
    library = tvm_api.fast_build(candidate.sch.mod, target)
    evaluator = library.time_evaluator(library.entry_name, tvm.cpu(), number=3, repeat=repeat,
                                       min_repeat_ms=min_repeat_ms)
    runner_fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")
    rng = np.random.default_rng(seed)
    shapes = [([int(d) for d in info.shape], str(info.dtype)) for info in candidate.args_info]
    timed = {}
    for label, draw in DISTRIBUTIONS.items():
        args = []
        for shape, dtype in shapes:
            if draw is None:
                arg = tvm.runtime.tensor(np.zeros(shape, dtype))
                runner_fill(arg)
            else:
                arg = tvm.runtime.tensor(draw(rng, shape, dtype))
            args.append(arg)
        # 4 significant digits, not 4 decimals: a tiny kernel's 0.03 us rounded to 0.0 ms before
        timed[label] = float(f"{float(np.median(evaluator(*args).results)) * 1e3:.4g}")
    return timed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", type=Path, help="a JSON tuning database folder")
    parser.add_argument("--contains", default=None, help="only tasks whose TIR contains this text (e.g. erf)")
    parser.add_argument("--card", type=Path, default=None, help="a collect card.json, to name the tasks")
    parser.add_argument("--model", default=None, help="the model in the card whose task names to use")
    parser.add_argument("--target", type=json.loads, default=None, help="TVM target as JSON (default: this host)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names: dict[str, str] = {}
    if args.card:
        models = json.loads(args.card.read_text())["models"]
        for model, entry in models.items():
            if args.model in (None, model):
                names.update({str(t["structural_hash"]): t["name"] for t in entry.get("tasks", [])})
    best = best_records(args.database, args.contains)
    if not best:
        raise SystemExit(f"no measured task in {args.database}" + (f" mentions {args.contains!r}" if args.contains else ""))
    target = tvm_api.make_target(args.target)
    for workload, (seconds, record) in sorted(best.items(), key=lambda item: -item[1][0]):
        print(json.dumps({"workload": workload, "task": names.get(workload), "database_ms": round(seconds * 1e3, 4),
                          "ms": time_on_inputs(record, target, seed=args.seed)}), flush=True)


if __name__ == "__main__":
    main()
