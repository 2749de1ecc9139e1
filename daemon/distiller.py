"""Runs one distillation round (tcl_core.continual.run_round) at a time in a spawned child.

Like the job worker (daemon/worker.py) the child owns torch and TVM, so a crash there is a
round that failed with a reason, never a dead daemon. The child sends one `RoundOutcome` (the
round's result as a dict, or an error) over a pipe and exits.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from daemon.queue import one_line
from daemon.worker import exit_reason, lead_group_tied_to_parent, signal_group

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundSpec:
    """Picklable: which platform, where its data and students live, how to train."""

    platform: str
    database_dir: Path
    state_dir: Path
    settings: object  # tcl_core.continual.RoundSettings (imported in the child only)


@dataclass(frozen=True)
class RoundOutcome:
    platform: str
    result: dict | None   # asdict(RoundResult) when the round ran to a decision
    error: str | None     # why it did not


def round_child(spec: RoundSpec, conn: Connection) -> None:
    lead_group_tied_to_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from tcl_core.continual import run_round

        result = run_round(spec.platform, spec.database_dir, spec.state_dir, spec.settings,
                           log=lambda line: log.info("%s", line))
        outcome = RoundOutcome(spec.platform, asdict(result), None)
    except Exception as err:  # noqa: BLE001 - a failed round is a record, not a crash
        outcome = RoundOutcome(spec.platform, None, one_line(f"{type(err).__name__}: {err}"))
    conn.send(outcome)
    conn.close()


class Distiller:
    """At most one round at a time; the main loop calls `poll()` every step."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._running: tuple[str, multiprocessing.process.BaseProcess, Connection] | None = None
        self._outcome: RoundOutcome | None = None

    @property
    def running_platform(self) -> str | None:
        return None if self._running is None else self._running[0]

    def start(self, spec: RoundSpec) -> None:
        if self._running is not None:
            raise RuntimeError(f"a round for {self._running[0]} is running")
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(target=round_child, args=(spec, writer), name="tcl-tuned-distill")
        process.start()
        writer.close()
        self._running, self._outcome = (spec.platform, process, reader), None
        log.info("distilling a new student for %s (pid %d)", spec.platform, process.pid)

    def poll(self) -> RoundOutcome | None:
        """The finished round's outcome once the child has exited, else None."""
        if self._running is None:
            return None
        platform, process, conn = self._running
        self._receive(conn)
        if process.exitcode is None:
            return None
        self._receive(conn)
        outcome = self._outcome or RoundOutcome(platform, None, exit_reason(process.exitcode))
        self._finish()
        return outcome

    def stop(self, grace_seconds: float) -> None:
        """Stop a running round (its half-made version folder is never promoted)."""
        if self._running is None:
            return
        _, process, _ = self._running
        if process.is_alive():
            signal_group(process, signal.SIGTERM)
            process.join(grace_seconds)
            if process.is_alive():
                signal_group(process, signal.SIGKILL)
        self._finish()

    def _receive(self, conn: Connection) -> None:
        try:
            while conn.poll():
                message = conn.recv()
                if isinstance(message, RoundOutcome):
                    self._outcome = message
        except (EOFError, OSError):
            pass

    def _finish(self) -> None:
        _, process, conn = self._running
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        conn.close()
        process.close()
        self._running = None
