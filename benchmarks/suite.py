"""The benchmark suite: tuning speed and final latency per cost model, onnxruntime, and the machine's peak.

    .venv/bin/python -m benchmarks run [--quick] [--models ...] [--budget N] [--cost-models tcl xgb random]

For each model, the same tasks are tuned from an empty database with the same seed and budget
by every cost model, one after the other (so no run shares records or cores with another).
Each run records best-so-far against trials and wall-clock seconds (benchmarks/harness.py).
When a model's runs are done, its libraries, onnxruntime (default threads, and each thread
count up to the core count) are timed side by side in this process on the same inputs, taking
turns in rounds so that a slow spell on the machine lands on all of them alike.
The machine's peak is a large single-precision GEMM in PyTorch on all cores; matmul and
convolution kernels are reported as a share of it.

Results go to `<out>/<date>-<platform>[-quick].json` as each run finishes (a rerun with the
same stem resumes: finished runs are kept, an interrupted model's runs are redone), then
`.md`, `-curves.png` and `-latency.png` beside it (benchmarks/report.py).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform as host
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import MODELS, tune_once

__all__ = ["SuiteConfig", "QUICK", "FULL", "run_suite", "measure_peak_gflops", "task_table"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class SuiteConfig:
    """What one suite run tunes, and how."""

    models: tuple[str, ...]
    budget: int                 # measured candidates per (model, cost model), at least...
    trials_per_iter: int        # candidates per search round
    population: int = 256       # evolutionary-search population (the daemon's default)
    trials_per_task: int = 0    # ...this many per task of the model (so a model with many tasks gets searched)
    cost_models: tuple[str, ...] = ("tcl", "xgb", "random")
    seed: int = 0
    timing_repeats: int = 50    # samples per latency; the median is reported
    baseline: str = "xgb"       # the cost model whose final latency is the target
    target: dict | None = field(default=None)  # TVM target dict; None: this host
    student: str | None = None  # student file for the "tcl" runs; None: what "tcl" resolves to here
    # A warm run: the work folder of an earlier `--keep-work` run; each model starts with the
    # tuning databases of that run's other models (as a platform that tuned them before would)
    warm_from: str | None = None


# Quick: the two example models at 32 trials (one or two search rounds of 8 per task); under 15 min on 2 cores.
QUICK = SuiteConfig(models=("tiny_cnn", "mlp_b8"), budget=32, trials_per_iter=8, population=256)
# Full: the held-out ViT block too (16 tasks: one round of 8 each); about 45 min on 2 cores (README).
# MobileNetV2 (33 tasks) needs 264 trials before every task has one round, three times as long:
# `--models mobilenet_v2 --budget 512 --stem <name>`.
FULL = SuiteConfig(models=("tiny_cnn", "mlp_b8", "vit_block"), budget=128, trials_per_iter=8, population=256)


def measure_peak_gflops(threads: int, *, size: int = 2048, repeats: int = 5) -> float:
    """Single-precision GEMM GFLOP/s in PyTorch on `threads` threads: the best of `repeats` timings."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        torch.mm(a, b)  # warm-up: thread pool, page faults
        best = math.inf
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - started)
    finally:
        torch.set_num_threads(previous)
    return 2.0 * size**3 / best / 1e9


def task_table(model_name: str, target_dict: dict) -> list[dict]:
    """The model's tuning tasks: name, weight (occurrences), structural hash (the database key), FLOPs."""
    from deploy.options import TuningOptions
    from deploy.pipeline import import_and_lower
    from tcl_core import tvm_api

    target = tvm_api.make_target(target_dict)
    lowered = import_and_lower(MODELS[model_name](), target, TuningOptions())  # as the pipeline tunes it
    return [{"name": task.task_name, "weight": int(task.weight),
             "structural_hash": str(tvm_api.structural_hash(task.dispatched[0])),
             "flops": float(tvm_api.estimate_flops(task.dispatched[0]))}
            for task in tvm_api.extract_tasks(lowered, target)]


