"""The daemon loop, in process (driven step by step) and as a real process receiving signals."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from daemon.status import StatusFile, read_status
from tcl_core.continual import record_count
from tests import child_targets
from tests.models import corrupt_onnx, tiny_mlp_onnx
from tests.waiting import step_until, wait_gone, wait_until

REPO = Path(__file__).resolve().parents[1]


def _drop(path: Path, content: bytes, watch_dir: Path) -> Path:
    """Write outside the watch folder, then move in: how people are told to submit models."""
    staged = watch_dir.parent / f"staging-{path.name}"
    staged.write_bytes(content)
    os.rename(staged, watch_dir / path.name)
    return watch_dir / path.name


def _models(daemon) -> dict[str, object]:
    return {entry.name: entry for entry in read_status(daemon.config.status_file).models}


def _state_of(daemon, name: str) -> str | None:
    entry = _models(daemon).get(name)
    return None if entry is None else entry.state


def test_moved_in_file_is_tuned_and_reported(daemon_factory):
    daemon = daemon_factory()
    status = read_status(daemon.config.status_file)
    assert status.daemon.state == "watching" and status.daemon.pid == os.getpid()
    _drop(Path("good.onnx"), b"good model", daemon.config.watch_dir)
    step_until(daemon, lambda: _state_of(daemon, "good") == "done", what="good.onnx done")
    entry = _models(daemon)["good"]
    assert entry.latency_ms.tvm == child_targets.FAKE_LATENCY.tvm
    assert (entry.trials_done, entry.trials_total, entry.error) == (4, 4, None)
    assert Path(entry.artifact_dir).name.startswith("good-")
    assert (daemon.config.watch_dir / "good.onnx").read_bytes() == b"good model"  # input untouched


def test_a_budget_warning_shows_while_tuning_and_the_manifests_warning_once_done(daemon_factory):
    daemon = daemon_factory()
    _drop(Path("short.onnx"), b"short budget", daemon.config.watch_dir)
    step_until(daemon, lambda: _state_of(daemon, "short") is not None and _models(daemon)["short"].warning,
               what="short.onnx warned")
    assert _models(daemon)["short"].warning == child_targets.SHORT_BUDGET
    (daemon.config.state_dir / "release").touch()
    step_until(daemon, lambda: _state_of(daemon, "short") == "done", what="short.onnx done")
    entry = _models(daemon)["short"]
    assert (entry.warning, entry.error) == (child_targets.UNTUNED, None)


def test_duplicate_content_is_not_queued_again(daemon_factory):
    daemon = daemon_factory()
    watch = daemon.config.watch_dir
    _drop(Path("first.onnx"), b"same bytes", watch)
    step_until(daemon, lambda: _state_of(daemon, "first") == "done")
    _drop(Path("second.onnx"), b"same bytes", watch)
    _drop(Path("third.onnx"), b"other bytes", watch)  # events arrive in order: third after second
    step_until(daemon, lambda: _state_of(daemon, "third") == "done")
    models = _models(daemon)
    assert list(models) == ["first", "third", "second"]  # jobs first, then the files that share a job
    second = models["second"]
    assert second.duplicate_of == "first" and second.state == "done" and second.sha256 == models["first"].sha256
    assert second.artifact_dir == models["first"].artifact_dir is not None
    assert models["first"].duplicate_of is None and models["third"].duplicate_of is None


def test_crashing_worker_fails_the_job_and_the_daemon_goes_on(daemon_factory):
    daemon = daemon_factory()
    _drop(Path("segfault.onnx"), b"crashes TVM", daemon.config.watch_dir)
    _drop(Path("after.onnx"), b"fine", daemon.config.watch_dir)
    step_until(daemon, lambda: _state_of(daemon, "after") == "done")
    crashed = _models(daemon)["segfault"]
    assert crashed.state == "failed" and crashed.error == "worker crashed (signal 11, SIGSEGV)"
    assert daemon.state == "watching"


def test_ignored_names_and_sidecars_never_become_jobs(daemon_factory):
    daemon = daemon_factory()
    watch = daemon.config.watch_dir
    for name in ("up.onnx.tmp", "up.onnx.part", ".hidden.onnx", "model.json", "notes.txt"):
        (watch / name).write_bytes(b"x" + name.encode())
    (watch / "model.onnx").write_bytes(b"the model")
    step_until(daemon, lambda: _state_of(daemon, "model") == "done")
    assert list(_models(daemon)) == ["model"]


def test_input_removed_while_queued_fails_with_reason(daemon_factory):
    daemon = daemon_factory()
    watch = daemon.config.watch_dir
    _drop(Path("wait.onnx"), b"blocks the worker", watch)
    step_until(daemon, lambda: _state_of(daemon, "wait") == "tuning")
    victim = _drop(Path("victim.onnx"), b"queued behind it", watch)
    step_until(daemon, lambda: _state_of(daemon, "victim") == "queued")
    victim.unlink()
    (daemon.config.state_dir / "release").touch()
    step_until(daemon, lambda: _state_of(daemon, "victim") == "failed")
    assert "disappeared before the job ran" in _models(daemon)["victim"].error
    assert _state_of(daemon, "wait") == "done"


def test_a_tuning_job_shows_its_estimate_rate_and_eta_and_logs_each_batch(daemon_factory, caplog):
    daemon = daemon_factory()
    _drop(Path("wait.onnx"), b"reports one batch", daemon.config.watch_dir)
    with caplog.at_level(logging.INFO, logger="daemon.main"):
        step_until(daemon, lambda: _state_of(daemon, "wait") == "tuning" and _models(daemon)["wait"].trials_done == 1,
                   what="wait.onnx measured a batch")
    entry = _models(daemon)["wait"]
    assert (entry.best_estimate_ms, entry.trials_per_minute, entry.eta_seconds) == (0.42, 30.0, 6.0)
    batch_lines = [m for m in caplog.messages if "trials/min" in m]
    assert batch_lines == ["job 1 wait.onnx: 1/4 trials, best estimate 0.42 ms, 30.0 trials/min, ETA 6s"]
    (daemon.config.state_dir / "release").touch()
    step_until(daemon, lambda: _state_of(daemon, "wait") == "done", what="wait.onnx done")
    assert _models(daemon)["wait"].eta_seconds is None  # the fake's later reports carry no rate


def test_restart_runs_what_was_queued_and_what_was_running(daemon_factory, daemon_config):
    first = daemon_factory()
    watch = first.config.watch_dir
    _drop(Path("hang.onnx"), b"never finishes here", watch)
    step_until(first, lambda: _models(first).get("hang") and _models(first)["hang"].trials_done == 1)
    _drop(Path("next.onnx"), b"waits its turn", watch)
    step_until(first, lambda: _state_of(first, "next") == "queued")
    first.shutdown()
    status = read_status(first.config.status_file)
    assert status.daemon.state == "stopped"
    assert [(m.name, m.state) for m in status.models] == [("hang", "queued"), ("next", "queued")]

    second = daemon_factory(pipeline_fn=child_targets.always_succeed, config=first.config)
    step_until(second, lambda: _state_of(second, "next") == "done")
    assert [(m.name, m.state) for m in read_status(second.config.status_file).models] == [
        ("hang", "done"), ("next", "done")  # oldest first; the start-up scan added no duplicates
    ]


def test_removed_watch_folder_stops_the_daemon_with_failure(daemon_factory):
    daemon = daemon_factory()
    daemon.config.watch_dir.rmdir()  # inotify reports the folder itself gone; the observer ends
    step_until(daemon, lambda: daemon.stop_requested, what="the daemon to notice")
    assert daemon.exit_code == 1


def test_status_is_rewritten_on_heartbeat_only_when_nothing_changes(daemon_config):
    from daemon.main import Daemon
    from daemon.notify import SystemdNotify
    from daemon.worker import Worker
    from tests.fakes import RecordingNotifier

    daemon = Daemon(daemon_config(heartbeat_seconds=10.0), worker=Worker(pipeline_fn=child_targets.fake_pipeline),
                    notify=SystemdNotify(RecordingNotifier()))
    daemon.start(now=1000.0)
    try:
        def heartbeat() -> datetime:
            return read_status(daemon.config.status_file).daemon.heartbeat_at

        assert heartbeat() == datetime.fromtimestamp(1000.0, UTC)
        daemon.step(now=1009.0)
        assert heartbeat() == datetime.fromtimestamp(1000.0, UTC)  # nothing changed, heartbeat not due
        daemon.step(now=1010.5)
        assert heartbeat() == datetime.fromtimestamp(1010.5, UTC)
    finally:
        daemon.shutdown(now=1011.0)
    assert read_status(daemon.config.status_file).daemon.state == "stopped"


# --- real processes and signals ---


def _write_config(tmp_path: Path, tuning: str = "trials = 0\ntiming_repeats = 3", **extra) -> Path:
    values = {
        "watch_dir": tmp_path / "watch", "output_dir": tmp_path / "out", "state_dir": tmp_path / "state",
        "settle_seconds": 0.3, "tick_seconds": 0.05, "stop_grace_seconds": 2.0, **extra,
    }
    lines = [f'{key} = {value!r}' if not isinstance(value, Path) else f'{key} = "{value}"' for key, value in values.items()]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + f"\n[tuning]\n{tuning}\n")
    return path


def _daemon_command() -> list[str]:
    installed = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent))
    return [installed] if installed else [sys.executable, "-m", "daemon"]


def _status_when(path: Path, condition, timeout: float = 30.0) -> StatusFile:
    def check():
        if not path.is_file():
            return None
        status = read_status(path)
        return status if condition(status) else None

    return wait_until(check, timeout=timeout, what=f"status file {path} to match")


def _start(command: list[str], tmp_path: Path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_daemon_stops_cleanly_on_signal(tmp_path, sig):
    config = _write_config(tmp_path)
    status_file = tmp_path / "state" / "status.json"
    process = _start([*_daemon_command(), "daemon", "--config", str(config)], tmp_path)
    try:
        status = _status_when(status_file, lambda s: s.daemon.state == "watching")
        assert status.daemon.pid == process.pid
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert read_status(status_file).daemon.state == "stopped"
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO daemon.main: watching ", stderr, re.M), stderr


def test_cli_daemon_reports_an_unusable_folder_without_traceback(tmp_path):
    (tmp_path / "watch").write_text("a file where the watch folder should be")
    config = _write_config(tmp_path)
    result = subprocess.run([*_daemon_command(), "daemon", "--config", str(config)],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"cannot start: cannot create {tmp_path / 'watch'}" in result.stderr
    assert "Traceback" not in result.stderr


def _daemon_tuning_a_hanging_job(tmp_path: Path) -> tuple[subprocess.Popen, Path, list[int]]:
    """A real daemon process (fake pipeline) whose job `hang` is tuning: (process, config, job pids).

    The job pids are the worker child and the helper it started (TVM's builders stand-in).
    """
    config = _write_config(tmp_path)
    process = _start([sys.executable, "-m", "tests.daemon_entry", str(config)], tmp_path)
    status_file = tmp_path / "state" / "status.json"
    try:
        _status_when(status_file, lambda s: s.daemon.state == "watching")
        _drop(Path("hang.onnx"), b"tuning forever", tmp_path / "watch")
        _status_when(status_file, lambda s: [(m.state, m.trials_done) for m in s.models] == [("tuning", 1)])
        helper = wait_until(lambda: (tmp_path / "state" / "hang.grandchild.pid").exists()
                            and (tmp_path / "state" / "hang.grandchild.pid").read_text(), what="the job's helper")
    except BaseException:
        process.kill()
        raise
    return process, config, [p.pid for p in psutil.Process(process.pid).children()] + [int(helper)]


def test_sigterm_puts_the_running_job_back_to_queued(tmp_path):
    process, _, job_pids = _daemon_tuning_a_hanging_job(tmp_path)
    try:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    status = read_status(tmp_path / "state" / "status.json")
    assert status.daemon.state == "stopped"
    assert [(m.name, m.state) for m in status.models] == [("hang", "queued")]
    wait_gone(job_pids, timeout=5)


# --- with the real pipeline (TVM in the worker, trials=0) ---


def test_corrupt_model_fails_and_the_next_good_one_is_built(daemon_factory, daemon_tiny_model):
    daemon = daemon_factory(pipeline_fn=None)
    watch = daemon.config.watch_dir
    corrupt_onnx(watch.parent / "x.onnx")
    os.rename(watch.parent / "x.onnx", watch / "x.onnx")
    os.rename(daemon_tiny_model, watch / "tiny.onnx")
    step_until(daemon, lambda: _state_of(daemon, "tiny") in ("done", "failed"), timeout=150)
    models = _models(daemon)
    assert models["x"].state == "failed" and "not a readable ONNX file" in models["x"].error
    assert models["tiny"].state == "done", models["tiny"].error
    artifact = Path(models["tiny"].artifact_dir)
    assert (artifact / "model.so").is_file() and (artifact / "manifest.json").is_file()
    assert models["tiny"].latency_ms.onnxruntime > 0


def test_cli_daemon_tunes_a_dropped_model_end_to_end(tmp_path):
    config = _write_config(tmp_path)
    status_file = tmp_path / "state" / "status.json"
    process = _start([*_daemon_command(), "daemon", "--config", str(config)], tmp_path)
    try:
        _status_when(status_file, lambda s: s.daemon.state == "watching")
        tiny_mlp_onnx(tmp_path / "tiny.onnx")
        os.rename(tmp_path / "tiny.onnx", tmp_path / "watch" / "tiny.onnx")
        status = _status_when(status_file, lambda s: s.models and s.models[0].state in ("done", "failed"), timeout=150)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert status.models[0].state == "done", status.models[0].error
    assert (Path(status.models[0].artifact_dir) / "model.so").is_file()
    assert process.returncode == 0, stderr


def _measurements(state_dir: Path) -> int:
    return sum(record_count(path.parent) for path in state_dir.rglob("database_tuning_record.json"))


def test_sigkill_of_the_daemon_in_import_and_in_build_loses_nothing_and_a_restart_finishes(tmp_path):
    config = _write_config(tmp_path, tuning='trials = 8\ntrials_per_iter = 4\npopulation = 16\n'
                                            'cost_model = "random"\ntiming_repeats = 3')
    state, out = tmp_path / "state", tmp_path / "out"
    (tmp_path / "watch").mkdir()
    os.rename(tiny_mlp_onnx(tmp_path / "tiny.onnx"), tmp_path / "watch" / "tiny.onnx")
    command = [sys.executable, "-m", "tests.daemon_entry", str(config), "kill_daemon_in_import_then_build"]
    measured_before_build = 0
    for moment in ("import", "building"):  # the job's pipeline SIGKILLs the daemon at that moment, once
        killed = _start(command, tmp_path)
        _, stderr = killed.communicate(timeout=240)
        assert killed.returncode == -signal.SIGKILL, stderr
        wait_gone([int((state / f"daemon-killed-at-{moment}").read_text())], timeout=10)  # the job went too
        measured_before_build = _measurements(state)
    assert measured_before_build >= 4  # the second run tuned before the build began

    restarted = _start(command, tmp_path)
    try:
        status = _status_when(state / "status.json", lambda s: s.models and s.models[0].state in ("done", "failed"),
                              timeout=240)
        restarted.send_signal(signal.SIGTERM)
        restarted.communicate(timeout=30)
    finally:
        restarted.kill()
    entry = status.models[0]
    assert (entry.name, entry.state, entry.error) == ("tiny", "done", None)
    assert sorted(path.name for path in out.iterdir()) == [Path(entry.artifact_dir).name]  # no staging, no half copy
    manifest = json.loads((Path(entry.artifact_dir) / "manifest.json").read_text())
    assert manifest["verification"]["passed"] and (Path(entry.artifact_dir) / "model.so").stat().st_size > 0
    assert _measurements(state) >= measured_before_build  # what reached the database stayed there


def test_fifty_models_dropped_while_stopped_and_at_once_are_each_processed_once(daemon_factory, daemon_config):
    config = daemon_config()
    config.watch_dir.mkdir(parents=True)
    offline = [f"offline model {i:02d}.onnx" for i in range(25)]  # spaces in names on purpose
    for name in offline:
        (config.watch_dir / name).write_bytes(name.encode())
    daemon = daemon_factory(pipeline_fn=child_targets.count_runs, config=config)
    burst = [f"burst-ü-{i:02d}.onnx" for i in range(25)]
    staging = config.watch_dir.parent / "staging"
    staging.mkdir()
    for name in burst:
        (staging / name).write_bytes(name.encode())
    for name in burst:  # all at once, faster than the daemon steps
        os.rename(staging / name, config.watch_dir / name)
    expected = sorted(Path(name).stem for name in offline + burst)
    step_until(daemon, lambda: sorted(m.name for m in _models(daemon).values() if m.state == "done") == expected,
               timeout=240, what="all 50 models done")
    runs = (config.state_dir / "runs.log").read_text(encoding="utf-8").splitlines()
    assert sorted(runs) == sorted(offline + burst)  # every model ran, and exactly once


def test_sigkill_of_the_daemon_takes_its_job_down_and_a_restart_finishes_it(tmp_path):
    process, config, job_pids = _daemon_tuning_a_hanging_job(tmp_path)
    status_file = tmp_path / "state" / "status.json"
    process.kill()  # SIGKILL: no handler runs, nothing is cleaned up by the daemon
    process.communicate(timeout=30)
    wait_gone(job_pids, timeout=10)  # the job and its helper notice and go, instead of measuring on unattended

    restarted = _start([sys.executable, "-m", "tests.daemon_entry", str(config), "count_runs"], tmp_path)
    try:
        status = _status_when(status_file, lambda s: s.daemon.pid == restarted.pid and
                              [(m.name, m.state) for m in s.models] == [("hang", "done")])
        assert status.models[0].trials_done == 4
        restarted.send_signal(signal.SIGTERM)
        restarted.communicate(timeout=30)
    finally:
        restarted.kill()
    assert (tmp_path / "state" / "runs.log").read_text().splitlines() == ["hang.onnx"]  # redone once, not twice


def test_a_job_over_the_time_limit_is_stopped_and_failed_and_the_next_one_runs(daemon_factory):
    daemon = daemon_factory(job_timeout_seconds=3.0)
    watch = daemon.config.watch_dir
    _drop(Path("hang.onnx"), b"never finishes", watch)
    _drop(Path("after.onnx"), b"a normal model", watch)
    step_until(daemon, lambda: _state_of(daemon, "after") == "done", timeout=60)
    assert _state_of(daemon, "hang") == "failed"
    assert "job time limit (job_timeout_seconds)" in _models(daemon)["hang"].error


def test_a_file_replaced_while_it_is_tuned_becomes_a_second_job(daemon_factory):
    daemon = daemon_factory()
    watch = daemon.config.watch_dir
    _drop(Path("wait.onnx"), b"first version", watch)
    step_until(daemon, lambda: _state_of(daemon, "wait") == "tuning")
    _drop(Path("wait.onnx"), b"second version", watch)  # renamed over the file being tuned
    step_until(daemon, lambda: len(read_status(daemon.config.status_file).models) == 2, what="the new content queued")
    (daemon.config.state_dir / "release").touch()

    def both_done():
        models = read_status(daemon.config.status_file).models
        return len(models) == 2 and all(m.state == "done" for m in models) and models

    first, second = step_until(daemon, both_done)
    assert (first.name, second.name) == ("wait", "wait")  # the same name, two contents, each tuned once
    assert first.sha256 != second.sha256 and {first.sha256, second.sha256} == {
        hashlib.sha256(b"first version").hexdigest(), hashlib.sha256(b"second version").hexdigest()}


def test_a_symlink_is_refused_at_admission_without_reading_its_target(daemon_factory, tmp_path):
    daemon = daemon_factory()
    watch = daemon.config.watch_dir
    target = tmp_path / "secret.onnx"
    target.write_bytes(b"outside the drop folder")
    (watch / "link.onnx").symlink_to(target)
    (watch / "dangling.onnx").symlink_to(tmp_path / "nowhere.onnx")
    _drop(Path("after.onnx"), b"fine", watch)
    step_until(daemon, lambda: _state_of(daemon, "after") == "done")
    step_until(daemon, lambda: _state_of(daemon, "dangling") == "failed")
    models = _models(daemon)
    for name in ("link", "dangling"):
        assert models[name].state == "failed"
        assert models[name].error == f"{name}.onnx is a symbolic link; copy the model itself into the watch folder"
        assert models[name].sha256 != hashlib.sha256(b"outside the drop folder").hexdigest()
        assert models[name].trials_done == 0
