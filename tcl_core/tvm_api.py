"""The one module that touches TVM's moving API (0.27: `tvm.s_tir.meta_schedule`, dict targets).

Everything else in tcl-tuned imports TVM through here, so a TVM upgrade is one file's work.
See ../shared/notes/tvm-0.27.md for why each workaround exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# TVM's runtime sizes its thread pool once per process, from TVM_NUM_THREADS, else from half the
# logical CPUs on x86 (it assumes SMT siblings): one thread on a 2-core machine without SMT
# (notes, item 13). Every core unless the caller said otherwise; a job's LocalRunner worker gets its
# own count (`make_runner`).
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import tvm  # noqa: E402  (after TVM_NUM_THREADS, which the runtime reads once)
import tvm_ffi  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.ir.utils import derived_object  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402

__all__ = [
    "TVM_VERSION", "tvm", "relax", "ms", "derived_object", "from_onnx",
    "make_target", "host_target_dict", "set_threads_for_this_process", "runtime_threads", "runtime_files", "CONV_LAYOUTS", "lower_for_tuning", "extract_tasks",
    "open_database", "count_records", "structural_hash", "estimate_flops", "make_runner", "tracker_summary", "tune_tasks", "measure_records", "measure_candidates",
    "anchor_block", "loop_extents", "design_spaces", "replay_trace", "apply_database", "compile_module", "load_vm", "fast_build", "alloc_like_real_data", "profile_kernels",
    "TuningProgress", "ProgressCallback", "array_items", "array_item", "map_get",
]

TVM_VERSION: str = tvm.__version__


def host_target_dict(num_cores: int | None = None) -> dict[str, Any]:
    """This machine's CPU as a TVM target dict: LLVM with the host's -mcpu, all cores.

    Without `mcpu` LLVM emits generic x86-64 (no AVX), which loses to onnxruntime by a wide margin.
    """
    return {
        "kind": "llvm",
        "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
        "num-cores": num_cores or os.cpu_count() or 1,
    }


def make_target(target: dict[str, Any] | None) -> tvm.target.Target:
    """A Target from a dict (TVM 0.27 rejects the old `"llvm -num-cores 2"` strings).

    For CPU targets this also registers only the CPU tensor intrinsics (see `_cpu_intrinsics_only`).
    """
    made = tvm.target.Target(target or host_target_dict())
    if made.kind.name == "llvm":
        _cpu_intrinsics_only()
    return made


def _cpu_intrinsics_only() -> None:
    """Register the x86 and Arm tensor intrinsics without importing the CUDA ones.

    Every `TuneContext` imports `tvm.s_tir.tensor_intrin`, whose package init always imports the
    CUDA intrinsics: about 30 s per process here (notes, item 5), against 1.5 s for the CPU ones.
    A package stub with the real search path lets Python import the CPU submodules alone. A
    process that already imported the real package (or a GPU target later on) keeps the real one.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    package = types.ModuleType(name, "CPU tensor intrinsics only (registered by tcl_core.tvm_api)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__package__ = name
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    importlib.import_module(f"{name}.x86")
    importlib.import_module(f"{name}.arm_cpu")


def set_threads_for_this_process(threads: int) -> None:
    """Start this process's TVM runtime on `threads` threads; a LocalRunner worker's initializer.

    The runtime reads TVM_NUM_THREADS once, when its pool starts, so this works only in a process
    that has not run a parallel kernel yet (a fresh popen worker).
    """
    os.environ["TVM_NUM_THREADS"] = str(threads)


def runtime_threads() -> int:
    """How many threads this process's TVM runtime runs a parallel kernel on."""
    return int(tvm.get_global_func("runtime.NumThreads")())


def runtime_files() -> dict[str, Path]:
    """What a C++ program needs to load a library with the wheels' runtime alone (no compiler library).

    "libraries": libtvm_runtime.so (the Relax VM; its static initialisers register the VM loader,
    so it must be linked --no-as-needed) and libtvm_ffi.so; "include": tvm_ffi's headers (the tvm
    wheel's runtime headers include files it does not ship).
    """
    import tvm_ffi.libinfo

    return {"libtvm_runtime.so": Path(tvm.__file__).parent / "lib" / "libtvm_runtime.so",
            "libtvm_ffi.so": Path(tvm_ffi.libinfo.find_libtvm_ffi()),
            "include": Path(tvm_ffi.libinfo.find_include_path())}


def _elementwise_max_min_as_ops(mod: tvm.IRModule) -> tvm.IRModule:
    """Calls of TOPI's maximum / minimum kernels (how the ONNX importer emits Clip) as Relax's operators.

    The importer's TIR calls carry no layout, so converting MobileNetV2's convolutions to NHWC wrapped
    every ReLU6 in a transpose pair (notes, item 16); Relax's binary operators follow their
    operand's layout. A kernel counts when it is a single T_maximum / T_minimum block.
    """
    call_tir = tvm.ir.Op.get("relax.call_tir")
    kinds = {}
    for var, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            script = func.script()
            if script.count('T.sblock("') - script.count('T.sblock("root")') != 1:
                continue
            for kind in ("maximum", "minimum"):
                if f'T.sblock("T_{kind}")' in script:
                    kinds[var.name_hint] = kind

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op.same_as(call_tir) and getattr(call.args[0], "name_hint", None) in kinds:
                operands = call.args[1].fields
                if len(operands) == 2:
                    make = relax.op.maximum if kinds[call.args[0].name_hint] == "maximum" else relax.op.minimum
                    return make(*operands)
            return call

    rewrite = Rewrite(mod)
    for var, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewrite.builder_.update_func(var, rewrite.visit_expr(func))
    return relax.transform.DeadCodeElimination()(rewrite.builder_.get())


# Convolution layouts `lower_for_tuning` can convert to: data layout, kernel layout for ConvertLayout.
CONV_LAYOUTS = {"NCHW": None, "NHWC": ["NHWC", "OHWI"]}


def lower_for_tuning(
    mod: tvm.IRModule, target: tvm.target.Target, *, fast_math: bool = False, pack_weights: bool = False,
    conv_layout: str = "NCHW",
) -> tvm.IRModule:
    """Legalise a freshly imported module to TIR so MetaSchedule finds tasks in it.

    `extract_tasks` on the module straight from `from_onnx` finds nothing; this is what
    `relax.pipeline.static_shape_tuning_pipeline` does before tuning. The options change the
    workloads, so they must be the same when tuning and when building (notes, items 14-16):
    `fast_math` swaps erf / exp / tanh / softmax for TVM's polynomial versions (vectorisable; libm's
    erff is a scalar call); `pack_weights` marks constant operands layout-free, so MetaSchedule's
    RewriteLayout tunes a packed weight layout that `apply_database` then folds into the constants;
    `conv_layout` "NHWC" converts 2-D convolutions (channels last, OHWI weights).
    """
    before = []
    if fast_math:
        before.append(relax.transform.FastMathTransform())
    if CONV_LAYOUTS[conv_layout] is not None:
        mod = _elementwise_max_min_as_ops(mod)
        before += [relax.transform.ConvertLayout({"relax.nn.conv2d": CONV_LAYOUTS[conv_layout]}),
                   relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination()]
    with target:
        lowered = tvm.transform.Sequential(
            [
                *before,
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.get_pipeline("zero"),
            ]
        )(mod)
    if pack_weights:
        lowered = relax.transform.AttachAttrLayoutFreeBuffers()(lowered)
    return lowered


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> list:
    """The distinct TIR workloads of `mod`, each with its weight (how often it occurs)."""
    return list(ms.relax_integration.extract_tasks(mod, target))


def count_records(database: ms.Database, task_mod: tvm.IRModule, at_most: int = 1 << 20) -> int:
    """How many measured records `database` holds for this task's workload (up to `at_most`)."""
    if not database.has_workload(task_mod):
        return 0
    return len(database.get_top_k(database.commit_workload(task_mod), at_most))


def structural_hash(mod: tvm.IRModule) -> int:
    """The hash MetaSchedule uses to tell workloads apart (moved to tvm_ffi in 0.27)."""
    return int(tvm_ffi.structural_hash(mod))


# Raw container access for the per-candidate feature loop (tcl_core.features). tvm_ffi's Python
# Array and Map wrappers put a bounds check, a length call and, for a slice, a Python list around
# every FFI call; that wrapping measured about a third of trace_features' time.
_array_size = tvm_ffi._ffi_api.ArraySize
_array_item = tvm_ffi._ffi_api.ArrayGetItem
_map_get_or_missing = tvm_ffi._ffi_api.MapGetItemOrMissing
_MISSING = tvm_ffi.core.MISSING


def array_items(array: Any, at_most: int | None = None) -> list:
    """The first `at_most` (None: all) elements of a tvm_ffi Array, as a list."""
    size = _array_size(array)
    return [_array_item(array, i) for i in range(size if at_most is None else min(size, at_most))]


def array_item(array: Any, index: int) -> Any:
    """array[index] without the wrapper's checks; None when index is past the end (index >= 0)."""
    return _array_item(array, index) if index < _array_size(array) else None


def map_get(mapping: Any, key: Any) -> Any:
    """mapping.get(key) for a tvm_ffi Map: the value, or None when the key is absent."""
    value = _map_get_or_missing(mapping, key)
    return None if _MISSING.same_as(value) else value


def estimate_flops(mod: tvm.IRModule) -> float:
    """Floating-point operations of one run of a task's TIR (TVM's static estimate; 0 for pure data movement)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(mod))


def open_database(work_dir: Path) -> ms.Database:
    """The JSON tuning database in `work_dir` (created if missing)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def fast_build(mod: tvm.IRModule, target: tvm.target.Target, _params: Any = None) -> Any:
    """LocalBuilder's build step without `import tvm.s_tir.tensor_intrin`.

    That import takes ~40 s, longer than LocalBuilder's timeout, so the default build function
    fails every candidate on a fresh worker. Nothing we tune on CPU needs the intrinsics.
    """
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.driver.build(mod, target=target)


@dataclass(frozen=True)
class TuningProgress:
    """What the search has done so far, reported after every measured batch."""

    trials: int  # candidates measured in this run
    # sum over the run's tasks of weight x best mean time measured in this run, in ms; None until
    # every task has one candidate that built and ran
    best_estimate_ms: float | None
    extra_trials: int = 0  # of `trials`, those measured on top of the trial budget (before the search)


ProgressCallback = Callable[[TuningProgress], None]


def alloc_like_real_data(device: Any, args_info: list, alloc_repeat: int) -> list[list[Any]]:
    """LocalRunner's argument allocation with inputs drawn like real data (runs in the runner's worker).

    MetaSchedule fills every argument from U[1, 10); real activations look more like N(0, 1), on
    which erf- and exp-heavy kernels take other branches and cost 2-3x more (notes, item 17). Floats
    are standard normal, integers and bools 0 or 1 (safe as indices), as deploy.verify draws them.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    repeated = []
    for _ in range(alloc_repeat):
        args = []
        for kind, dtype, shape in args_info:
            if kind != "TENSOR":
                raise NotImplementedError(f"argument kind {kind!r}")
            if np.dtype(dtype).kind == "f":
                values = rng.standard_normal(shape).astype(dtype)
            else:
                values = rng.integers(0, 2, size=shape).astype(dtype)
            args.append(tvm.runtime.tensor(values, device))
        repeated.append(args)
    return repeated


def make_runner(rpc: dict[str, Any] | None, threads: int | None = None, *, flush_caches: bool = False) -> ms.runner.Runner:
    """This machine's LocalRunner, or an RPCRunner on a tuning farm.

    `flush_caches`: time each candidate run by run, with every argument but the first (the weights
    and the output; the input stays, as the kernel before it just wrote it) flushed from the CPU
    caches before each run, as in a run of a whole model whose weights outgrow L2; otherwise
    MetaSchedule's default: runs back to back for at least 100 ms, everything hot.

    The local runner's worker runs candidates on `threads` threads (None: this process's
    TVM_NUM_THREADS) and draws inputs like real data (`alloc_like_real_data`). Only the worker's
    count is set: TVM_NUM_THREADS below the core count in the tuning process itself slowed
    MetaSchedule's search 4-15x here (notes). `rpc`: tracker_host, tracker_port, device_key,
    session_timeout_seconds, parallelism (the fields of deploy.options.RunnerOptions). A device that
    dies or times out fails only the candidate it was measuring; the tracker hands the next one to
    another device.
    """
    evaluator = (ms.runner.EvaluatorConfig(number=1, repeat=10, min_repeat_ms=0, enable_cpu_cache_flush=True)
                 if flush_caches else ms.runner.EvaluatorConfig())
    if rpc is None:
        import functools

        initializer = functools.partial(set_threads_for_this_process, threads) if threads else None
        return ms.runner.LocalRunner(f_alloc_argument=alloc_like_real_data, initializer=initializer,
                                     evaluator_config=evaluator)
    config = ms.runner.RPCConfig(
        tracker_host=rpc["tracker_host"], tracker_port=int(rpc["tracker_port"]), tracker_key=rpc["device_key"],
        session_timeout_sec=int(rpc["session_timeout_seconds"]),
    )
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=int(rpc["parallelism"]))


def tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's view: {"queue_info": {key: {"free": n, "pending": n}}, "server_info": [...]}.

    Raises OSError (or TVM's error) when the tracker cannot be reached.
    """
    from tvm import rpc

    return dict(rpc.connect_tracker(host, int(port)).summary())


