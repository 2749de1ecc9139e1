"""Tune models at several budgets and cost models; record tuned / untuned / onnxruntime latency and tuning time.

    .venv/bin/python -m research.run [--models tiny_cnn mlp_b8] [--budgets 64 256] \
        [--cost-models xgb] [--trials-per-iter 16] [--results pipeline] [--target JSON] [--student PATH]

Models are the examples (tiny_cnn, mlp_b8) and the zoo's held-out models (vit_block,
mobilenet_v2), which no student was trained on. Each (model, budget, cost model) tunes from an
empty database with the same seed, so no run reuses another's records, and the cost models of
one (model, budget) run one after the other, so they are compared side by side in one run.
Results are appended to `<out>/<results>.json` as they finish (a rerun skips what is there:
resumable) and summarised in `<out>/<results>.md`. Latencies are medians measured in one process
on the same inputs, so compare ratios; absolute numbers move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import COST_MODELS, MODELS, tune_once  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--cost-models", nargs="+", default=["xgb"], choices=sorted(COST_MODELS),
                        help="tcl-rdu: tcl with --rdu-fraction of each measured batch picked by the RDU sampler; "
                             "tcl-explore: tcl with --explore of each batch drawn at random; tcl-greedy: tcl drawing "
                             "none (TVM's 0.05), as tcl ran before 2026-12-05")
    parser.add_argument("--rdu-fraction", type=float, default=0.25, help="for tcl-rdu")
    parser.add_argument("--explore", type=float, default=None,
                        help="for tcl-explore: share of each measured batch drawn at random (default: tcl's, 0.25)")
    parser.add_argument("--trials-per-iter", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0, help="MetaSchedule's search seed, the same for every run")
    parser.add_argument("--results", default="pipeline", help="file stem under --out")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--target", type=json.loads, default=None, help="TVM target as JSON (default: this host)")
    parser.add_argument("--student", type=Path, default=None, help="student file for the tcl runs")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / f"{args.results}.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    done = {(r["model"], r["budget"], r["cost_model"]) for r in results["runs"]}
    results["command"] = " ".join(["research/run.py", *sys.argv[1:]])
    results["machine"] = {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()}

    for model_name, budget, cost_model in [(m, b, c) for m in args.models for b in args.budgets
                                       for c in args.cost_models]:
        if (model_name, budget, cost_model) in done:
            print(f"skip {model_name} @ {budget} with {cost_model} (already in {results_path})")
            continue
        with tempfile.TemporaryDirectory(prefix="tcl-bench-") as scratch:
            row = tune_once(model_name, Path(scratch), budget=budget, cost_model=cost_model,
                            trials_per_iter=args.trials_per_iter, target=args.target, student=args.student,
                            rdu_fraction=args.rdu_fraction, explore=args.explore, seed=args.seed)
        print(json.dumps(row))
        results["runs"].append(row)
        results_path.write_text(json.dumps(results, indent=2) + "\n")
    (args.out / f"{args.results}.md").write_text(_markdown(results, args.results))


def _per_task_ratios(results: dict) -> list[str]:
    """For each (model, budget): geometric mean over the tasks both searched of xgb's best / the other's."""
    lines = []
    runs = {(r["model"], r["budget"], r["cost_model"]): r for r in results["runs"] if "best_seconds_per_task" in r}
    for (model, budget, cost_model), run in runs.items():
        baseline = runs.get((model, budget, "xgb"))
        if cost_model == "xgb" or baseline is None:
            continue
        shared = sorted(set(run["best_seconds_per_task"]) & set(baseline["best_seconds_per_task"]))
        if not shared:
            continue
        ratios = [baseline["best_seconds_per_task"][k] / run["best_seconds_per_task"][k] for k in shared]
        geomean = float(np.exp(np.mean(np.log(ratios))))
        wins = sum(ratio > 1 for ratio in ratios)
        lines.append(f"| {model} | {budget} | {cost_model} | {len(shared)} | {geomean:.3f} | {wins}/{len(shared)} |")
    if not lines:
        return []
    return ["", "Per task, on the tasks both searches measured: the best candidate xgb found over the best the other "
            "found (above 1: the other found faster programs).", "",
            "| model | budget | cost model | tasks | geomean xgb best / its best | tasks where it found faster |",
            "|---|---|---|---|---|---|", *lines]


def _markdown(results: dict, stem: str) -> str:
    machine = results["machine"]
    lines = [
        "# Pipeline benchmark: tuned TVM vs untuned TVM vs onnxruntime",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores. Command: "
        f"`.venv/bin/python {results.get('command', 'research/run.py --results ' + stem)}`.",
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
    return "\n".join(lines + _per_task_ratios(results)) + "\n"


def _cpu_name() -> str:
    from tcl_core.platform import cpu_model_name

    return cpu_model_name()


if __name__ == "__main__":
    main()
