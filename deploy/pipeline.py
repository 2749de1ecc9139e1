"""One model's data path, top to bottom: intake -> tasks -> tuning -> build -> verify -> artifact."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deploy import intake, verify
from deploy.artifact import Kernel, Latency, Manifest, TensorInfo, artifact_name, emit, staging_dir_for
from deploy.build import build_library
from deploy.errors import PipelineError, VerificationError
from deploy.farm import check_farm
from deploy.options import Progress, TuningOptions
from deploy.progress import TuningMeter
from deploy.layout import database_dir, records_key
from deploy.tune import TuningResult, budget_shortfall, estimate_ms, explore_share, plan_tuning, tune_module
from tcl_core import tvm_api
from tcl_core.warm_start import WarmStartConfig
from tcl_core.platform import platform_name
from tcl_core.students import choose_cost_model

ProgressFn = Callable[[Progress], None]


def run_pipeline(
    model_path: Path,
    *,
    output_dir: Path,
    state_dir: Path,
    options: TuningOptions,
    on_progress: ProgressFn = lambda progress: None,
) -> Manifest:
    """Turn `model_path` into `<output_dir>/<stem>-<sha8>/` (model.so + manifest.json).

    Raises `deploy.errors.PipelineError` (or a subclass) with a one-line reason when the model
    cannot be imported, tuned, built or verified; nothing is written to `output_dir` then.
    The sidecar's `trials`, `target` and `runner` override `options`.
    """
    spec = intake.load_model(Path(model_path), limits=options.limits)
    requested = spec.sidecar.trials if spec.sidecar.trials is not None else options.trials
    trials = requested or 0  # None is sized once the tasks are known
    target_dict = spec.sidecar.target or options.target or tvm_api.host_target_dict()
    name = artifact_name(spec.name, spec.sha256)
    on_progress(Progress(stage="tuning", trials_done=0, trials_total=trials))

    runner = spec.sidecar.runner or options.runner
    target = _guard("TVM rejected the target", lambda: tvm_api.make_target(target_dict))
    platform = platform_name(target_dict, tvm_api.TVM_VERSION, runner.device_key if runner.kind == "rpc" else None)
    if runner.kind == "rpc" and requested != 0:
        check_farm(runner)
    # Candidates, verification and timing all run on the threads the library will deploy with: the
    # runner's worker is started on them; this process's TVM runs TVM_NUM_THREADS (default: all cores).
    threads = options.threads or int(target_dict.get("num-cores") or os.cpu_count() or 1)
    lowered, options, layout_note = _import(spec, target, options)
    key = records_key(platform, threads, target_dict.get("num-cores"), flush_caches=options.flush_caches)
    database = tvm_api.open_database(database_dir(Path(state_dir), key))
    try:
        choice = choose_cost_model(options.cost_model, platform, state_dir=Path(state_dir), student_path=options.student)
    except (OSError, ValueError) as err:
        raise PipelineError(f"cost model: {err}") from err
    explore = explore_share(options.explore, choice.name)
    plan = _guard("TVM could not extract the tuning tasks", lambda: plan_tuning(
        lowered, target, database=database, trials_per_iter=options.trials_per_iter))
    if requested is None:
        trials = options.rounds_per_task * options.trials_per_iter * len(plan.fresh)
        on_progress(Progress(stage="tuning", trials_done=0, trials_total=trials))
    shortfall = budget_shortfall(len(plan.fresh), trials, options.trials_per_iter)
    if shortfall:
        on_progress(Progress(stage="tuning", trials_done=0, trials_total=trials, warning=shortfall))
    meter = TuningMeter(trials_total=trials, time_budget=options.time_budget, reused_ms=estimate_ms(plan.reused, database))
    tuning = _guard("tuning failed", lambda: tune_module(
        plan, target, database=database, log_dir=Path(state_dir) / "logs" / name, trials=trials,
        cost_model=choice.name, trials_per_iter=options.trials_per_iter,
        population=options.population, seed=options.seed,
        on_measured=lambda measured: on_progress(meter.report(measured)),
        student_path=choice.student.path if choice.student else None,
        rdu_fraction=options.rdu_fraction,
        explore=explore,
        rpc=runner.model_dump() if runner.kind == "rpc" else None,
        threads=threads,
        flush_caches=options.flush_caches,
        time_budget=options.time_budget,
        patience_rounds=options.patience_rounds,
        # the student ranks schedules it never saw timed; XGBoost starts untrained and runs as TVM's users run it
        warm=WarmStartConfig(candidates=options.warm_start) if options.warm_start and choice.name == "tcl" else None,
    ))

    on_progress(meter.after("building", tuning.trials_measured))
    staging = staging_dir_for(Path(output_dir))
    try:
        with tempfile.TemporaryDirectory(prefix="tcl-tuned-untuned-") as scratch:
            library = _guard("build failed", lambda: build_library(lowered, target, staging / "model.so", database=database))
            untuned = _guard("untuned build failed", lambda: build_library(lowered, target, Path(scratch) / "untuned.so"))
            on_progress(meter.after("verifying", tuning.trials_measured))
            threads_here = tvm_api.runtime_threads()  # what the library is timed on here; onnxruntime gets as many
            verification, outputs, latency, kernels, reference = _guard("verification failed", lambda: _verify_and_time(
                spec, library, untuned, options, threads_here))
        warnings = _warnings(tuning, trials, threads, threads_here) + ([layout_note] if layout_note else [])
        if reference.why:
            warnings.append(f"verified against {reference.name}: {reference.why}")
        manifest = Manifest(
            name=spec.name, sha256=spec.sha256, source=str(spec.path), artifact_dir=str(Path(output_dir) / name),
            inputs=list(spec.inputs), outputs=outputs, target=target_dict, platform=platform,
            tvm_version=tvm_api.TVM_VERSION, cost_model=choice.name, cost_model_reason=choice.reason,
            student=choice.student.describe() if choice.student else None, explore=explore, trials=trials,
            trials_measured=tuning.trials_measured, tasks=tuning.tasks, tasks_reused=tuning.tasks_reused,
            tasks_untuned=tuning.tasks_untuned, tasks_warm_started=tuning.tasks_warm_started, warnings=warnings, reference=reference.name,
            time_budget=options.time_budget, stopped_by=_stopped_by(tuning, trials), tuning_profile=tuning.profile or {},
            runner=runner.describe(),
            tuning_seconds=round(tuning.seconds, 3), threads=threads, fast_math=options.fast_math,
            pack_weights=options.pack_weights, conv_layout=options.conv_layout, flush_caches=options.flush_caches,
            verification=verification, latency_ms=latency, estimated_ms=_round(estimate_ms(plan.tasks, database)),
            top_kernels=kernels, advice=advice(latency, kernels, threads_here),
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        )
        emit(staging, Path(output_dir), manifest)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after a successful emit


def import_and_lower(model, target, options: TuningOptions, *, shape_dict=None, dtype_dict="float32"):
    """The ONNX model as the tasks that get tuned, under the options that change them (fast math, packing, layout)."""
    return tvm_api.lower_for_tuning(tvm_api.from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict), target,
                                    **options.lowering)


def _stopped_by(tuning: TuningResult, trials: int) -> str | None:
    """What ended the search: "trials", "time budget", "converged" (rounds without a gain), or "search"
    (no task had new candidates); None: nothing was tuned."""
    if tuning.stopped_early:
        return tuning.stopped_early
    if tuning.trials_measured == 0:
        return None
    return "trials" if tuning.trials_measured >= trials else "search"


def _warnings(tuning: TuningResult, trials: int, threads: int, threads_here: int) -> list[str]:
    """What the manifest's reader should know: tasks the budget left untuned, timings on other threads."""
    warnings = []
    if trials > 0 and tuning.tasks_untuned:
        why = ("the time budget ran out before the search reached them" if tuning.stopped_early == "time budget"
               else f"the {trials} trials ran out before the search reached them" if tuning.trials_measured >= trials
               else "none of their candidates built and ran")
        warnings.append(f"{tuning.tasks_untuned} of {tuning.tasks} tasks run TVM's default schedule, untuned: {why}")
    if threads_here != threads:
        warnings.append(f"candidates were measured on {threads} threads, but this process's TVM runtime runs "
                        f"{threads_here} (TVM_NUM_THREADS), so the latencies are for {threads_here} threads")
    return warnings


