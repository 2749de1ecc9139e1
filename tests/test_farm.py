"""Tuning farms: a real TVM RPC tracker and two real RPC servers on 127.0.0.1, one killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.layout import database_dir

from deploy.errors import PipelineError
from deploy.farm import farm_devices, tracker_summary
from deploy.options import RunnerOptions, TuningOptions
from deploy.pipeline import run_pipeline
from tests.models import tiny_mlp_onnx
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
KEY = "testbox"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _spawn(*args: str) -> subprocess.Popen:
    # Own session: killing the group takes the server's forked session processes with it.
    return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@pytest.fixture
def farm():
    """A tracker and two servers registered under KEY; yields (runner options, [server processes])."""
    port = _free_port()
    tracker = _spawn("tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))
    runner = RunnerOptions(kind="rpc", tracker_port=port, device_key=KEY, session_timeout_seconds=20)
    servers = []
    try:
        wait_until(lambda: _reachable(runner), timeout=30, what="the tracker")
        for _ in range(2):
            server_port = _free_port()
            servers.append(_spawn("tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
                                  "--port-end", str(server_port + 1), "--tracker", f"127.0.0.1:{port}", "--key", KEY))
        wait_until(lambda: farm_devices(tracker_summary(runner)).get(KEY, {}).get("free") == 2, timeout=60,
                   what="two servers registered")
        yield runner, servers
    finally:
        for process in [*servers, tracker]:
            _kill(process)


def _reachable(runner: RunnerOptions) -> bool:
    try:
        tracker_summary(runner)
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def test_farm_status_lists_the_free_devices(farm):
    runner, _ = farm
    result = subprocess.run([sys.executable, "-m", "daemon", "farm", "status", "--tracker",
                             f"127.0.0.1:{runner.tracker_port}", "--json"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["devices"][KEY] == {"servers": 2, "free": 2, "pending": 0}


def test_a_model_tuned_through_the_tracker_survives_losing_a_server(farm, tmp_path):
    runner, servers = farm
    killed = []

    def on_progress(progress):
        if progress.stage == "tuning" and progress.trials_done >= 4 and not killed:
            _kill(servers[0])  # a board unplugged mid-run
            killed.append(progress.trials_done)

    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=3), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        on_progress=on_progress,
        options=TuningOptions(trials=12, cost_model="random", trials_per_iter=4, population=32, timing_repeats=3,
                              runner=runner),
    )
    assert killed and manifest.verification.passed and manifest.trials_measured == 12
    assert manifest.runner == {"kind": "rpc", "tracker": f"127.0.0.1:{runner.tracker_port}", "device_key": KEY}
    assert manifest.platform.split("-")[-2] == KEY  # the device key is part of the platform
    records = (database_dir(tmp_path / "state", manifest.platform) / "database_tuning_record.json").read_text()
    succeeded = [line for line in records.splitlines() if line and json.loads(line)[1][1] is not None
                 and all(t < 1e9 for t in json.loads(line)[1][1])]
    assert len(succeeded) >= 8  # after the kill the other server went on measuring
    assert (Path(manifest.artifact_dir) / "model.so").is_file()


def test_an_unreachable_tracker_fails_the_job_with_the_reason(tmp_path):
    runner = RunnerOptions(kind="rpc", tracker_port=_free_port(), device_key=KEY)
    with pytest.raises(PipelineError, match=r"tuning farm: tracker 127\.0\.0\.1:\d+ unreachable"):
        run_pipeline(tiny_mlp_onnx(tmp_path / "mlp.onnx"), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                     options=TuningOptions(trials=4, cost_model="random", trials_per_iter=4, runner=runner))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_key_with_no_devices_fails_the_job_naming_the_keys_there(farm, tmp_path):
    runner, _ = farm
    other = runner.model_copy(update={"device_key": "nosuchboard"})
    with pytest.raises(PipelineError, match=r"no device with key 'nosuchboard' \(keys there: \['testbox'\]\)"):
        run_pipeline(tiny_mlp_onnx(tmp_path / "mlp.onnx"), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                     options=TuningOptions(trials=4, cost_model="random", trials_per_iter=4, runner=other))
