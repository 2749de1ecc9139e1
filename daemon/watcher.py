"""Watch folder -> complete model files, in the watchdog shape: observer thread -> inbox -> main loop.

A file counts as complete when
  * inotify saw it closed after writing (FileClosedEvent), or it was renamed/moved into the folder;
  * otherwise (start-up scan, polling observer) its size and mtime stayed unchanged for
    `settle_seconds`, judged by the clock the caller passes in, so tests need no sleeps.
With inotify, created/modified events are ignored on purpose: a writer that pauses longer than
the settle time would otherwise be queued half-written. The observer thread only puts events in
a thread-safe inbox; all decisions happen in `Watcher.ready_paths(now)` on the main loop.
"""

from __future__ import annotations

import logging
import os
import queue
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserverVFS

log = logging.getLogger(__name__)

IGNORED_SUFFIXES = (".tmp", ".part")


def is_model_candidate(path: Path) -> bool:
    """True for `*.onnx` names a person means to submit: not hidden, not a `.tmp`/`.part` upload.

    The `<stem>.json` sidecar next to a model is read by the pipeline, never queued itself.
    """
    name = path.name
    return not name.startswith(".") and not name.endswith(IGNORED_SUFFIXES) and name.endswith(".onnx")


@dataclass(frozen=True)
class FileEvent:
    """What the observer thread reports: `complete` needs no more checks, `changed` must settle."""

    path: Path
    kind: Literal["complete", "changed"]


class EventInbox:
    """The thread-safe hand-over from the observer thread to the main loop."""

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[FileEvent] = queue.SimpleQueue()

    def put(self, event: FileEvent) -> None:
        self._events.put(event)

    def drain(self) -> list[FileEvent]:
        """Everything queued so far, oldest first, without blocking."""
        drained = []
        while True:
            try:
                drained.append(self._events.get_nowait())
            except queue.Empty:
                return drained


class _InboxHandler(FileSystemEventHandler):
    """Runs on the observer thread: translate watchdog events, decide nothing else."""

    def __init__(self, inbox: EventInbox, watch_dir: Path, *, polling: bool) -> None:
        self._inbox = inbox
        self._watch_dir = watch_dir
        self._polling = polling

    def on_any_event(self, event: FileSystemEvent) -> None:
        if isinstance(event, FileMovedEvent):
            # A rename is atomic: the destination is complete (an empty dest means moved out).
            if event.dest_path:
                self._put(event.dest_path, "complete")
        elif isinstance(event, FileClosedEvent):
            self._put(event.src_path, "complete")
        elif isinstance(event, FileCreatedEvent) and os.path.islink(event.src_path):
            # symlink(2) is atomic and never closes a written file: complete at once (to be refused).
            self._put(event.src_path, "complete")
        elif self._polling and isinstance(event, (FileCreatedEvent, FileModifiedEvent)):
            # The polling observer never reports a close, so these start (or restart) the settle check.
            self._put(event.src_path, "changed")

    def _put(self, raw_path: str | bytes, kind: Literal["complete", "changed"]) -> None:
        path = Path(os.fsdecode(raw_path))
        if path.parent == self._watch_dir and is_model_candidate(path):
            self._inbox.put(FileEvent(path, kind))


@dataclass(frozen=True)
class _Pending:
    size: int
    mtime_ns: int
    unchanged_since: float


class Watcher:
    """Owns the observer; `ready_paths(now)` returns each complete model file once per report."""

    def __init__(
        self,
        watch_dir: Path,
        *,
        settle_seconds: float,
        force_polling: bool = False,
        poll_interval_seconds: float = 1.0,
        stat: Callable[[Path], os.stat_result] = os.lstat,  # a link is settled as a link, target unread
    ) -> None:
        self.watch_dir = Path(watch_dir).absolute()
        self.inbox = EventInbox()
        self.mode: Literal["inotify", "polling"] | None = None
        self._settle_seconds = settle_seconds
        self._force_polling = force_polling
        self._poll_interval = poll_interval_seconds
        self._stat = stat
        self._pending: dict[Path, _Pending] = {}
        self._observer: BaseObserver | None = None

    def start(self) -> str:
        """Start the inotify observer, or the polling one if inotify cannot start; return the mode."""
        if not self._force_polling:
            try:
                self._observer = self._start_observer(polling=False)
                self.mode = "inotify"
                return self.mode
            except OSError as err:  # e.g. fs.inotify.max_user_instances reached, or no inotify here
                log.warning("inotify observer failed to start (%s); polling every %.1fs", err, self._poll_interval)
        self._observer = self._start_observer(polling=True)
        self.mode = "polling"
        return self.mode

    def _start_observer(self, *, polling: bool) -> BaseObserver:
        if polling:
            # lstat, not stat: a link (dangling or not) is seen as itself, to be refused.
            observer: BaseObserver = PollingObserverVFS(os.lstat, os.scandir, polling_interval=self._poll_interval)
        else:
            from watchdog.observers.inotify import InotifyObserver  # Linux only; the fallback covers the rest

            # Full events: a file moved in from outside arrives as a move (dest set), not as a create.
            observer = InotifyObserver(generate_full_events=True)
        observer.schedule(_InboxHandler(self.inbox, self.watch_dir, polling=polling), str(self.watch_dir))
        observer.daemon = True
        observer.start()
        return observer

    def scan(self, now: float) -> None:
        """Put every model file already in the folder under the settle check (files dropped while down)."""
        for entry in sorted(self.watch_dir.iterdir()):
            if (entry.is_file() or entry.is_symlink()) and is_model_candidate(entry):  # links: refused with a reason
                self._track(entry, now)

    def ready_paths(self, now: float) -> list[Path]:
        """Drain the inbox, advance settle checks to `now`, return the paths complete as of now."""
        ready: list[Path] = []
        for event in self.inbox.drain():
            if event.kind == "complete":
                self._pending.pop(event.path, None)
                if event.path not in ready:
                    ready.append(event.path)
            else:
                self._track(event.path, now)
        for path, seen in list(self._pending.items()):
            try:
                st = self._stat(path)
            except FileNotFoundError:
                del self._pending[path]
                continue
            if (st.st_size, st.st_mtime_ns) != (seen.size, seen.mtime_ns):
                self._pending[path] = _Pending(st.st_size, st.st_mtime_ns, now)
            elif now - seen.unchanged_since >= self._settle_seconds:
                del self._pending[path]
                if path not in ready:
                    ready.append(path)
        return ready

    def _track(self, path: Path, now: float) -> None:
        try:
            st = self._stat(path)
        except FileNotFoundError:
            return
        seen = self._pending.get(path)
        if seen is None or (st.st_size, st.st_mtime_ns) != (seen.size, seen.mtime_ns):
            self._pending[path] = _Pending(st.st_size, st.st_mtime_ns, now)

    def is_alive(self) -> bool:
        """The observer thread and its emitter still run (the watchdog ping depends on this)."""
        observer = self._observer
        return observer is not None and observer.is_alive() and all(e.is_alive() for e in observer.emitters)

    def stop(self) -> None:
        """Stop the observer thread and wait for it."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
