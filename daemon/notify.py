"""systemd notifications: READY=1 once watching, WATCHDOG=1 while healthy, STOPPING=1 on the way out.

Uses the `sdnotify` package, which does nothing when NOTIFY_SOCKET is unset (a foreground run).
The watchdog thread pings only while the health check passes (main loop stepping, observer
alive), so a hung loop or a dead observer lets systemd's WatchdogSec restart the service.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

import sdnotify

log = logging.getLogger(__name__)


class Notifier(Protocol):
    """What sdnotify.SystemdNotifier offers; tests may pass a recorder instead."""

    def notify(self, state: str) -> None: ...


class SystemdNotify:
    """The daemon's few messages to systemd."""

    def __init__(self, notifier: Notifier | None = None) -> None:
        # SystemdNotifier connects to $NOTIFY_SOCKET when constructed, so build it late (here).
        self._notifier = notifier if notifier is not None else sdnotify.SystemdNotifier()

    def ready(self, status: str = "") -> None:
        self._notifier.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def status(self, text: str) -> None:
        self._notifier.notify(f"STATUS={text}")

    def watchdog(self) -> None:
        self._notifier.notify("WATCHDOG=1")

    def stopping(self) -> None:
        self._notifier.notify("STOPPING=1")


def watchdog_interval(environ: Mapping[str, str] = os.environ, pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None when systemd wants none."""
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner and int(owner) != (os.getpid() if pid is None else pid):
        return None  # the watchdog is meant for another process
    try:
        seconds = int(usec) / 1_000_000
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return seconds / 2 if seconds > 0 else None


class WatchdogPinger:
    """A thread that calls `notify.watchdog()` every `interval` seconds while `is_healthy()` holds."""

    def __init__(self, notify: SystemdNotify, interval: float, is_healthy: Callable[[], bool]) -> None:
        self._notify = notify
        self._interval = interval
        self._is_healthy = is_healthy
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcl-tuned-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=self._interval + 1)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            if self._is_healthy():
                self._notify.watchdog()
            else:
                log.warning("health check failed: not pinging the systemd watchdog")
