"""Runs one job at a time in a spawned child process and reports its progress and outcome.

TVM lives only in the child: a segfault or `os._exit` there becomes a failed job ("worker
crashed (signal 11, SIGSEGV)"), never a dead daemon. The child reports over a one-way pipe:
`Progress` values while it runs, then one `Succeeded` or `Failed`. A pipe rather than a
multiprocessing queue because `send` is synchronous: a child that dies right after reporting
still delivered the report. The child leads its own process group so that stopping a job also
stops the builder/runner processes TVM starts under it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from daemon.queue import one_line
from deploy.artifact import Latency, Manifest, remove_staging_of
from deploy.errors import PipelineError
from deploy.options import Progress, TuningOptions

log = logging.getLogger(__name__)

# run_pipeline's signature. None (the default) means deploy.pipeline.run_pipeline, imported in
# the child only, so the daemon process never imports TVM. Tests pass a module-level function.
PipelineFn = Callable[..., Manifest]

# A child that reported its outcome but hangs on exit (a stuck thread pool) is killed after this.
EXIT_AFTER_OUTCOME_SECONDS = 10.0


@dataclass(frozen=True)
class JobSpec:
    """Everything the child needs, picklable: which file, where to write, how to tune."""

    job_id: int
    model_path: Path
    output_dir: Path
    state_dir: Path
    options: TuningOptions

    @property
    def stderr_log(self) -> Path:
        """Where the child's stderr goes: TVM and LLVM print their last words there before an abort."""
        return self.state_dir / "logs" / f"job-{self.job_id}.stderr"


class Succeeded(BaseModel):
    model_config = ConfigDict(frozen=True)

    artifact_dir: str
    latency_ms: Latency
    warnings: list[str] = []  # the manifest's


class Failed(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: str


Outcome = Succeeded | Failed


def child_main(spec: JobSpec, conn: Connection, pipeline_fn: PipelineFn | None) -> None:
    """The child process: run the pipeline on `spec`, send progress and one outcome over `conn`."""
    lead_group_tied_to_parent()
    try:
        spec.stderr_log.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(spec.stderr_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        os.dup2(log_fd, 2)  # native code (LLVM's "LLVM ERROR: ...") writes to fd 2 before exit(1)
        os.close(log_fd)
    except OSError:
        pass  # a full or read-only state dir: keep the daemon's stderr
    # Ctrl-C in a terminal reaches the whole foreground group; the parent decides what stops a job.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if pipeline_fn is None:
        from deploy.pipeline import run_pipeline as pipeline_fn  # TVM is imported here, in the child
    send_lock = threading.Lock()  # the pipeline may report from a helper thread

    def on_progress(progress: Progress) -> None:
        with send_lock:
            conn.send(progress)

    try:
        manifest = pipeline_fn(
            spec.model_path,
            output_dir=spec.output_dir,
            state_dir=spec.state_dir,
            options=spec.options,
            on_progress=on_progress,
        )
        # The advice (onnxruntime is faster, and where the time goes) reaches the status file and its
        # table as the job's last warning.
        advice = [f"advice: {manifest.advice}"] if manifest.advice else []
        outcome: Outcome = Succeeded(artifact_dir=str(manifest.artifact_dir), latency_ms=manifest.latency_ms,
                                      warnings=[*manifest.warnings, *advice])
    except PipelineError as err:
        outcome = Failed(reason=one_line(str(err)) or type(err).__name__)
    except Exception as err:  # noqa: BLE001 - any failure of the pipeline is a failed job, with its reason
        outcome = Failed(reason=one_line(f"{type(err).__name__}: {err}"))
    with send_lock:
        conn.send(outcome)
    conn.close()


def exit_reason(exitcode: int, stderr_log: Path | None = None) -> str:
    """Why a child that sent no outcome is gone, from its exit code and the last line it printed."""
    if exitcode < 0:
        try:
            reason = f"worker crashed (signal {-exitcode}, {signal.Signals(-exitcode).name})"
        except ValueError:
            reason = f"worker crashed (signal {-exitcode})"
    elif exitcode > 0:
        reason = f"worker exited with code {exitcode} before reporting a result"
    else:
        reason = "worker exited without reporting a result"
    last = _last_line(stderr_log) if stderr_log is not None else ""
    return f"{reason}; it last printed: {last}" if last else reason


def _last_line(path: Path, tail_bytes: int = 4096) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - tail_bytes))
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return one_line(lines[-1], limit=300) if lines else ""


def lead_group_tied_to_parent(poll_seconds: float = 0.5) -> None:
    """In a child: lead a new process group, and SIGKILL that group if the parent dies.

    The group holds the child and the TVM helpers it starts, so the parent can stop all of them
    (`signal_group`). If the daemon itself is killed (SIGKILL, OOM), nobody would stop them: a
    job would go on measuring beside the restarted daemon's rerun of it. A forked watcher
    process (not a thread: a long native call in the job, TVM's search or LLVM, holds the GIL
    for seconds) notices the job being re-parented and takes the whole group down; it exits on
    its own when the job does.
    """
    os.setpgid(0, 0)
    # The daemon's pid as multiprocessing recorded it at spawn, not getppid(): a daemon killed while
    # this child was still starting up has already left it re-parented, and must count as dead.
    spawned_by = multiprocessing.parent_process()
    parent, job = (spawned_by.pid if spawned_by is not None else os.getppid()), os.getpid()
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    if os.fork() != 0:
        return
    try:  # the watcher: nothing of the job's but its group
        os.closerange(3, 1 << 16)  # the job's pipe to the daemon must read EOF when the job dies
        while True:
            job_parent = _parent_of(job)
            if job_parent is None:  # the job is gone
                os._exit(0)
            if job_parent != parent:  # the daemon died and the job was re-parented
                os.killpg(0, signal.SIGKILL)
            time.sleep(poll_seconds)
    finally:
        os._exit(0)


