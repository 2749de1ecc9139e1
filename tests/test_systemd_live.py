"""The shipped unit under a real systemd (tests/booted_systemd.py): installed as documented, then used.

One booted system for the module: READY and the sandbox, a dropped model becoming an artifact,
a stop mid-tuning requeueing the job, the watchdog restarting a frozen daemon, no denials.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.booted_systemd import BootedSystem, unavailable

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no booted systemd here: {REASON}")
WATCH, OUT, STATUS = "/srv/tcl-tuned/watch", "/srv/tcl-tuned/out", "/var/lib/tcl-tuned/status.json"


@pytest.fixture(scope="module")
def system():
    with BootedSystem() as booted:
        booted.install_tcl_tuned()
        booted.run("systemctl", "enable", "--now", "tcl-tuned")
        yield booted


def _show(system, *properties: str) -> dict[str, str]:
    out = system.run("systemctl", "show", "tcl-tuned", *(f"--property={p}" for p in properties)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _wait(what: str, check, timeout: float = 180, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


def _status(system) -> dict:
    done = system.run("cat", STATUS, check=False)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}


def _model(system, name: str) -> dict | None:
    return next((m for m in _status(system).get("models", []) if m["name"] == name), None)


def _drop(system, name: str, model: bytes, trials: int) -> None:
    """The documented way: the sidecar first, then the model under a *.part name, renamed in."""
    system.run("bash", "-c", f"cat > {WATCH}/{name}.json", input=json.dumps({"trials": trials}))
    system.run("bash", "-c", f"cat > {WATCH}/{name}.onnx.part && mv {WATCH}/{name}.onnx.part {WATCH}/{name}.onnx",
               input=model)


def _model_bytes(seed: int) -> bytes:
    from tests.models import tiny_mlp_model

    return tiny_mlp_model(seed).SerializeToString()


def test_the_unit_starts_ready_and_sandboxed(system):
    state = _wait("READY=1", lambda: (s := _show(system, "ActiveState", "SubState", "StatusText", "MainPID"))
                  ["SubState"] == "running" and "watching" in s["StatusText"] and s, timeout=120)
    proc = system.run("cat", f"/proc/{state['MainPID']}/status").stdout
    fields = dict(line.split(":", 1) for line in proc.splitlines() if ":" in line)
    uid = int(fields["Uid"].split()[0])
    assert system.run("id", "-u", "tcl-tuned").stdout.strip() == str(uid) != "0"
    assert int(fields["CapEff"].strip(), 16) == 0 and fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    assert system.run("stat", "-c", "%a", "/var/lib/tcl-tuned").stdout.strip() == "750"


def test_a_dropped_model_becomes_an_artifact_readable_by_the_group_only(system):
    _drop(system, "dropped", _model_bytes(1), trials=0)
    entry = _wait("the job to finish", lambda: (m := _model(system, "dropped")) and m["state"] in ("done", "failed") and m)
    assert entry["state"] == "done", entry
    folder = entry["artifact_dir"]
    listing = system.run("stat", "-c", "%n %U %G %a", folder, f"{folder}/model.so", f"{folder}/manifest.json").stdout
    modes = {line.split()[0].rsplit("/", 1)[-1]: line.split()[1:] for line in listing.splitlines()}
    assert modes[folder.rsplit("/", 1)[-1]] == ["tcl-tuned", "tcl-tuned", "750"]
    assert modes["model.so"][2] == modes["manifest.json"][2] == "640"
    manifest = json.loads(system.run("cat", f"{folder}/manifest.json").stdout)
    assert manifest["verification"]["passed"]


def test_stop_mid_tuning_exits_cleanly_and_the_job_finishes_after_a_start(system):
    _drop(system, "stopped", _model_bytes(2), trials=16)
    _wait("tuning", lambda: (m := _model(system, "stopped")) and m["state"] == "tuning" and m["trials_total"] == 16)
    started = time.monotonic()
    system.run("systemctl", "stop", "tcl-tuned", timeout=60)
    assert time.monotonic() - started < 30
    show = _show(system, "ActiveState", "Result", "ExecMainStatus")
    assert (show["ActiveState"], show["Result"], show["ExecMainStatus"]) == ("inactive", "success", "0")
    assert _model(system, "stopped")["state"] == "queued"
    system.run("systemctl", "start", "tcl-tuned")
    entry = _wait("the requeued job", lambda: (m := _model(system, "stopped")) and m["state"] in ("done", "failed") and m,
                  timeout=300)
    assert entry["state"] == "done", entry


def test_the_watchdog_restarts_a_frozen_daemon(system):
    # The shipped WatchdogSec=60 would make this test wait over a minute; a drop-in shortens it.
    system.shell("""
        mkdir -p /etc/systemd/system/tcl-tuned.service.d
        printf '[Service]\\nWatchdogSec=8\\n' > /etc/systemd/system/tcl-tuned.service.d/test-watchdog.conf
        systemctl daemon-reload && systemctl restart tcl-tuned
    """)
    first = _wait("READY=1", lambda: (s := _show(system, "SubState", "StatusText", "MainPID", "NRestarts"))
                  ["SubState"] == "running" and "watching" in s["StatusText"] and s, timeout=120)
    system.run("kill", "-STOP", first["MainPID"])
    again = _wait("a restart", lambda: (s := _show(system, "MainPID", "NRestarts", "SubState"))
                  ["MainPID"] not in ("0", first["MainPID"]) and s, timeout=60)
    assert int(again["NRestarts"]) > int(first["NRestarts"])
    log = system.run("journalctl", "-u", "tcl-tuned", "--no-pager").stdout
    assert "Watchdog timeout" in log


def test_the_journal_holds_no_denial(system):
    log = system.run("journalctl", "-u", "tcl-tuned", "--no-pager", "-o", "cat").stdout
    for denial in ("Operation not permitted", "Permission denied", "status=203/EXEC", "SIGSYS", "Read-only file system"):
        assert denial not in log, [line for line in log.splitlines() if denial in line]
