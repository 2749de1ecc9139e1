"""Tune the example models at two budgets; record tuned / untuned / onnxruntime latency and tuning time.

    .venv/bin/python benchmarks/run.py [--budgets 64 256] [--cost-model xgb] [--out benchmarks/results]

Each (model, budget) tunes from an empty database, so no run reuses another's records. Results
are appended to `<out>/pipeline.json` as they finish (a rerun skips what is there: resumable) and
summarised in `<out>/pipeline.md`. Latencies are medians measured in one process on the same
inputs, so compare the ratios within a row; absolute numbers move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy import examples  # noqa: E402
from deploy.options import TuningOptions  # noqa: E402
from deploy.pipeline import run_pipeline  # noqa: E402

MODELS = {
    "tiny_cnn": lambda: examples.tiny_cnn(batch=1),
    "mlp_b8": lambda: examples.mlp(batch=8, width=512),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--cost-model", default="xgb")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "pipeline.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    done = {(r["model"], r["budget"], r["cost_model"]) for r in results["runs"]}
    results["machine"] = {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()}

    for model_name in args.models:
        for budget in args.budgets:
            if (model_name, budget, args.cost_model) in done:
                print(f"skip {model_name} @ {budget} (already in {results_path})")
                continue
            with tempfile.TemporaryDirectory(prefix="tcl-bench-") as scratch:
                root = Path(scratch)
                model_path = root / f"{model_name}.onnx"
                onnx.save(MODELS[model_name](), str(model_path))
                started = time.perf_counter()
                manifest = run_pipeline(
                    model_path, output_dir=root / "out", state_dir=root / "state",
                    options=TuningOptions(trials=budget, cost_model=args.cost_model, timing_repeats=50),
                )
                wall = time.perf_counter() - started
            row = {
                "model": model_name, "budget": budget, "cost_model": args.cost_model,
                "trials_measured": manifest.trials_measured, "tasks": manifest.tasks,
                "tuning_seconds": manifest.tuning_seconds, "pipeline_seconds": round(wall, 1),
                "latency_ms": manifest.latency_ms.model_dump(),
                "max_abs_err": manifest.verification.max_abs_err, "target": manifest.target,
            }
            print(json.dumps(row))
            results["runs"].append(row)
            results_path.write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "pipeline.md").write_text(_markdown(results))


def _markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "# Pipeline benchmark: tuned TVM vs untuned TVM vs onnxruntime",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores. Command: `.venv/bin/python benchmarks/run.py`.",
        "Latency: median ms per call, all three measured in one process on the same inputs.",
        "",
        "| model | cost model | budget | tasks | measured | tuning s | tvm ms | untuned ms | onnxruntime ms | tvm / ort |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        lat = r["latency_ms"]
        lines.append(
            f"| {r['model']} | {r['cost_model']} | {r['budget']} | {r['tasks']} | {r['trials_measured']} | "
            f"{r['tuning_seconds']:.0f} | {lat['tvm']:.4f} | {lat['untuned']:.4f} | {lat['onnxruntime']:.4f} | "
            f"{lat['tvm'] / lat['onnxruntime']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def _cpu_name() -> str:
    from tcl_core.platform import cpu_model_name

    return cpu_model_name()


if __name__ == "__main__":
    main()