@derived_object
class _CountMeasured(ms.measure_callback.PyMeasureCallback):
    """Reports measured candidates and the best estimate so far after every batch; ends the run early.

    MetaSchedule has no time limit and no convergence test. Past `deadline` (time.monotonic()),
    or after `patience` batches in a row that improved no task's best time by 1% or more, every
    task with no batch in flight is terminated, and each task still in flight when its batch comes
    back, so the scheduler runs out of tasks and returns with everything measured so far.
    """

    def __init__(self, on_measured: ProgressCallback, deadline: float | None = None,
                 patience: int | None = None) -> None:
        super().__init__()
        self.on_measured = on_measured
        self.deadline = deadline
        self.patience = patience
        self.count = 0
        self.out_of_time = False
        self.converged = False
        self._best: dict[int, float] = {}
        self._weights: list[float] | None = None  # each task's weight in the model, read at the first batch
        self._fastest: dict[int, float] = {}  # exact best per task, for the estimate (`_best` moves in 1% steps)
        self._without_gain = 0

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        import time

        self.count += len(runner_results)
        seconds = [sum(float(s) for s in r.run_secs) / len(r.run_secs) for r in runner_results
                   if r.error_msg is None and r.run_secs]
        if seconds:
            self._fastest[task_id] = min(min(seconds), self._fastest.get(task_id, float("inf")))
        self.on_measured(TuningProgress(self.count, self._estimate_ms(task_scheduler)))
        if seconds and min(seconds) < 0.99 * self._best.get(task_id, float("inf")):
            self._best[task_id] = min(seconds)
            self._without_gain = 0
        else:
            self._without_gain += 1
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.out_of_time = True
        elif self.patience is not None and self._without_gain >= self.patience:
            self.converged = True
        if self.out_of_time or self.converged:
            for index, record in enumerate(task_scheduler.tasks_):
                # the task just joined is cleaned up after its callbacks; others in flight come back later
                if not record.is_terminated and (index == task_id or record.measure_candidates is None):
                    task_scheduler.terminate_task(index)

    def _estimate_ms(self, task_scheduler) -> float | None:
        """Weight x fastest mean time over the run's tasks, in ms; None while a task has none."""
        if self._weights is None:
            self._weights = [float(record.task_weight) for record in task_scheduler.tasks_]
        if len(self._fastest) < len(self._weights):
            return None
        return 1e3 * sum(weight * self._fastest[index] for index, weight in enumerate(self._weights))


