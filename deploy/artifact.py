"""The artifact manifest and its atomic emit: a reader never sees half an artifact."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# 2: cost_model is the resolved one; cost_model_reason, student. 3: tasks_untuned, warnings.
# 4: threads, fast_math, pack_weights, conv_layout, flush_caches, reference, time_budget, stopped_by, estimated_ms,
#    top_kernels, advice; onnxruntime timed
#    with `threads` threads (its default's latency beside it).
MANIFEST_SCHEMA_VERSION = 4


class TensorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    shape: list[int]
    dtype: str


class Verification(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_abs_err: float
    max_rel_err: float
    atol: float
    rtol: float
    passed: bool


class Latency(BaseModel):
    """Median milliseconds per call, measured in one process on the same inputs, every engine on the same threads."""

    model_config = ConfigDict(frozen=True)

    tvm: float
    untuned: float
    onnxruntime: float | None        # None: onnxruntime cannot run the model (see Manifest.reference)
    onnxruntime_default_threads: float | None = None  # onnxruntime left to its own thread count


class Kernel(BaseModel):
    """One compiled kernel's share of a run of the library (tcl_core.tvm_api.profile_kernels)."""

    model_config = ConfigDict(frozen=True)

    name: str
    ms: float      # per run of the model
    share: float   # of the time spent in kernels


class Manifest(BaseModel):
    """What was tuned, for which target, how fast it runs, and that it matches onnxruntime."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = MANIFEST_SCHEMA_VERSION
    name: str
    sha256: str
    source: str
    artifact_dir: str
    library: str = "model.so"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    target: dict
    platform: str
    tvm_version: str
    cost_model: str                  # what tuned it: "tcl", "xgb" or "random" ("auto" resolved)
    cost_model_reason: str = ""      # why that one (tcl_core.students.choose_cost_model)
    student: dict | None = None      # the TCL student used: platform, sha256, version, source, path
    explore: float | None = None     # share of each measured batch drawn at random (deploy.tune.explore_share)
    trials: int
    trials_measured: int
    runner: dict = {"kind": "local"}  # where candidates were measured: local, or rpc with tracker and device_key
    tasks: int
    tasks_reused: int
    tasks_untuned: int = 0           # tasks with no measured schedule after tuning: they run TVM's default
    tasks_warm_started: int = 0      # tasks whose first batch replayed schedules of similar workloads measured here before
    warnings: list[str] = []         # what limits this result (a budget too small for the tasks), one line each
    tuning_seconds: float
    time_budget: float | None = None  # seconds the search was allowed, on top of `trials`
    tuning_profile: dict[str, float] = {}  # MetaSchedule's profiler: seconds per scope (SendToBuilder, SendToRunner, EvoSearch/...)
    stopped_by: str | None = None    # what ended the search: "trials", "time budget", "converged" or "search"; None: nothing tuned
    threads: int = 1                 # TVM runtime threads the candidates, verification and timing ran on (TVM_NUM_THREADS)
    fast_math: bool = False          # polynomial erf / exp / tanh / softmax in place of libm's
    pack_weights: bool = False       # constant weights pre-packed into the tuned layout at build time
    conv_layout: str = "NCHW"        # layout the 2-D convolutions were tuned and built in
    flush_caches: bool = False       # candidates timed run by run with their weights flushed from the caches
    reference: str = "onnxruntime"  # what the outputs were checked against (deploy.verify.open_reference)
    verification: Verification
    latency_ms: Latency
    estimated_ms: float | None = None  # the tuner's estimate: sum of each task's best measured time x its weight
    top_kernels: list[Kernel] = []   # where a run's time goes, slowest first (three at most)
    advice: str | None = None        # set when onnxruntime is faster: by how much, and where the time goes
    created_at: str


def artifact_name(stem: str, sha256: str) -> str:
    """`resnet` + sha -> `resnet-1a2b3c4d`: the folder an artifact lives in."""
    return f"{stem}-{sha256[:8]}"


def emit(staging_dir: Path, output_dir: Path, manifest: Manifest) -> Path:
    """Write manifest.json into `staging_dir` and rename it to `output_dir/<name>-<sha8>`.

    `staging_dir` must be on the same file system as `output_dir` (see `staging_dir_for`).
    An older artifact of the same name is replaced by renaming it out of the way first. The
    folder ends 0750 and its files 0640: readable by the daemon's group, by no one else.
    """
    final = output_dir / artifact_name(manifest.name, manifest.sha256)
    manifest_path = staging_dir / "manifest.json"
    manifest_path.write_text(manifest.model_dump_json(indent=2) + "\n")
    for path in staging_dir.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(path, 0o640)
    # mkdtemp made the folder 0700; the people who drop models (the daemon's group) read it, others do not.
    os.chmod(staging_dir, 0o750)
    if final.exists():
        old = output_dir / f".{final.name}.old-{os.getpid()}"
        os.rename(final, old)
        os.rename(staging_dir, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging_dir, final)
    _fsync_dir(output_dir)
    return final


def staging_dir_for(output_dir: Path) -> Path:
    """A fresh hidden folder inside `output_dir`, so the final rename is atomic.

    Its name carries our pid; leftovers of processes that are gone (a worker killed mid-build, or
    between `emit`'s two renames, which leaves the replaced artifact as `.<name>.old-<pid>`) are
    removed here, so a stopped job never leaves debris in the output folder for long.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    leftovers = [(path, path.name.split("-")[1]) for path in output_dir.glob(".staging-*-*")]
    leftovers += [(path, path.name.rpartition(".old-")[2]) for path in output_dir.glob(".*.old-*")]
    for leftover, pid in leftovers:
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=output_dir))


def remove_staging_of(output_dir: Path, pid: int) -> None:
    """Remove the staging folders process `pid` left in `output_dir` (it died mid-build)."""
    for leftover in Path(output_dir).glob(f".staging-{pid}-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
