"""Poll until a condition holds, with a deadline: the only kind of waiting these tests do."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")


def wait_until(condition: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.02, what: str = "") -> T:
    """Return the first truthy value of `condition()`; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


def step_until(daemon, condition: Callable[[], T], *, timeout: float = 20.0, what: str = "") -> T:
    """Drive `daemon.step()` until `condition()` is truthy (steps with the real clock)."""

    def stepped() -> T:
        daemon.step()
        return condition()

    return wait_until(stepped, timeout=timeout, what=what)


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], *, timeout: float) -> None:
    """Fail the test unless every process in `pids` is gone within `timeout` seconds."""
    for pid in pids:
        wait_until(lambda: not process_alive(pid), timeout=timeout, what=f"process {pid} to be gone")