def tune_tasks(
    *,
    tasks: list,
    target: tvm.target.Target,
    database: ms.Database,
    work_dir: Path,
    cost_model: ms.CostModel,
    strategy: ms.search_strategy.SearchStrategy,
    max_trials_global: int,
    max_trials_per_task: int,
    num_trials_per_iter: int,
    seed: int,
    on_measured: ProgressCallback,
    rpc: dict[str, Any] | None = None,
    threads: int | None = None,
    flush_caches: bool = False,
    seconds: float | None = None,
    patience_rounds: int | None = None,
) -> tuple[int, str | None, dict[str, float]]:
    """Tune `tasks` with MetaSchedule into `database`; returns (candidates measured, why it stopped early, profile).

    `cost_model` and `strategy` come from the caller (tcl_core.tuning names and assembles them).
    `rpc` measures on a tuning farm (`make_runner`); builds stay on this machine. `seconds`: a
    time limit on top of the trial budget; `patience_rounds`: stop once that many rounds per task
    in a row improved no task by 1%. Both are checked after every measured batch; the early stop
    is "time budget", "converged" or None. Also returns MetaSchedule's profile of the run: seconds
    per scope ("SendToBuilder", "SendToRunner", "JoinRunnerFutures", "EvoSearch", ...).
    """
    import time

    _reset_meta_schedule_logging()
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted_tasks=tasks,
        work_dir=str(work_dir),
        strategy=strategy,
        seed=seed,
    )
    counter = _CountMeasured(on_measured, None if seconds is None else time.monotonic() + seconds,
                             None if patience_rounds is None else patience_rounds * len(tasks))
    profiler = ms.Profiler()
    with profiler:
        ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=str(work_dir),
            max_trials_global=max_trials_global,
            max_trials_per_task=max_trials_per_task,
            num_trials_per_iter=num_trials_per_iter,
            builder=ms.builder.LocalBuilder(f_build=fast_build),
            runner=make_runner(rpc, threads, flush_caches=flush_caches),
            database=database,
            cost_model=cost_model,
            measure_callbacks=[*ms.MeasureCallback.create("default"), counter],
        )
    stopped = "time budget" if counter.out_of_time else "converged" if counter.converged else None
    return counter.count, stopped, {name: round(float(s), 2) for name, s in dict(profiler.get()).items()}