def _onnx_inputs(session, seed: int) -> dict[str, np.ndarray]:
    """The pipeline's seeded inputs (deploy.verify.random_inputs) for a session's static float inputs."""
    from deploy import verify
    from deploy.artifact import TensorInfo

    inputs = []
    for info in session.get_inputs():
        if info.type != "tensor(float)" or not all(isinstance(d, int) for d in info.shape):
            raise ValueError(f"input {info.name}: the suite handles static float inputs, got {info.type} {info.shape}")
        inputs.append(TensorInfo(name=info.name, shape=list(info.shape), dtype="float32"))
    return {info.name: array for info, array in zip(inputs, verify.random_inputs(inputs, seed))}


def measure_deployed(model_name: str, libraries: dict[str, Path], *, repeats: int, seed: int,
                     rounds: int = 5, onnxruntime_threads: list[int] | None = None) -> dict:
    """Median ms of each library and of onnxruntime at `onnxruntime_threads` (None: default and each count).

    The libraries run on this process's TVM threads (TVM_NUM_THREADS, all cores unless set:
    tcl_core.tvm_api), recorded as "tvm_threads".

    The engines take turns: `rounds` rounds, each timing every engine for `repeats / rounds`
    samples, starting one engine later each round, and an engine's latency is the median of its
    round medians (all kept under "rounds_ms"). A slow spell on the machine (another process, a
    frequency change) then lands on all of them alike instead of on whichever engine happened to
    be timed during it, and no engine always runs right after the same one.
    """
    import onnxruntime

    from deploy import verify
    from tcl_core import tvm_api

    model_bytes = MODELS[model_name]().SerializeToString()
    calls: dict[tuple[str, str], Callable[[], object]] = {}
    feeds = None
    for threads in onnxruntime_threads or [0, *range(1, (os.cpu_count() or 1) + 1)]:  # 0: onnxruntime's default
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        feeds = feeds or _onnx_inputs(session, seed)
        key = "default" if threads == 0 else f"{threads}_threads"
        calls["onnxruntime", key] = lambda s=session: s.run(None, feeds)
    arrays = list(feeds.values())
    for cost_model, library in libraries.items():
        calls["tvm", cost_model] = verify.tvm_call(tvm_api.load_vm(library), arrays)
    per_round = max(1, math.ceil(repeats / rounds))
    engines = list(calls)
    round_medians: dict[tuple[str, str], list[float]] = {engine: [] for engine in engines}
    for index in range(rounds):
        # Who goes first, and who follows onnxruntime (its threads spin on for a while after a
        # run), changes every round.
        start = index % len(engines)
        for engine in engines[start:] + engines[:start]:
            round_medians[engine].append(verify.median_ms(calls[engine], per_round))
    out: dict = {"tvm": {}, "onnxruntime": {}, "rounds_ms": {}, "tvm_threads": tvm_api.runtime_threads(),
                 "timing": {"rounds": rounds, "samples_per_round": per_round}}
    for (kind, name), medians in round_medians.items():
        out[kind][name] = round(float(np.median(medians)), 4)
        out["rounds_ms"][f"{kind} {name}"] = [round(m, 4) for m in medians]
    best_key = min(out["onnxruntime"], key=out["onnxruntime"].get)  # default included
    out["onnxruntime_best"] = {"setting": best_key, "ms": out["onnxruntime"][best_key]}
    return out


def _machine() -> dict:
    from tcl_core.platform import cpu_model_name

    return {"cpu": cpu_model_name(), "cores": os.cpu_count(), "python": host.python_version()}


def results_dir(target: dict | None = None) -> Path:
    """`benchmarks/results/<platform>/`: where this machine's results go (one folder per platform)."""
    from tcl_core import tvm_api
    from tcl_core.platform import platform_name

    return Path(__file__).parent / "results" / platform_name(target or tvm_api.host_target_dict(), tvm_api.TVM_VERSION)


def default_stem(quick: bool, target: dict | None) -> str:
    """`<date>-<platform>[-quick]`, the file stem of a suite's results."""
    from tcl_core import tvm_api
    from tcl_core.platform import platform_name

    platform = platform_name(target or tvm_api.host_target_dict(), tvm_api.TVM_VERSION)
    return f"{dt.date.today().isoformat()}-{platform}" + ("-quick" if quick else "")


