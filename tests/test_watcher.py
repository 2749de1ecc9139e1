"""Watcher: which files count as complete, when, and which names are never queued."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from daemon.watcher import FileEvent, Watcher, is_model_candidate
from tests.waiting import wait_until


@pytest.fixture
def watch_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "watch"
    folder.mkdir()
    return folder


@pytest.fixture
def watcher_factory(watch_dir):
    started: list[Watcher] = []

    def make(**kwargs) -> Watcher:
        watcher = Watcher(watch_dir, **{"settle_seconds": 0.2, **kwargs})
        watcher.start()
        started.append(watcher)
        return watcher

    yield make
    for watcher in started:
        watcher.stop()


def _next_ready(watcher: Watcher, timeout: float = 10.0) -> list[Path]:
    return wait_until(lambda: watcher.ready_paths(time.time()), timeout=timeout, what="a ready path")


@pytest.mark.parametrize(
    ("name", "queued"),
    [
        ("resnet.onnx", True),
        ("resnet.onnx.tmp", False),
        ("resnet.onnx.part", False),
        (".resnet.onnx", False),
        ("resnet.json", False),  # the sidecar
        ("resnet.txt", False),
        ("resnet.tmp", False),
    ],
)
def test_model_candidates(name, queued):
    assert is_model_candidate(Path("/w") / name) is queued


def test_inotify_reports_file_moved_in_from_outside(watcher_factory, watch_dir, tmp_path):
    watcher = watcher_factory()
    assert watcher.mode == "inotify"
    outside = tmp_path / "model.onnx"
    outside.write_bytes(b"model bytes")
    os.rename(outside, watch_dir / "model.onnx")
    assert _next_ready(watcher) == [watch_dir / "model.onnx"]


def test_upload_renamed_from_part_is_reported_once(watcher_factory, watch_dir):
    watcher = watcher_factory()
    part = watch_dir / "model.onnx.part"
    part.write_bytes(b"uploaded")  # closed, but a .part name: ignored
    os.rename(part, watch_dir / "model.onnx")
    assert _next_ready(watcher) == [watch_dir / "model.onnx"]


def _reported_until(watcher: Watcher, path: Path, clock) -> list[Path]:
    """Every path reported by steps until `path` is; steps use `clock`, so settle time passes at will."""
    reported: list[Path] = []

    def step() -> bool:
        reported.extend(watcher.ready_paths(next(clock)))
        return path in reported

    wait_until(step, timeout=10.0, what=f"{path.name} to be reported")
    return reported


def test_slow_write_is_reported_once_after_close(watcher_factory, watch_dir):
    """A writer pausing far longer than settle_seconds must not make a half-written file look complete."""
    watcher = watcher_factory(settle_seconds=2.0)
    clock = itertools.count(start=1000.0, step=10.0)  # every step is 10 s later: 5x settle_seconds
    slow = watch_dir / "slow.onnx"
    with open(slow, "wb") as handle:
        for chunk in range(4):
            handle.write(bytes([chunk]) * 4096)
            handle.flush()
            time.sleep(0.05)  # the writer's own pause between chunks
            # inotify delivers in order: once this sentinel is reported, the chunk's events were handled.
            sentinel = watch_dir / f"sentinel{chunk}.onnx"
            sentinel.write_bytes(b"s")
            assert slow not in _reported_until(watcher, sentinel, clock), f"reported while open, chunk {chunk}"

    assert _reported_until(watcher, slow, clock) == [slow]
    last = watch_dir / "last.onnx"
    last.write_bytes(b"s")
    assert _reported_until(watcher, last, clock) == [last]  # not reported a second time


def test_ignored_names_are_never_reported(watcher_factory, watch_dir):
    watcher = watcher_factory()
    for name in ("a.onnx.tmp", "b.onnx.part", ".c.onnx", "d.json", "e.txt"):
        (watch_dir / name).write_bytes(b"x")
    os.mkdir(watch_dir / "f.onnx")  # a folder named like a model
    (watch_dir / "good.onnx").write_bytes(b"x")  # written last: its report means the others were seen
    assert _next_ready(watcher) == [watch_dir / "good.onnx"]
    assert watcher.ready_paths(time.time() + 60) == []


def test_startup_scan_settles_by_injected_clock(watch_dir):
    """Files found at start-up wait until size+mtime held still for settle_seconds (no real time passes)."""
    present = watch_dir / "present.onnx"
    present.write_bytes(b"12345")
    (watch_dir / ".hidden.onnx").write_bytes(b"x")
    watcher = Watcher(watch_dir, settle_seconds=2.0)  # not started: the scan and the check need no observer
    watcher.scan(now=100.0)
    assert watcher.ready_paths(now=101.9) == []
    with open(present, "ab") as handle:  # still growing: the settle clock restarts
        handle.write(b"678")
    assert watcher.ready_paths(now=102.5) == []
    assert watcher.ready_paths(now=104.4) == []
    assert watcher.ready_paths(now=104.5) == [present]
    assert watcher.ready_paths(now=200.0) == []  # reported once


@pytest.mark.parametrize("polling", [False, True])
def test_a_symlink_is_reported_as_itself_live_and_at_startup(watcher_factory, watch_dir, tmp_path, polling):
    """Links are reported (to be refused by the daemon), dangling ones too; nothing reads the target."""
    (watch_dir / "old-link.onnx").symlink_to(tmp_path / "nowhere.onnx")  # dangling, there before start
    watcher = watcher_factory(force_polling=polling, poll_interval_seconds=0.1)
    watcher.scan(now=time.time())
    (watch_dir / "new-link.onnx").symlink_to(tmp_path / "missing-too.onnx")
    seen: set[Path] = set()
    wait_until(lambda: seen.update(watcher.ready_paths(time.time())) or len(seen) == 2, what="both links")
    assert seen == {watch_dir / "old-link.onnx", watch_dir / "new-link.onnx"}


def test_vanished_file_is_dropped_from_settle_check(watch_dir):
    gone = watch_dir / "gone.onnx"
    gone.write_bytes(b"x")
    watcher = Watcher(watch_dir, settle_seconds=1.0)
    watcher.scan(now=0.0)
    gone.unlink()
    assert watcher.ready_paths(now=5.0) == []


def test_inbox_events_are_decided_by_ready_paths(watch_dir):
    """The main loop's decision works on events put by any thread, without an observer."""
    watcher = Watcher(watch_dir, settle_seconds=1.0)
    changed = watch_dir / "changed.onnx"
    changed.write_bytes(b"x")
    watcher.inbox.put(FileEvent(watch_dir / "done.onnx", "complete"))
    watcher.inbox.put(FileEvent(changed, "changed"))
    assert watcher.ready_paths(now=10.0) == [watch_dir / "done.onnx"]
    assert watcher.ready_paths(now=11.0) == [changed]


def test_polling_mode_waits_for_settle(watcher_factory, watch_dir):
    watcher = watcher_factory(force_polling=True, poll_interval_seconds=0.1, settle_seconds=0.3)
    assert watcher.mode == "polling"
    model = watch_dir / "polled.onnx"
    model.write_bytes(b"abc")
    written_at = time.time()
    assert _next_ready(watcher) == [model]
    assert time.time() - written_at >= 0.3


def test_falls_back_to_polling_when_inotify_cannot_start(watcher_factory, watch_dir, monkeypatch):
    import watchdog.observers.inotify as inotify

    def no_inotify(**kwargs):
        raise OSError(24, "inotify instance limit reached")

    monkeypatch.setattr(inotify, "InotifyObserver", no_inotify)
    watcher = watcher_factory(poll_interval_seconds=0.1)
    assert watcher.mode == "polling" and watcher.is_alive()
    (watch_dir / "m.onnx").write_bytes(b"abc")
    assert _next_ready(watcher) == [watch_dir / "m.onnx"]


def test_is_alive_follows_the_observer(watcher_factory):
    watcher = watcher_factory()
    assert watcher.is_alive()
    watcher.stop()
    assert not watcher.is_alive()