def measure_records(
    records: list, workload_mod: tvm.IRModule, *, target: tvm.target.Target, database: ms.Database,
    rpc: dict[str, Any] | None = None, threads: int | None = None,
) -> list[float | None]:
    """Build and run stored candidates (TuningRecords, any platform's) for `target`; commit them here.

    Each record's trace is replayed onto `workload_mod` (`as_measure_candidate`), then measured and
    committed as `measure_candidates` does.
    """
    return measure_candidates([record.as_measure_candidate() for record in records], [workload_mod] * len(records),
                              target=target, database=database, rpc=rpc, threads=threads)


def measure_candidates(
    candidates: list, workload_mods: list, *, target: tvm.target.Target, database: ms.Database,
    rpc: dict[str, Any] | None = None, threads: int | None = None,
) -> list[float | None]:
    """Build and time MeasureCandidates outside a tuning loop, each of its workload; commit them to `database`.

    All are built in one batch with `fast_build` and timed in one batch by `make_runner(rpc,
    threads)` (each batch starts its worker processes once); every candidate is committed as a
    TuningRecord of its workload for `target`, a failed build or run with MetaSchedule's 1e10 s,
    as its tuning loop does. Returns each one's mean seconds (None where it failed), in order. The
    build artifacts are removed.
    """
    import shutil

    builder = ms.builder.LocalBuilder(f_build=fast_build)
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    runnable = [i for i, result in enumerate(built) if result.error_msg is None]
    device_type = {"llvm": "cpu"}.get(target.kind.name, target.kind.name)  # tvm_ffi knows no "llvm" device
    futures = make_runner(rpc, threads).run([
        ms.runner.RunnerInput(built[i].artifact_path, device_type=device_type,
                              args_info=candidates[i].args_info) for i in runnable])
    run_secs: list[list[float] | None] = [None] * len(candidates)
    for i, future in zip(runnable, futures):
        result = future.result()
        if result.error_msg is None and result.run_secs:
            run_secs[i] = [float(s) for s in result.run_secs]
    for candidate, workload_mod, seconds in zip(candidates, workload_mods, run_secs):
        database.commit_tuning_record(ms.database.TuningRecord(
            candidate.sch.trace, database.commit_workload(workload_mod), seconds if seconds is not None else [1e10],
            target, candidate.args_info))
    for result in built:
        if result.artifact_path is not None:
            shutil.rmtree(Path(result.artifact_path).parent, ignore_errors=True)
    return [None if s is None else sum(s) / len(s) for s in run_secs]


