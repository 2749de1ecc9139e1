"""Stand-ins for deploy.pipeline.run_pipeline, run in the worker's child process.

`fake_pipeline` picks a behaviour from the model's file stem, so one injected function lets a
daemon test mix good, failing, crashing and hanging jobs:
  segfault*  -> SIGSEGV          exit*  -> os._exit(3)        hang*  -> report, then wait forever
  pipeerr*   -> PipelineError    valueerr* -> ValueError      anything else -> a fake success
  wait*      -> report, then succeed once `<state_dir>/release` exists
  short*     -> warn that the trials cannot reach every task; once released, succeed with one untuned
`always_succeed` ignores the name (a restarted daemon finishing what a `hang` job left);
`count_runs` succeeds and logs each run, to prove nothing is processed twice.
`full_disk_pipeline` and `kill_daemon_in_import_then_build` run the real pipeline under a fault.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deploy.artifact import Latency, Manifest, Verification, artifact_name
from deploy.errors import PipelineError
from deploy.options import Progress

FAKE_LATENCY = Latency(tvm=0.5, untuned=1.5, onnxruntime=1.0)
SHORT_BUDGET = "trials 4 cannot give each of the 2 tasks to tune a round of 4"
UNTUNED = "1 of 2 tasks run TVM's default schedule, untuned"
# What `wait*` reports after its one measured batch, as deploy.progress.TuningMeter would.
FIRST_BATCH = Progress(stage="tuning", trials_done=1, trials_total=4, best_estimate_ms=0.42, trials_per_minute=30.0,
                       eta_seconds=6.0)


def fake_pipeline(model_path: Path, *, output_dir: Path, state_dir: Path, options, on_progress) -> Manifest:
    stem = Path(model_path).stem
    on_progress(Progress(stage="tuning", trials_done=0, trials_total=4))
    if stem.startswith("segfault"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if stem.startswith("exit"):
        os._exit(3)
    if stem.startswith("pipeerr"):
        raise PipelineError("model has no outputs")
    if stem.startswith("valueerr"):
        raise ValueError("bad\nthing   happened")
    if stem.startswith("hang"):
        # A grandchild like TVM's builder pool; the worker must stop it along with the child.
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (Path(state_dir) / f"{stem}.grandchild.pid").write_text(str(helper.pid))
        on_progress(Progress(stage="tuning", trials_done=1, trials_total=4))
        while True:
            time.sleep(1)
    if stem.startswith("short"):
        on_progress(Progress(stage="tuning", trials_done=0, trials_total=4, warning=SHORT_BUDGET))
        while not (Path(state_dir) / "release").exists():
            time.sleep(0.02)
        manifest = always_succeed(model_path, output_dir=output_dir, state_dir=state_dir, options=options,
                                  on_progress=on_progress)
        return manifest.model_copy(update={"tasks": 2, "tasks_untuned": 1, "warnings": [UNTUNED]})
    if stem.startswith("wait"):
        on_progress(FIRST_BATCH)
        while not (Path(state_dir) / "release").exists():
            time.sleep(0.02)
    return always_succeed(model_path, output_dir=output_dir, state_dir=state_dir, options=options, on_progress=on_progress)


def always_succeed(model_path: Path, *, output_dir: Path, state_dir: Path, options, on_progress) -> Manifest:
    on_progress(Progress(stage="tuning", trials_done=4, trials_total=4))
    on_progress(Progress(stage="building", trials_done=4, trials_total=4))
    on_progress(Progress(stage="verifying", trials_done=4, trials_total=4))
    return _manifest(Path(model_path), Path(output_dir))


def count_runs(model_path: Path, *, output_dir: Path, state_dir: Path, options, on_progress) -> Manifest:
    """Succeed, appending the model's name to `<state_dir>/runs.log` (one line per run, O_APPEND)."""
    with open(Path(state_dir) / "runs.log", "a", encoding="utf-8") as log:
        log.write(Path(model_path).name + "\n")
    return always_succeed(model_path, output_dir=output_dir, state_dir=state_dir, options=options,
                          on_progress=on_progress)


def full_disk_pipeline(model_path: Path, *, output_dir: Path, state_dir: Path, options, on_progress) -> Manifest:
    """The real pipeline with no file allowed past 16 KiB (RLIMIT_FSIZE): a full disk while building."""
    import resource

    from deploy.pipeline import run_pipeline

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit then fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))
    return run_pipeline(model_path, output_dir=output_dir, state_dir=state_dir, options=options, on_progress=on_progress)


def kill_daemon_in_import_then_build(model_path: Path, *, output_dir: Path, state_dir: Path, options,
                                     on_progress) -> Manifest:
    """The real pipeline, SIGKILLing the daemon (this child's parent) once as import starts, once as build starts.

    Each kill happens once (a marker in state_dir remembers it), so the first run dies while TVM
    imports, the second after tuning as the build begins, and the third runs to the end. The
    pipeline goes on after the kill until the daemon's orphan watch takes its process group down,
    as a real job would.
    """
    from deploy.pipeline import run_pipeline

    def report(progress: Progress) -> None:
        on_progress(progress)
        moment = "import" if progress.stage == "tuning" and progress.trials_done == 0 else progress.stage
        marker = Path(state_dir) / f"daemon-killed-at-{moment}"
        if moment in ("import", "building") and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getppid(), signal.SIGKILL)

    return run_pipeline(model_path, output_dir=output_dir, state_dir=state_dir, options=options, on_progress=report)


def _manifest(model_path: Path, output_dir: Path) -> Manifest:
    sha256 = hashlib.sha256(model_path.read_bytes()).hexdigest()
    return Manifest(
        name=model_path.stem, sha256=sha256, source=str(model_path),
        artifact_dir=str(output_dir / artifact_name(model_path.stem, sha256)),
        inputs=[], outputs=[], target={"kind": "llvm"}, platform="fake", tvm_version="fake",
        cost_model="random", trials=4, trials_measured=4, tasks=1, tasks_reused=0, tuning_seconds=0.0,
        verification=Verification(max_abs_err=0.0, max_rel_err=0.0, atol=1e-4, rtol=1e-3, passed=True),
        latency_ms=FAKE_LATENCY, created_at="2026-01-01T00:00:00+00:00",
    )