def advice(latency: Latency, kernels: list[Kernel], threads: int) -> str | None:
    """One line for the user when onnxruntime is faster: by how much, and the kernels that take the time."""
    if latency.onnxruntime is None or latency.tvm <= latency.onnxruntime:
        return None
    where = ", ".join(f"{k.name} {k.ms:.3g} ms ({k.share:.0%})" for k in kernels)
    return (f"onnxruntime is {latency.tvm / latency.onnxruntime:.2f}x faster than this library "
            f"({latency.onnxruntime:.4g} vs {latency.tvm:.4g} ms, {threads} threads each)"
            + (f"; most time in {where}" if where else "")
            + "; more trials, or onnxruntime for this model")


def _import(spec: intake.ModelSpec, target, options: TuningOptions):
    """(lowered module, the options it was lowered with, a warning or None), or a one-line PipelineError.

    Ops TVM's frontend lacks are named with where they occur. A model whose layout conversion TVM
    refuses (ConvertLayout on some elementwise max/min: "Invalid SLayout") is lowered in NCHW instead,
    with a warning, rather than failed.
    """
    def lower(chosen: TuningOptions):
        return import_and_lower(spec.model, target, chosen, shape_dict=spec.shape_dict, dtype_dict=spec.dtype_dict)

    try:
        return lower(options), options, None
    except Exception as err:
        message = str(err)
        if "not supported for frontend ONNX" in message:
            ops = {op.strip() for op in message.rsplit(":", 1)[-1].strip().splitlines()[0].split(",")}
            raise PipelineError(f"TVM's ONNX importer lacks {', '.join(sorted(ops))}: "
                                f"{intake.describe_nodes(spec.model, ops)}") from err
        if options.conv_layout != "NCHW":
            fallback = options.model_copy(update={"conv_layout": "NCHW"})
            try:
                lowered = lower(fallback)
            except Exception:
                raise _pipeline_error("TVM could not import the model", err) from err
            return lowered, fallback, (f"built in NCHW: TVM could not convert this model to "
                                       f"{options.conv_layout} ({_pipeline_error('', err).args[0][2:]})")
        raise _pipeline_error("TVM could not import the model", err) from err


