"""Where a tuning run's wall time goes, per cost model: MetaSchedule's profiler over one job each.

    .venv/bin/python -m research.loop_profile [--model tiny_cnn] [--trials 64] [--cost-models tcl xgb random] \
        [--populations 256]

Each cost model tunes the model from an empty database (`run_pipeline`, fixed budget, no early
stop) and the manifest's `tuning_profile` is summarised (or, with `--manifests`, the kept
manifests of earlier runs, e.g. a benchmark's `.work/<stem>/*/*/out/*/manifest.json`): building candidates (SendToBuilder),
running them (SendToRunner + JoinRunnerFutures), the evolutionary search with the cost model's
predictions (EvoSearch/*), the cost-model update (MeasureCallback/UpdateCostModel), and trials
per minute. Prints one JSON line per cost model. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import onnx

from benchmarks.harness import MODELS
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline


def summarise(profile: dict[str, float], trials: int, seconds: float) -> dict:
    search = sum(v for k, v in profile.items() if k.startswith("EvoSearch/") and k.count("/") == 1)
    search += sum(v for k, v in profile.items() if k.startswith("EvoSearch/Evolve/") and k.count("/") == 2)
    shares = {"build": profile.get("SendToBuilder", 0.0),
              "run": profile.get("SendToRunner", 0.0) + profile.get("JoinRunnerFutures", 0.0),
              "search": search, "cost_model_update": profile.get("MeasureCallback/UpdateCostModel", 0.0)}
    total = profile.get("Total", seconds)
    return {**{k: round(v, 1) for k, v in shares.items()}, "other": round(total - sum(shares.values()), 1),
            "total": round(total, 1), "trials": trials, "trials_per_minute": round(60 * trials / max(seconds, 1e-9), 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.loop_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_cnn", choices=sorted(MODELS))
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--trials-per-iter", type=int, default=8)
    parser.add_argument("--cost-models", nargs="+", default=["tcl", "xgb", "random"])
    parser.add_argument("--populations", nargs="+", type=int, default=[256], help="evolutionary-search populations to compare")
    parser.add_argument("--manifests", nargs="+", type=Path, default=None,
                        help="summarise these kept manifests instead of tuning (model and cost model from each)")
    args = parser.parse_args(argv)
    for path in args.manifests or []:
        manifest = json.loads(path.read_text())
        print(json.dumps({"model": manifest["name"], "cost_model": manifest["cost_model"], "manifest": str(path),
                          "estimated_ms": manifest.get("estimated_ms"),
                          **summarise(manifest["tuning_profile"], manifest["trials_measured"], manifest["tuning_seconds"])}),
              flush=True)
    if args.manifests:
        return
    for population, cost_model in [(p, c) for p in args.populations for c in args.cost_models]:
        with tempfile.TemporaryDirectory(prefix="loop-profile-") as scratch:
            path = Path(scratch) / f"{args.model}.onnx"
            onnx.save(MODELS[args.model](), str(path))
            manifest = run_pipeline(path, output_dir=Path(scratch) / "out", state_dir=Path(scratch) / "state",
                                    options=TuningOptions(trials=args.trials, cost_model=cost_model, time_budget=None,
                                                          patience_rounds=None, trials_per_iter=args.trials_per_iter,
                                                          population=population, timing_repeats=3))
        print(json.dumps({"model": args.model, "cost_model": cost_model, "population": population,
                          "estimated_ms": manifest.estimated_ms,
                          **summarise(manifest.tuning_profile, manifest.trials_measured, manifest.tuning_seconds)}),
              flush=True)


if __name__ == "__main__":
    main()