def anchor_block(mod: tvm.IRModule) -> str | None:
    """The name of a task's anchor block (its main reduction, MetaSchedule's choice), or None."""
    from tvm.s_tir.analysis import find_anchor_sblock

    block = find_anchor_sblock(mod)
    return None if block is None else str(block.name_hint)


def loop_extents(mod: tvm.IRModule, block: str) -> list[int] | None:
    """The extents of the loops around `block` in the unscheduled `mod` (0 for a dynamic one); None without it."""
    from tvm.s_tir import Schedule

    schedule = Schedule(mod)
    try:
        loops = schedule.get_loops(schedule.get_sblock(block))
    except (tvm.TVMError, ValueError, RuntimeError):
        return None
    return [int(extent) if isinstance(extent := schedule.get(loop).extent, tvm.tirx.IntImm) else 0 for loop in loops]


def design_spaces(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[list, list]:
    """A task's design-space sketches (Traces whose random decisions are still open) and the postprocessors
    its search applies, from MetaSchedule's default space generator for `target`, as tuning builds them."""
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="replay")
    return [space.trace for space in context.generate_design_space()], list(context.space_generator.postprocs)


def _fit_tile(decision: list[int], extent: int) -> list[int]:
    """A perfect tiling of `extent` as close to `decision` (a tiling of another extent) as divisibility allows.

    From the innermost factor out, each keeps what it shares with what is left (the vector width
    and the cache-sized inner tiles survive where they divide); the outermost takes the rest.
    """
    import math

    left, fitted = extent, []
    for factor in reversed(decision[1:]):
        kept = math.gcd(left, int(factor))
        fitted.append(kept)
        left //= kept
    return [left, *reversed(fitted)]


