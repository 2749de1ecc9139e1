"""Lever by lever: what each of threads, fast math, packed weights and NHWC does to the tuned library.

    .venv/bin/python -m benchmarks levers [--models tiny_cnn vit_block mobilenet_v2] [--rounds 1] \
        [--trials-per-iter 8] [--cost-model auto] [--stem levers]

Each row adds one lever to the row above (baseline: one TVM thread, as every TVM number was
before 2026-12-07; libm erf; weights in their ONNX layout; NCHW). Every row tunes the model from
an empty database with the same seed, cost model and `rounds` search rounds per task (so a row
whose layout has more tasks gets the trials they need). When a model's rows are tuned, its
libraries and onnxruntime are timed side by side in one child process per thread count (TVM
reads its thread count once per process), onnxruntime on the same number of threads as TVM,
taking turns in rounds (benchmarks.suite.measure_deployed). Results: `<out>/<stem>.json` (resumable:
finished rows and timed models are kept) and `<out>/<stem>.md`; the libraries stay in
`<out>/.work/<stem>/`, so `--retime` can time them again on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
from pathlib import Path

# Cumulative: each lever keeps the ones above it.
LEVERS: list[tuple[str, dict]] = [
    ("baseline (1 thread)", {"threads": 1, "fast_math": False, "pack_weights": False, "conv_layout": "NCHW"}),
    ("+ threads", {"threads": None, "fast_math": False, "pack_weights": False, "conv_layout": "NCHW"}),
    ("+ fast math", {"threads": None, "fast_math": True, "pack_weights": False, "conv_layout": "NCHW"}),
    ("+ packed weights", {"threads": None, "fast_math": True, "pack_weights": True, "conv_layout": "NCHW"}),
    ("+ NHWC", {"threads": None, "fast_math": True, "pack_weights": True, "conv_layout": "NHWC"}),
    ("+ cold-cache timing", {"threads": None, "fast_math": True, "pack_weights": True, "conv_layout": "NHWC",
                             "flush_caches": True}),
]


def tasks_under(model_name: str, levers: dict) -> tuple[int, int]:
    """(task count, structural hash of the lowered program) under these levers.

    NHWC can add layout transforms; a lever that changes nothing in a model (fast math in a
    model without erf, exp, tanh or softmax) leaves the hash as it was.
    """
    from benchmarks.harness import MODELS
    from deploy.options import TuningOptions
    from deploy.pipeline import import_and_lower
    from tcl_core import tvm_api

    target = tvm_api.make_target(tvm_api.host_target_dict())
    options = TuningOptions(**{k: v for k, v in levers.items() if k != "threads"})
    lowered = import_and_lower(MODELS[model_name](), target, options)
    return len(tvm_api.extract_tasks(lowered, target)), tvm_api.structural_hash(lowered)


def _time_in_child(model_name: str, libraries: dict[str, str], threads: int, repeats: int, seed: int, queue) -> None:
    """Runs in a fresh process, so TVM's pool starts on `threads` threads."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    from benchmarks.suite import measure_deployed
    from tcl_core import tvm_api

    measured = measure_deployed(model_name, {k: Path(v) for k, v in libraries.items()}, repeats=repeats, seed=seed,
                                onnxruntime_threads=[threads])
    measured["tvm_threads"] = tvm_api.runtime_threads()
    queue.put(measured)


