"""systemd notify: READY/STOPPING on a real datagram socket, and watchdog pings only while healthy."""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path

import pytest

from daemon.main import Daemon
from daemon.notify import SystemdNotify, WatchdogPinger, watchdog_interval
from daemon.worker import Worker
from tests import child_targets
from tests.fakes import RecordingNotifier
from tests.waiting import wait_until


@pytest.fixture
def notify_socket(monkeypatch):
    """A bound unix datagram socket, with NOTIFY_SOCKET pointing at it (a short path: sun_path is 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="tcl-notify-", dir="/tmp"))
    path = folder / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()
    path.unlink()
    folder.rmdir()


def test_ready_and_stopping_arrive_on_the_socket(notify_socket):
    notify = SystemdNotify()  # a real sdnotify.SystemdNotifier, connected to $NOTIFY_SOCKET
    notify.ready(status="watching /srv/w (inotify)")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=watching /srv/w (inotify)"
    notify.stopping()
    assert notify_socket.recv(4096) == b"STOPPING=1"


def test_without_notify_socket_messages_go_nowhere(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notify = SystemdNotify()
    notify.ready()  # must not raise outside systemd
    notify.watchdog()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "60000000"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "99"}, 30.0),  # ours (pid 99 below)
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "100"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(environ, expected):
    assert watchdog_interval(environ, pid=99) == expected


def test_pinger_pings_only_while_healthy():
    recorder = RecordingNotifier()
    healthy = threading.Event()
    healthy.set()
    checks = {"unhealthy": 0}

    def is_healthy() -> bool:
        if healthy.is_set():
            return True
        checks["unhealthy"] += 1
        return False

    pinger = WatchdogPinger(SystemdNotify(recorder), interval=0.02, is_healthy=is_healthy)
    pinger.start()
    try:
        wait_until(lambda: recorder.sent.count("WATCHDOG=1") >= 3, timeout=5, what="three pings")
        healthy.clear()
        pinged = recorder.sent.count("WATCHDOG=1")
        wait_until(lambda: checks["unhealthy"] >= 5, timeout=5, what="five failed health checks")
        # At most one ping could have been in flight when health was lost.
        assert recorder.sent.count("WATCHDOG=1") <= pinged + 1
        after_loss = recorder.sent.count("WATCHDOG=1")
        wait_until(lambda: checks["unhealthy"] >= 10, timeout=5, what="five more failed checks")
        assert recorder.sent.count("WATCHDOG=1") == after_loss
    finally:
        pinger.stop()


def test_daemon_sends_ready_pings_and_stopping(daemon_config, notify_socket, monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "100000")  # ping every 50 ms
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    daemon = Daemon(daemon_config(), worker=Worker(pipeline_fn=child_targets.fake_pipeline))
    daemon.start()
    try:
        assert notify_socket.recv(4096).startswith(b"READY=1\nSTATUS=watching ")
        messages: list[bytes] = []
        wait_until(lambda: messages.append(notify_socket.recv(4096)) or messages.count(b"WATCHDOG=1") >= 2,
                   timeout=10, what="watchdog pings from the daemon")
        daemon.step()
        assert daemon.is_healthy(max_stall=5.0)
        daemon.watcher.stop()  # the observer is gone: the daemon must stop claiming health
        assert not daemon.is_healthy(max_stall=5.0)
    finally:
        daemon.shutdown()
    rest = []
    wait_until(lambda: rest.append(notify_socket.recv(4096)) or b"STOPPING=1" in rest, timeout=10, what="STOPPING=1")