def _parent_of(pid: int) -> int | None:
    """The parent pid of `pid` from /proc, or None once it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
    return None if fields[0] == "Z" else int(fields[1])


def signal_group(process: multiprocessing.process.BaseProcess, sig: signal.Signals) -> None:
    """Send `sig` to the child's process group (it and the TVM helpers it started)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        # Not (yet) a group leader: signal the child alone.
        if sig == signal.SIGKILL:
            process.kill()
        else:
            process.terminate()


@dataclass
class _Running:
    job_id: int
    process: multiprocessing.process.BaseProcess
    conn: Connection
    outcome: Outcome | None = None
    outcome_at: float = 0.0
    started_at: float = 0.0  # time.monotonic() at start
    stderr_log: Path | None = None
    output_dir: Path | None = None


Report = tuple[int, Progress | Succeeded | Failed]


class Worker:
    """At most one child at a time; the main loop calls `poll()` every step."""

    def __init__(self, *, pipeline_fn: PipelineFn | None = None) -> None:
        self._pipeline_fn = pipeline_fn
        self._context = multiprocessing.get_context("spawn")  # no fork: the parent has threads
        self._running: _Running | None = None

    @property
    def running_job_id(self) -> int | None:
        return None if self._running is None else self._running.job_id

    @property
    def running_seconds(self) -> float:
        """How long the running job has run (0 when idle)."""
        return 0.0 if self._running is None else time.monotonic() - self._running.started_at

    def start(self, spec: JobSpec) -> None:
        """Start the child for `spec`; only when idle."""
        if self._running is not None:
            raise RuntimeError(f"worker busy with job {self._running.job_id}")
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child_main, args=(spec, writer, self._pipeline_fn), name=f"tcl-tuned-job-{spec.job_id}"
        )
        process.start()
        writer.close()  # the child holds the only writer, so its death reads as EOF here
        self._running = _Running(spec.job_id, process, reader, started_at=time.monotonic(),
                                 stderr_log=spec.stderr_log, output_dir=spec.output_dir)
        log.info("job %d: worker pid %d started on %s", spec.job_id, process.pid, spec.model_path)

    def poll(self) -> list[Report]:
        """Progress received since the last call; last, the outcome once the child has exited."""
        running = self._running
        if running is None:
            return []
        reports: list[Report] = [(running.job_id, p) for p in self._receive(running)]
        if running.process.exitcode is None:
            if running.outcome is not None and time.monotonic() - running.outcome_at > EXIT_AFTER_OUTCOME_SECONDS:
                log.warning("job %d: worker reported but did not exit; killing it", running.job_id)
                self._kill_group(running, signal.SIGKILL)
            return reports
        reports += [(running.job_id, p) for p in self._receive(running)]  # sent just before exiting
        outcome = running.outcome or Failed(reason=exit_reason(running.process.exitcode, running.stderr_log))
        self._finish(running)
        return [*reports, (running.job_id, outcome)]

    def stop(self, grace_seconds: float) -> tuple[int, Outcome | None] | None:
        """Stop the running child: SIGTERM, `grace_seconds`, SIGKILL.

        Return (job id, the outcome it reported before being stopped, else None). What it reports
        after the SIGTERM is dropped: a failure then is our doing, not the model's.
        """
        running = self._running
        if running is None:
            return None
        self._receive(running)
        outcome = running.outcome
        if running.process.is_alive():
            self._kill_group(running, signal.SIGTERM)
            running.process.join(grace_seconds)
            if running.process.is_alive():
                self._kill_group(running, signal.SIGKILL)
                running.process.join(5)
        self._finish(running)
        return running.job_id, outcome

    def _receive(self, running: _Running) -> list[Progress]:
        progress: list[Progress] = []
        try:
            while running.conn.poll():
                message = running.conn.recv()
                if isinstance(message, Progress):
                    progress.append(message)
                elif isinstance(message, (Succeeded, Failed)):
                    running.outcome, running.outcome_at = message, time.monotonic()
        except (EOFError, OSError):
            pass  # the child is gone; its exit code tells the rest
        return progress

    def _kill_group(self, running: _Running, sig: signal.Signals) -> None:
        signal_group(running.process, sig)

    def _finish(self, running: _Running) -> None:
        running.process.join(5)
        if running.process.is_alive():
            running.process.kill()
            running.process.join()
        try:
            os.killpg(running.process.pid, signal.SIGKILL)  # TVM helpers the child left behind
        except (ProcessLookupError, PermissionError):
            pass
        if running.output_dir is not None:
            remove_staging_of(running.output_dir, running.process.pid)  # a child killed mid-build
        running.conn.close()
        running.process.close()
        self._running = None