def _refit_tiles(trace: Any, mod: tvm.IRModule) -> Any:
    """`trace` with every tile-size decision refitted to `mod`'s loop extents.

    A SamplePerfectTile splits the i-th loop a GetLoops returned for a block the trace fetched by
    name; the same block of `mod` gives that loop's new extent. Decisions on other loops are kept.
    """
    block_of: dict[Any, str] = {}        # block RV -> name
    loop_of: dict[Any, tuple[str, int]] = {}  # loop RV -> (block name, position)
    extents: dict[str, list[int] | None] = {}
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "GetSBlock":
            block_of[inst.outputs[0]] = str(inst.attrs[0])
        elif kind == "GetLoops" and inst.inputs[0] in block_of:
            for position, loop in enumerate(inst.outputs):
                loop_of[loop] = (block_of[inst.inputs[0]], position)
        elif kind == "SamplePerfectTile" and inst.inputs[0] in loop_of:
            name, position = loop_of[inst.inputs[0]]
            if name not in extents:
                extents[name] = loop_extents(mod, name)
            new = extents[name]
            decision = trace.decisions.get(inst)
            if new is not None and position < len(new) and new[position] > 0 and decision is not None:
                trace = trace.with_decision(inst, _fit_tile([int(f) for f in decision], new[position]),
                                            remove_postproc=True)
    return trace


_SAMPLING = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")


def _sampling(trace: Any) -> list:
    """The trace's random-decision instructions, in order, up to its postprocessing."""
    found = []
    for inst in trace.insts:
        if inst.kind.name == "EnterPostproc":
            break
        if inst.kind.name in _SAMPLING:
            found.append(inst)
    return found


def _signature(insts: list) -> tuple:
    """What must agree for decisions to carry over: each sampling step's kind and, for a tiling, its depth."""
    return tuple((inst.kind.name, int(inst.attrs[0]) if inst.kind.name == "SamplePerfectTile" else None) for inst in insts)


