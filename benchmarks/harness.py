"""One benchmark tuning run and what it records; shared by `python -m benchmarks run` and run.py.

A run tunes one model from an empty database with one cost model and budget through the real
pipeline (deploy.pipeline.run_pipeline), and keeps what the curves need: when the trial counter
moved (`timeline`: seconds since start, trials measured) and every measurement in the order it
was made (`measurements`: workload hash, mean seconds; inf for a failed candidate).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

import onnx

from deploy import examples
from deploy.layout import database_dir, records_key
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline
from deploy.tune import TVM_EXPLORE
from tcl_core.zoo import ZOO, export_onnx

__all__ = ["MODELS", "COST_MODELS", "tune_once", "measurement_order", "best_seconds_per_task", "seed_database"]


def _zoo(name: str):
    def build() -> onnx.ModelProto:
        with tempfile.TemporaryDirectory() as scratch:
            return onnx.load(str(export_onnx(ZOO[name], Path(scratch) / f"{name}.onnx")))
    return build


# The examples, the zoo's held-out models (no shipped student was trained on them), and ResNet-18
# at the zoo's size (1x3x112x112), which the deployment goal names; the students trained on its tasks.
MODELS = {
    "tiny_cnn": lambda: examples.tiny_cnn(batch=1),
    "mlp_b8": lambda: examples.mlp(batch=8, width=512),
    **{name: _zoo(name) for name, model in ZOO.items() if model.split == "eval"},
    "resnet18": _zoo("resnet18"),
}

# Benchmark names -> (pipeline cost model, uses RDU inside the search, share drawn at random).
# "tcl-rdu" is tcl with part of every measured batch chosen by the RDU sampler
# (TuningOptions.rdu_fraction). The share drawn at random (TuningOptions.explore): None is the
# pipeline's default for the cost model (deploy.tune.explore_share); "tcl-explore" takes
# tune_once's `explore`; "tcl-greedy" is tcl at TVM's 0.05, none at these batch sizes, as every
# tcl run before 2026-12-05 (rows named "tcl" in older results) was tuned.
EXPLORE_ARGUMENT = "argument"
COST_MODELS = {"auto": ("auto", False, None), "tcl": ("tcl", False, None), "tcl-rdu": ("tcl", True, None),
               "tcl-explore": ("tcl", False, EXPLORE_ARGUMENT), "tcl-greedy": ("tcl", False, TVM_EXPLORE),
               "xgb": ("xgb", False, None), "random": ("random", False, None)}


def tune_once(
    model_name: str, root: Path, *, budget: int, cost_model: str, trials_per_iter: int, population: int = 256,
    seed: int = 0,
    target: dict | None = None, student: Path | None = None, rdu_fraction: float = 0.25,
    explore: float | None = None, timing_repeats: int = 50, levers: dict | None = None,
    seed_databases: list[Path] | None = None, task_hashes: set[str] | None = None,
) -> dict:
    """Tune `model_name` under `root` (its artifact stays in root/out) and return the run's record.

    `levers`: TuningOptions fields that change what is tuned or how it is timed (threads, fast_math,
    pack_weights, conv_layout, flush_caches); None keeps the pipeline's defaults.
    `seed_databases`: a warm run: the platform's database starts with these databases' records
    (folders named by their records key, as the pipeline keeps them). Those of the model's own
    workloads (`task_hashes`) lead `measurements`, at 0 s, so the curves start from what the
    database already held; the rest are left out.
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost model {cost_model!r}; expected one of {sorted(COST_MODELS)}")
    pipeline_cost_model, with_rdu, share = COST_MODELS[cost_model]
    explore = explore if share == EXPLORE_ARGUMENT else share
    model_path = root / f"{model_name}.onnx"
    onnx.save(MODELS[model_name](), str(model_path))
    started = time.perf_counter()
    timeline: list[tuple[float, int]] = []  # (seconds since start, trials measured)

    def on_progress(progress) -> None:
        if progress.stage == "tuning":
            timeline.append((round(time.perf_counter() - started, 2), progress.trials_done))

    seeded = seed_database(database_dir(root / "state", seed_databases[0].name), seed_databases) if seed_databases else 0
    uses_student = pipeline_cost_model == "tcl"
    manifest = run_pipeline(
        model_path, output_dir=root / "out", state_dir=root / "state", on_progress=on_progress,
        options=TuningOptions(trials=budget, cost_model=pipeline_cost_model, timing_repeats=timing_repeats,
                              trials_per_iter=trials_per_iter, population=population, target=target, seed=seed,
                              student=student if uses_student else None,
                              rdu_fraction=rdu_fraction if with_rdu else 0.0, explore=explore,
                              # a benchmark spends its whole budget: no early stop, so cost models compare
                              **{"patience_rounds": None, "time_budget": None, **(levers or {})}),
    )
    wall = time.perf_counter() - started
    measurements = measurement_order(database_dir(root / "state", records_key(
        manifest.platform, manifest.threads, manifest.target.get("num-cores"), flush_caches=manifest.flush_caches)))
    if seeded:
        held = [m for m in measurements[:seeded] if m[0] in (task_hashes or set())]
        measurements = held + measurements[seeded:]
        timeline = [(0.0, len(held))] + [(seconds, trials + len(held)) for seconds, trials in timeline]
    return {
        "model": model_name, "budget": budget, "cost_model": cost_model,
        "resolved_cost_model": manifest.cost_model, "student": manifest.student,
        "trials_per_iter": trials_per_iter, "population": population, "rdu_fraction": rdu_fraction if with_rdu else 0.0,
        "explore": manifest.explore, "seed": seed,
        "trials_measured": manifest.trials_measured, "tasks": manifest.tasks,
        "tuning_seconds": manifest.tuning_seconds, "pipeline_seconds": round(wall, 1),
        "latency_ms": manifest.latency_ms.model_dump(), "platform": manifest.platform,
        "threads": manifest.threads, "fast_math": manifest.fast_math, "pack_weights": manifest.pack_weights,
        "conv_layout": manifest.conv_layout, "flush_caches": manifest.flush_caches, "estimated_ms": manifest.estimated_ms, "advice": manifest.advice,
        "top_kernels": [kernel.model_dump() for kernel in manifest.top_kernels],
        "max_abs_err": manifest.verification.max_abs_err, "target": manifest.target,
        "artifact_dir": manifest.artifact_dir, "tasks_reused": manifest.tasks_reused,
        "tuning_profile": manifest.tuning_profile,
        "tasks_warm_started": manifest.tasks_warm_started, "seeded_records": seeded,
        "best_seconds_per_task": best_seconds_per_task(measurements), "timeline": timeline,
        "measurements": measurements,
    }