def _round(value: float | None) -> float | None:
    """4 significant digits: a tiny model's kernels take well under a microsecond."""
    return None if value is None else float(f"{value:.4g}")


def _verify_and_time(spec: intake.ModelSpec, library: Path, untuned: Path, options: TuningOptions, threads: int):
    """Outputs of the exported library against the reference, the latencies, the top kernels, the reference.

    The reference is onnxruntime, unless it cannot run the model (verify.open_reference). onnxruntime
    runs on `threads` intra-op threads, as TVM does (TVM_NUM_THREADS); its default (one per
    physical core) is timed beside it. Where onnxruntime cannot run the model at all, its
    latencies are None.
    """
    arrays = verify.random_inputs(spec.inputs, options.seed)
    reference = verify.open_reference(spec.model, spec.inputs, arrays, threads)
    run_tvm = verify.tvm_call(tvm_api.load_vm(library), arrays)
    expected = reference.call()
    actual = verify.to_numpy(run_tvm())
    verification = verify.compare(actual, expected, atol=options.atol, rtol=options.rtol)
    if not verification.passed:
        raise VerificationError(
            f"outputs differ from {reference.name}: max_abs_err={verification.max_abs_err:.3g}, "
            f"max_rel_err={verification.max_rel_err:.3g} (atol={options.atol}, rtol={options.rtol})"
        )
    outputs = [TensorInfo(name=name, shape=list(np.shape(array)), dtype=str(np.asarray(array).dtype))
               for name, array in zip(spec.output_names, expected)]
    run_untuned = verify.tvm_call(tvm_api.load_vm(untuned), arrays)
    ort_ms = ort_default_ms = None
    if reference.onnxruntime_model is not None:
        ort_ms = round(verify.median_ms(reference.call, options.timing_repeats), 4)
        run_ort_default = verify.onnxruntime_call(verify.onnxruntime_session(reference.onnxruntime_model),
                                                  spec.inputs, arrays)
        ort_default_ms = round(verify.median_ms(run_ort_default, options.timing_repeats), 4)
    latency = Latency(
        tvm=round(verify.median_ms(run_tvm, options.timing_repeats), 4),
        untuned=round(verify.median_ms(run_untuned, options.timing_repeats), 4),
        onnxruntime=ort_ms,
        onnxruntime_default_threads=ort_default_ms,
    )
    profile = tvm_api.profile_kernels(library, arrays)
    in_kernels = sum(ms for _, ms in profile) or 1.0
    kernels = [Kernel(name=name, ms=_round(ms), share=round(ms / in_kernels, 3)) for name, ms in profile[:3]]
    return verification, outputs, latency, kernels, reference


def _guard(what: str, step: Callable):
    """Run one TVM step; its exception becomes a PipelineError with a one-line reason."""
    try:
        return step()
    except PipelineError:
        raise
    except Exception as err:
        raise _pipeline_error(what, err) from err


def _pipeline_error(what: str, err: Exception) -> PipelineError:
    # TVM's messages end with the useful line; tracebacks come first.
    return PipelineError(f"{what}: {type(err).__name__}: {intake.error_line(err, last=True)}")