def warm_sources(work: Path, model_name: str) -> list[Path]:
    """The tuning databases of every other model in an earlier run's work folder (`<work>/<model>/<cost model>/state`)."""
    from deploy.layout import databases_root

    sources = sorted(folder for model in sorted(work.iterdir()) if model.is_dir() and model.name != model_name
                     for run in sorted(model.iterdir()) if databases_root(run / "state").is_dir()
                     for folder in databases_root(run / "state").iterdir() if folder.is_dir())
    if not sources:
        raise SystemExit(f"--warm-from {work}: no tuning databases of other models there (a --keep-work run's .work/<stem>)")
    return sources


def run_suite(config: SuiteConfig, out_dir: Path, stem: str, *, command: str, log: Log = print,
              keep_work: bool = False, retime: bool = False) -> dict:
    """Run (or resume) the suite; results in `out_dir/<stem>.json`. Returns the results.

    `keep_work`: leave each model's libraries and tuning databases in `out_dir/.work/<stem>/`
    (to time or profile them again later) instead of removing them once timed.
    `retime`: time the kept libraries of models already timed again (on an idle machine; a
    tuning run beside the first timing distorts it), replacing their "deployed" entry.
    """
    from tcl_core import tvm_api

    keep_work = keep_work or retime  # the libraries timed again stay for the next time
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem}.json"
    results = json.loads(path.read_text()) if path.exists() else {"runs": [], "models": {}}
    previous = {k: v for k, v in results.get("config", {}).items() if k != "models"}
    wanted = {k: v for k, v in json.loads(json.dumps(asdict(config))).items() if k != "models"}
    previous = {**{k: None for k in wanted if k not in previous}, **previous} if previous else previous  # older files lack newer settings
    if previous and previous != wanted:  # runs with other budgets or seeds are not comparable
        raise SystemExit(f"{path} holds runs made with other settings ({previous}); pick another --stem")
    models = list(dict.fromkeys([*results.get("config", {}).get("models", []), *config.models]))
    results.update(config={**asdict(config), "models": models}, machine=_machine())
    results["retime_command" if retime and "command" in results else "command"] = command
    target_dict = config.target or tvm_api.host_target_dict()
    started = time.perf_counter()

    def save() -> None:
        results["seconds"] = round(results.get("seconds_before", 0.0) + time.perf_counter() - started, 1)
        path.write_text(json.dumps(results, indent=2) + "\n")

    results["seconds_before"] = results.get("seconds", 0.0)
    if "peak_gflops" not in results:
        results["peak_gflops"] = round(measure_peak_gflops(os.cpu_count() or 1), 1)
        log(f"peak: {results['peak_gflops']} GFLOP/s (fp32 GEMM, {os.cpu_count()} threads)")
        save()
    work = out_dir / ".work" / stem
    for model_name in config.models:
        entry = results["models"].setdefault(model_name, {})
        kept = [r for r in results["runs"] if r["model"] == model_name and Path(r["artifact_dir"], "model.so").exists()]
        if retime and "deployed" in entry and kept:
            log(f"{model_name}: timing the kept libraries again")
            untuned = entry["deployed"]["untuned"]
            entry["deployed"] = measure_deployed(
                model_name, {r["cost_model"]: Path(r["artifact_dir"], "model.so") for r in kept},
                repeats=config.timing_repeats, seed=config.seed)
            entry["deployed"].update(untuned=untuned, retimed=dt.datetime.now().isoformat(timespec="seconds"))
            save()
            continue
        if "deployed" in entry:
            log(f"skip {model_name} (in {path})")
            continue
        # A model's libraries live only in its work folder; runs whose folder is gone are redone.
        model_work = work / model_name
        results["runs"] = [r for r in results["runs"] if r["model"] != model_name
                           or Path(r["artifact_dir"], "model.so").exists()]
        entry.setdefault("tasks", task_table(model_name, target_dict))
        budget = max(config.budget, config.trials_per_task * len(entry["tasks"]))
        entry["budget"] = budget
        for cost_model in config.cost_models:
            if any(r["model"] == model_name and r["cost_model"] == cost_model for r in results["runs"]):
                continue
            log(f"{model_name}: tuning {budget} trials with {cost_model}")
            root = model_work / cost_model
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            row = tune_once(model_name, root, budget=budget, cost_model=cost_model,
                            seed_databases=warm_sources(Path(config.warm_from), model_name) if config.warm_from else None,
                            task_hashes={task["structural_hash"] for task in entry["tasks"]},
                            trials_per_iter=config.trials_per_iter, population=config.population,
                            seed=config.seed, target=config.target, timing_repeats=config.timing_repeats,
                            student=Path(config.student) if config.student else None)
            log(f"{model_name} {cost_model}: {row['trials_measured']} measured in {row['tuning_seconds']:.0f} s, "
                f"estimate {row['estimated_ms']} ms, library {row['latency_ms']['tvm']} ms (the job's own timing)")
            results["runs"].append(row)
            save()
        runs = {r["cost_model"]: r for r in results["runs"] if r["model"] == model_name}
        log(f"{model_name}: timing {len(runs)} libraries and onnxruntime side by side")
        entry["deployed"] = measure_deployed(
            model_name, {cm: Path(r["artifact_dir"], "model.so") for cm, r in runs.items()},
            repeats=config.timing_repeats, seed=config.seed)
        entry["deployed"]["untuned"] = next(iter(runs.values()))["latency_ms"]["untuned"]
        save()
        if not keep_work:
            shutil.rmtree(model_work, ignore_errors=True)
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    if work.parent.exists() and not any(work.parent.iterdir()):
        work.parent.rmdir()  # other stems may still be resuming in theirs
    results.pop("seconds_before", None)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def main(argv: list[str] | None = None) -> None:
    import argparse

    from benchmarks import report

    parser = argparse.ArgumentParser(prog="python -m benchmarks run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK.models)} at {QUICK.budget} trials")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=None)
    parser.add_argument("--budget", type=int, default=None, help="trials per model and cost model")
    parser.add_argument("--trials-per-task", type=int, default=None,
                        help="at least this many trials per task of each model (raises --budget for large models)")
    parser.add_argument("--trials-per-iter", type=int, default=None)
    parser.add_argument("--cost-models", nargs="+", default=None)
    parser.add_argument("--population", type=int, default=None)
    parser.add_argument("--timing-repeats", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None, help="MetaSchedule's search seed, the same for every run")
    parser.add_argument("--student", type=Path, default=None,
                        help="student file for the tcl runs (default: this platform's, else the nearest platform's)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the libraries and tuning databases in <out>/.work/<stem>/ after timing them")
    parser.add_argument("--retime", action="store_true",
                        help="time the libraries kept by --keep-work again (on an idle machine), replacing the timings")
    parser.add_argument("--warm-from", type=Path, default=None,
                        help="an earlier --keep-work run's work folder (<out>/.work/<stem>): each model starts with "
                             "the tuning databases of that run's other models")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results/<platform>/)")
    parser.add_argument("--stem", default=None, help="results file stem (default <date>-<platform>[-quick])")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    overrides = {"models": tuple(args.models) if args.models else None, "budget": args.budget,
                 "trials_per_iter": args.trials_per_iter, "trials_per_task": args.trials_per_task, "population": args.population, "timing_repeats": args.timing_repeats,
                 "seed": args.seed, "student": str(args.student) if args.student else None,
                 "cost_models": tuple(args.cost_models) if args.cost_models else None,
                 "warm_from": str(args.warm_from) if args.warm_from else None}
    config = SuiteConfig(**{**asdict(base), **{k: v for k, v in overrides.items() if v is not None}})
    stem = args.stem or default_stem(args.quick, config.target)
    args.out = args.out or results_dir(config.target)
    command = " ".join(["-m benchmarks run", *(argv if argv is not None else sys.argv[2:])])
    results = run_suite(config, args.out, stem, command=command.strip(),
                        log=lambda line: print(line, flush=True), keep_work=args.keep_work,
                        retime=args.retime)
    written = report.write_report(results, args.out, stem)
    print("\n".join(str(p) for p in written))
