"""The systemd unit: the directives the daemon relies on, and `systemd-analyze verify` without warnings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "systemd" / "tcl-tuned.service"


def _directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_unit_has_the_directives_the_daemon_relies_on():
    unit = _directives(UNIT.read_text())
    expected = {
        "Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "KillMode": "mixed",
        "StateDirectory": "tcl-tuned", "User": "tcl-tuned", "Group": "tcl-tuned", "ProtectSystem": "strict",
        "NoNewPrivileges": "yes", "PrivateTmp": "yes", "RestartPreventExitStatus": "2",
        "ExecStart": "/opt/tcl-tuned/.venv/bin/tcl-tuned daemon --config /etc/tcl-tuned/config.toml",
    }
    assert {key: unit.get(key, [None])[-1] for key in expected} == expected
    watchdog_sec, stop_timeout = int(unit["WatchdogSec"][-1]), int(unit["TimeoutStopSec"][-1])
    assert watchdog_sec >= 30
    assert stop_timeout > 5 + 5  # the daemon's default stop_grace_seconds, then its own shutdown
    assert {"/srv/tcl-tuned/watch", "/srv/tcl-tuned/out"} <= set(unit["ReadWritePaths"][-1].split())


def test_systemd_analyze_verify_reports_nothing(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing in CI")
        pytest.skip("systemd-analyze not installed")
    # verify checks that ExecStart's binary exists; /opt/tcl-tuned is not installed here, so point
    # it at this checkout's executable. Nothing else in the unit changes, and any output fails.
    executable = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent)) or sys.executable
    text = UNIT.read_text().replace("ExecStart=/opt/tcl-tuned/.venv/bin/tcl-tuned ", f"ExecStart={executable} ")
    assert text != UNIT.read_text()
    copy = tmp_path / "tcl-tuned.service"
    copy.write_text(text)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_sysusers_file_creates_the_service_user():
    lines = [line.split() for line in (REPO / "systemd" / "tcl-tuned.sysusers").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines and lines[0][:2] == ["u", "tcl-tuned"]


def test_systemd_analyze_security_scores_the_unit_under_3():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing in CI")
        pytest.skip("systemd-analyze not installed")
    result = subprocess.run([analyze, "security", "--offline=yes", "--threshold=30", str(UNIT)],
                            capture_output=True, text=True, timeout=60)
    line = next(line for line in result.stdout.splitlines() if "Overall exposure level" in line)
    score = float(line.split(":")[1].split()[0])
    assert score < 3.0, line
    assert result.returncode == 0  # --threshold=30: exit status 0 means the score is at most 3.0