def time_side_by_side(model_name: str, libraries: dict[str, str], threads: int, *, repeats: int, seed: int) -> dict:
    """`measure_deployed` in a spawned child whose TVM runtime runs `threads` threads."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_time_in_child, args=(model_name, libraries, threads, repeats, seed, queue))
    child.start()
    measured = queue.get()
    child.join()
    return measured


def main(argv: list[str] | None = None) -> None:
    from benchmarks.harness import tune_once

    parser = argparse.ArgumentParser(prog="python -m benchmarks levers", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny_cnn", "vit_block", "mobilenet_v2"])
    parser.add_argument("--rounds", type=int, default=1, help="search rounds per task (budget = tasks x rounds x trials per iter)")
    parser.add_argument("--trials-per-iter", type=int, default=8)
    parser.add_argument("--cost-model", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results/<platform>/)")
    parser.add_argument("--stem", default="levers")
    parser.add_argument("--retime", action="store_true",
                        help="time the kept libraries again (an idle machine), replacing the stored timings")
    args = parser.parse_args(argv)
    from benchmarks.suite import results_dir

    args.out = args.out or results_dir()
    cores = os.cpu_count() or 1
    path = args.out / f"{args.stem}.json"
    results = json.loads(path.read_text()) if path.exists() else {"rows": [], "timed": {}}
    results["command"] = " ".join(["-m benchmarks levers", *(argv if argv is not None else sys.argv[2:])])
    from benchmarks.suite import _machine

    results["machine"] = _machine()
    work = args.out / ".work" / args.stem
    for model_name in args.models:
        if args.retime:
            results["timed"].pop(model_name, None)
        if model_name in results["timed"]:
            print(f"skip {model_name} (timed in {path})", flush=True)
            continue
        previous: dict | None = None
        for lever, settings in LEVERS:
            done = [r for r in results["rows"] if r["model"] == model_name and r["lever"] == lever]
            if done and Path(done[0]["artifact_dir"], "model.so").exists():
                previous = done[0]
                previous.setdefault("program", tasks_under(model_name, settings)[1])  # rows from before it was kept
                continue
            results["rows"] = [r for r in results["rows"] if not (r["model"] == model_name and r["lever"] == lever)]
            tasks, program = tasks_under(model_name, settings)
            threads = settings["threads"] or cores
            if (previous and previous.get("program") == program and previous["threads"] == threads
                    and previous.get("flush_caches", False) == settings.get("flush_caches", False)):
                # The same program on the same threads: tuning it again would only measure the search's luck.
                row = {**previous, "lever": lever, "same_as": previous.get("same_as", previous["lever"])}
                print(f"{model_name} {lever}: the same program as {previous['lever']}, not tuned again", flush=True)
                results["rows"].append(row)
                previous = row
                continue
            budget = tasks * args.rounds * args.trials_per_iter
            print(f"{model_name} {lever}: tuning {budget} trials with {args.cost_model}", flush=True)
            root = work / model_name / lever.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "plus")
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            row = tune_once(model_name, root, budget=budget, cost_model=args.cost_model,
                            trials_per_iter=args.trials_per_iter, seed=args.seed, timing_repeats=10,
                            levers={k: v for k, v in settings.items() if v is not None})
            row = {k: v for k, v in row.items() if k not in ("measurements", "timeline")}
            row.update(lever=lever, program=program)
            previous = row
            print(f"{model_name} {lever}: {row['trials_measured']} measured in {row['tuning_seconds']:.0f} s", flush=True)
            results["rows"].append(row)
            path.write_text(json.dumps(results, indent=2) + "\n")
        rows = [r for r in results["rows"] if r["model"] == model_name]
        timed = {}
        for threads in sorted({r["threads"] for r in rows}):
            libraries = {r["lever"]: str(Path(r["artifact_dir"], "model.so")) for r in rows
                         if r["threads"] == threads and "same_as" not in r}
            print(f"{model_name}: timing {len(libraries)} libraries and onnxruntime on {threads} threads", flush=True)
            timed[str(threads)] = time_side_by_side(model_name, libraries, threads, repeats=args.timing_repeats,
                                                    seed=args.seed)
        results["timed"][model_name] = timed
        path.write_text(json.dumps(results, indent=2) + "\n")  # libraries stay in `work` for --retime
    (args.out / f"{args.stem}.md").write_text(markdown(results, cores))
    print(args.out / f"{args.stem}.md")


def markdown(results: dict, cores: int) -> str:
    machine = results["machine"]
    lines = [
        "# Lever by lever: the tuned library against onnxruntime on equal threads", "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores. Command: `.venv/bin/python {results['command']}`.",
        "Each row adds one lever to the row above and is tuned from an empty database with the same seed and "
        "search rounds per task; a model's libraries and onnxruntime are timed side by side in one process per "
        "thread count (median ms per call). tvm / ort below 1: the library is faster.", "",
        "| model | lever | threads | tasks | trials | tuning s | estimate ms | tvm ms | onnxruntime ms (same threads) | tvm / ort |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    models = list(dict.fromkeys(row["model"] for row in results["rows"]))
    order = [name for name, _ in LEVERS]
    for row in sorted(results["rows"], key=lambda r: (models.index(r["model"]), order.index(r["lever"]))):
        timed = results["timed"].get(row["model"], {}).get(str(row["threads"]))
        if timed is None:
            continue
        tvm_ms = timed["tvm"][row.get("same_as", row["lever"])]
        ort_ms = timed["onnxruntime"][f"{row['threads']}_threads"]
        estimate = f"{row['estimated_ms']:.3f}" if row.get("estimated_ms") is not None else "-"
        lever = row["lever"] + (f" (the same program as {row['same_as']}: not tuned again)" if "same_as" in row else "")
        lines.append(f"| {row['model']} | {lever} | {row['threads']} | {row['tasks']} | {row['trials_measured']} | "
                     f"{row['tuning_seconds']:.0f} | {estimate} | {tvm_ms:.4f} | {ort_ms:.4f} | {tvm_ms / ort_ms:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
