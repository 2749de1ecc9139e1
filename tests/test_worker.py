"""Worker: one job per spawned child; crashes, errors and stops become outcomes, not daemon deaths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from daemon.worker import Failed, JobSpec, Succeeded, Worker
from deploy.options import Progress, TuningOptions
from tests import child_targets
from tests.models import corrupt_onnx, tiny_mlp_onnx
from tests.waiting import wait_gone, wait_until

REPO = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, stem: str, content: bytes = b"fake model") -> JobSpec:
    model = tmp_path / f"{stem}.onnx"
    if not model.exists():
        model.write_bytes(content)
    (tmp_path / "state").mkdir(exist_ok=True)
    return JobSpec(7, model, tmp_path / "out", tmp_path / "state", TuningOptions(trials=0, timing_repeats=3))


def _run(worker: Worker, spec: JobSpec, timeout: float = 30.0) -> list:
    """Start `spec` and poll until the outcome arrives; return every report."""
    worker.start(spec)
    reports: list = []

    def finished() -> bool:
        reports.extend(worker.poll())
        return bool(reports) and not isinstance(reports[-1][1], Progress)

    wait_until(finished, timeout=timeout, what="the worker's outcome")
    assert worker.running_job_id is None
    return reports


def test_progress_then_success(tmp_path):
    reports = _run(Worker(pipeline_fn=child_targets.fake_pipeline), _spec(tmp_path, "good"))
    assert all(job_id == 7 for job_id, _ in reports)
    *progress, (_, outcome) = reports
    assert [(p.stage, p.trials_done) for _, p in progress] == [
        ("tuning", 0), ("tuning", 4), ("building", 4), ("verifying", 4)
    ]
    assert isinstance(outcome, Succeeded)
    assert outcome.latency_ms == child_targets.FAKE_LATENCY
    assert Path(outcome.artifact_dir).parent == tmp_path / "out"


@pytest.mark.parametrize(
    ("stem", "reason"),
    [
        ("segfault", "worker crashed (signal 11, SIGSEGV)"),
        ("exit", "worker exited with code 3 before reporting a result"),
        ("pipeerr", "model has no outputs"),
        ("valueerr", "ValueError: bad thing happened"),
    ],
)
def test_failures_become_one_line_reasons(tmp_path, stem, reason):
    worker = Worker(pipeline_fn=child_targets.fake_pipeline)
    *_, (_, outcome) = _run(worker, _spec(tmp_path, stem))
    assert outcome == Failed(reason=reason)
    # The worker is usable again after a crash.
    *_, (_, after) = _run(worker, _spec(tmp_path, "good"))
    assert isinstance(after, Succeeded)


def test_stop_kills_the_child_and_its_helpers(tmp_path):
    worker = Worker(pipeline_fn=child_targets.fake_pipeline)
    spec = _spec(tmp_path, "hang")
    worker.start(spec)
    progress: list = []
    wait_until(lambda: progress.extend(worker.poll()) or any(p.trials_done == 1 for _, p in progress))
    helper_pid = int((spec.state_dir / "hang.grandchild.pid").read_text())
    assert psutil.pid_exists(helper_pid)
    with pytest.raises(RuntimeError, match="busy"):
        worker.start(spec)

    assert worker.stop(grace_seconds=2.0) == (7, None)  # no outcome: the caller re-queues it
    assert worker.running_job_id is None
    wait_gone([helper_pid], timeout=5)  # the TVM-like helper went with the job


def test_daemon_process_never_imports_tvm():
    code = (
        "import sys, daemon.main, daemon.cli, daemon.worker;"
        "bad = sorted(m for m in sys.modules if m in ('tvm', 'torch') or m.startswith(('tvm.', 'torch.',"
        " 'tcl_core.tvm_api', 'deploy.pipeline')));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- with the real pipeline (deploy.pipeline.run_pipeline, TVM in the child) ---


def test_real_pipeline_builds_tiny_model(tmp_path):
    spec = _spec(tmp_path, "tiny")
    tiny_mlp_onnx(spec.model_path)
    *progress, (_, outcome) = _run(Worker(), spec, timeout=120)
    assert isinstance(outcome, Succeeded), outcome
    assert {p.stage for _, p in progress} >= {"tuning", "building", "verifying"}
    assert (Path(outcome.artifact_dir) / "model.so").is_file()
    assert (Path(outcome.artifact_dir) / "manifest.json").is_file()
    assert outcome.latency_ms.tvm > 0


def test_real_pipeline_refuses_corrupt_model_with_its_reason(tmp_path):
    spec = _spec(tmp_path, "bad")
    corrupt_onnx(spec.model_path)
    *_, (_, outcome) = _run(Worker(), spec, timeout=120)
    assert isinstance(outcome, Failed)
    assert "not a readable ONNX file" in outcome.reason
    assert "\n" not in outcome.reason
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # nothing emitted


def test_a_full_disk_while_building_fails_the_job_with_what_llvm_said(tmp_path):
    """LLVM aborts the whole process on a failed write; the job fails with its last words, nothing is emitted."""
    spec = _spec(tmp_path, "full")
    tiny_mlp_onnx(spec.model_path)
    *_, (_, outcome) = _run(Worker(pipeline_fn=child_targets.full_disk_pipeline), spec, timeout=120)
    assert isinstance(outcome, Failed)
    assert "File too large" in outcome.reason and "\n" not in outcome.reason
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # no artifact, no staging