def replay_trace(trace: Any, mod: tvm.IRModule, spaces: list, postprocs: list) -> list:
    """`trace` (another workload's measured schedule) carried over to `mod`: MeasureCandidates to measure.

    Its random decisions (tile sizes, unrolling, compute locations) are written into each of `mod`'s
    own design-space sketches (`design_spaces`) whose sampling steps agree with the trace's, tile
    sizes refitted to `mod`'s loop extents (`_fit_tile`); the result is applied and postprocessed
    as MetaSchedule's search does. So every candidate is a point of `mod`'s own design space, one
    the search's mutators can work on, with the choices that were fast on the similar workload.
    Sketches where a decision no longer applies are left out; [] when none fits.
    """
    from tvm.s_tir import Schedule

    source = _sampling(trace)
    decisions = [trace.decisions.get(inst) for inst in source]
    candidates = []
    for space in spaces:
        steps = _sampling(space)
        if _signature(steps) != _signature(source):
            continue
        carried = space
        for step, decision in zip(steps, decisions):
            if decision is not None:
                carried = carried.with_decision(step, decision, remove_postproc=True)
        schedule = Schedule(mod, debug_mask="none")
        try:
            _refit_tiles(carried, mod).apply_to_schedule(schedule, remove_postproc=True)
            schedule.enter_postproc()
            if not all(postproc.apply(schedule) for postproc in postprocs):
                continue
        except (tvm.TVMError, ValueError, TypeError, IndexError, KeyError, AttributeError, RuntimeError):
            continue
        candidates.append(ms.MeasureCandidate(schedule, ms.arg_info.ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)))
    return candidates


def _reset_meta_schedule_logging() -> None:
    """Quiet MetaSchedule's console and drop the previous run's handlers.

    Its console handler takes the package logger's level, so WARNING keeps the per-round tables in
    the log file only. Handlers left by an earlier run in this process hold the old log file open
    and make TVM's logging setup fail on the second run (a nameless handler in its config).
    """
    package_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(package_logger.handlers):
        package_logger.removeHandler(handler)
        handler.close()
    package_logger.setLevel(logging.WARNING)


def apply_database(mod: tvm.IRModule, target: tvm.target.Target, database: ms.Database) -> tvm.IRModule:
    """Replace each TIR function by the best schedule `database` holds for it.

    Where a schedule packs a weight (a module lowered with `pack_weights`), its layout transform is
    split into its own function and folded into the constant here, so the library does no layout
    work on weights at run time.
    """
    with target, database:
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    with target:
        return tvm.transform.Sequential([
            relax.transform.SplitLayoutRewritePreproc(),
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),
        ])(mod)


def compile_module(mod: tvm.IRModule, target: tvm.target.Target, path: Path) -> Path:
    """Compile a lowered module (weights bound as constants) and export it as one shared library."""
    executable = relax.build(mod, target=target)
    executable.export_library(str(path))
    return path


def profile_kernels(path: Path, arrays: list, *, min_seconds: float = 0.02) -> list[tuple[str, float]]:
    """Milliseconds per model run spent in each compiled kernel of the library at `path`, slowest first.

    The Relax VM calls an instrument before every call it makes; it keeps each kernel's function
    and arguments from one run of `main`, then each kernel is timed alone, called back to back
    for at least `min_seconds` (timing inside the instrument measured thread-pool wake-ups, not
    kernels). Caches are as warm as in a run of the whole model or warmer. VM builtins (allocation,
    shape checks) are left out. `arrays`: numpy inputs of main.
    """
    import time

    vm = load_vm(path)
    inputs = [tvm.runtime.tensor(array) for array in arrays]
    calls: list[tuple[str, Any, tuple]] = []

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run and not symbol.startswith(("vm.", "relax.")):
            calls.append((symbol, func, args))
        return 0  # VMInstrumentReturnKind.kNoOp

    vm["main"](*inputs)  # lazy initialisation outside the instrument
    vm.set_instrument(tvm_ffi.convert(instrument))
    vm["main"](*inputs)
    vm.set_instrument(None)
    totals: dict[str, float] = {}
    for symbol, func, args in calls:
        func(*args)
        number, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < min_seconds:
            func(*args)
            number += 1
        totals[symbol] = totals.get(symbol, 0.0) + elapsed / number
    return sorted(((name, seconds * 1e3) for name, seconds in totals.items()), key=lambda item: -item[1])


def load_vm(path: Path) -> relax.VirtualMachine:
    """Load an exported library the way a deployment does: TVM runtime only."""
    return relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