def best_seconds_per_task(measurements: list[tuple[str, float]]) -> dict[str, float]:
    """Workload hash -> the fastest mean run time measured for it; tasks that only failed are left out."""
    best: dict[str, float] = {}
    for workload, seconds in measurements:
        if math.isfinite(seconds):
            best[workload] = min(seconds, best.get(workload, math.inf))
    return best


def measurement_order(database_dir: Path) -> list[tuple[str, float]]:
    """(workload hash, mean seconds) of every record in the order measured (inf: failed)."""
    from tcl_core.records import RECORD_FILE, WORKLOAD_FILE, mean_seconds

    hashes = [json.loads(line)[0] for line in (database_dir / WORKLOAD_FILE).read_text().splitlines() if line]
    order = []
    for line in (database_dir / RECORD_FILE).read_text().splitlines():
        if line:
            index, record = json.loads(line)
            order.append((str(hashes[index]), mean_seconds(record[1])))
    return order


def seed_database(dest: Path, sources: list[Path], *, leave_out: frozenset[int] = frozenset()) -> int:
    """Copy every record of the MetaSchedule JSON databases in `sources` into the one at `dest`; returns how many.

    A warm run's starting point: the platform's database as it stands after tuning other models.
    `leave_out`: workloads (structural hashes) whose records are not copied.
    """
    from tcl_core import tvm_api

    database = tvm_api.open_database(dest)
    copied = 0
    for source in sources:
        for record in tvm_api.open_database(source).get_all_tuning_records():
            if leave_out and tvm_api.structural_hash(record.workload.mod) in leave_out:
                continue
            database.commit_tuning_record(tvm_api.ms.database.TuningRecord(
                record.trace, database.commit_workload(record.workload.mod), record.run_secs, record.target,
                record.args_info))
            copied += 1
    return copied
