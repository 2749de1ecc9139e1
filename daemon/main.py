"""The daemon loop: watcher -> queue -> worker -> status file, one testable step at a time.

Signal handlers only set a flag; `run()` notices it between steps and shuts down: the running
job's child is stopped (SIGTERM, grace, SIGKILL) and the job goes back to `queued`. Its measured
trials stay in the tuning database under state_dir, so the next run picks up from there.
`step(now)` takes the clock as an argument so tests drive the loop without sleeping.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path

from daemon.config import DaemonConfig
from daemon.distiller import Distiller, RoundSpec
from daemon.platforms import PlatformEntry, summarise_all
from daemon.notify import SystemdNotify, WatchdogPinger, watchdog_interval
from daemon.queue import RUNNING_STAGES, Job, JobQueue, input_problem
from deploy.intake import link_id, sha256_of, symlink_refusal
from deploy.layout import database_dir
from daemon.status import DaemonInfo, DaemonState, ModelEntry, StatusFile, write_status
from daemon.watcher import Watcher
from daemon.worker import Failed, JobSpec, Succeeded, Worker
from deploy.options import Progress
from deploy.progress import progress_line
from tcl_core.continual import record_failure

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The daemon cannot start (a folder cannot be created or read); str(err) says which and why."""


def package_version() -> str:
    try:
        return metadata.version("tcl-tuned")
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


class Daemon:
    """Owns the watcher, queue and worker; `start`, then `step` until asked to stop, then `shutdown`."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        watcher: Watcher | None = None,
        worker: Worker | None = None,
        distiller: Distiller | None = None,
        notify: SystemdNotify | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.watcher = watcher or Watcher(
            config.watch_dir,
            settle_seconds=config.settle_seconds,
            force_polling=config.force_polling,
            poll_interval_seconds=config.poll_interval_seconds,
        )
        self.worker = worker or Worker()
        self.distiller = distiller or Distiller()
        self._notify = notify or SystemdNotify()
        self._clock = clock
        self._queue: JobQueue | None = None
        self._state: DaemonState = "starting"
        self._started_at = datetime.now(UTC)
        self._stop_requested = False
        self._exit_code = 0
        self._last_step_monotonic = time.monotonic()
        self._last_published: tuple | None = None
        self._last_write_at = -math.inf
        self._pinger: WatchdogPinger | None = None
        self._platforms: list[PlatformEntry] = []
        self._distill_due = True  # look for a platform with enough new measurements when next idle
        self._distill_records = 0  # records of the platform being distilled when its round started
        self._schedule_checked_at: float | None = None  # wall clock of the last look at [distill] daily_at
        self._scheduled_rounds = False  # daily_at passed: any new measurement earns a round until none is left

    @property
    def queue(self) -> JobQueue:
        if self._queue is None:
            raise RuntimeError("daemon not started")
        return self._queue

    @property
    def state(self) -> DaemonState:
        return self._state

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    @property
    def exit_code(self) -> int:
        """What `run()` returns: 0 after a requested stop, 1 after the watcher died."""
        return self._exit_code

    def request_stop(self) -> None:
        """Ask `run()` to stop after the current step. Safe to call from a signal handler."""
        self._stop_requested = True

    def start(self, now: float | None = None) -> None:
        """Create folders, open the queue (re-queueing interrupted jobs), start watching, tell systemd."""
        now = self._clock() if now is None else now
        cfg = self.config
        for folder in (cfg.watch_dir, cfg.output_dir, cfg.state_dir, cfg.status_file.parent):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise StartupError(f"cannot create {folder}: {err.strerror or err}") from None
        if not os.access(cfg.watch_dir, os.R_OK | os.X_OK):
            raise StartupError(f"cannot read watch folder {cfg.watch_dir}")
        self._queue = JobQueue.open(cfg.state_dir)
        if self._queue.recovered_from is not None:
            log.error("the job queue could not be read; moved it to %s and started a fresh one",
                      self._queue.recovered_from)
        self._refresh_platforms()
        self._publish(now, force=True)
        try:
            mode = self.watcher.start()
            self.watcher.scan(now)
        except OSError as err:
            raise StartupError(f"cannot watch {cfg.watch_dir}: {err}") from None
        self._state = "watching"
        self._publish(now, force=True)
        log.info("watching %s (%s); state in %s, artifacts to %s", cfg.watch_dir, mode, cfg.state_dir, cfg.output_dir)
        self._notify.ready(status=f"watching {cfg.watch_dir} ({mode})")
        interval = watchdog_interval()
        if interval is not None:
            max_stall = max(interval, 10 * cfg.tick_seconds)
            self._pinger = WatchdogPinger(self._notify, interval, lambda: self.is_healthy(max_stall))
            self._pinger.start()

    def step(self, now: float | None = None) -> None:
        """One iteration: admit files, collect the worker and distiller, start the next job or round, write status.

        Jobs wait while a round runs (a round takes a minute or two), and a round starts only when
        no job is running or queued, so distillation never competes with measurements for the CPU.
        """
        now = self._clock() if now is None else now
        self._last_step_monotonic = time.monotonic()
        for path in self.watcher.ready_paths(now):
            self._admit(path)
        self._collect_worker()
        self._collect_distiller()
        self._check_schedule(now)
        if self.worker.running_job_id is None and self.distiller.running_platform is None:
            self._start_next_job()
            if self.worker.running_job_id is None:
                self._maybe_distil()
        self._publish(now)
        if not self.watcher.is_alive():
            # Watching is the daemon's purpose: exit non-zero so systemd (Restart=on-failure) restarts it.
            log.error("the file observer stopped (was %s removed?); stopping", self.config.watch_dir)
            self._exit_code, self._stop_requested = 1, True

    def run(self) -> int:
        """Start, step every tick_seconds until SIGTERM/SIGINT (or request_stop), shut down.

        Return the exit code: 0 for a requested stop, 1 when the watcher died.
        """
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not self._stop_requested:
                self.step()
                time.sleep(self.config.tick_seconds)
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._exit_code

    def shutdown(self, now: float | None = None) -> None:
        """Stop the running job (back to queued), stop watching, write the status as `stopped`."""
        if self._state == "stopped":
            return
        self._state = "stopping"
        self._notify.stopping()
        self._publish(self._clock() if now is None else now, force=True)
        self.distiller.stop(self.config.stop_grace_seconds)  # an unfinished round is simply run again
        stopped = self.worker.stop(self.config.stop_grace_seconds)
        if stopped is not None:
            job_id, outcome = stopped
            if outcome is None:
                self.queue.requeue(job_id)
                log.info("job %d: stopped with the daemon, back to queued", job_id)
            else:
                self._record_outcome(job_id, outcome)  # it finished just before we stopped it
        if self._pinger is not None:
            self._pinger.stop()
        self.watcher.stop()
        self._state = "stopped"
        self._publish(self._clock() if now is None else now, force=True)
        if self._queue is not None:
            self._queue.close()
        log.info("stopped")

    def is_healthy(self, max_stall: float) -> bool:
        """The main loop stepped within `max_stall` seconds and the observer still runs."""
        return time.monotonic() - self._last_step_monotonic < max_stall and self.watcher.is_alive()

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop_requested = True  # only a flag: the loop does the work, outside the handler

    def _admit(self, path: Path) -> None:
        if path.is_symlink():  # refused here, before anything reads what it points at
            self._refuse_link(path)
            return
        try:
            sha256 = sha256_of(path)
        except FileNotFoundError:
            log.info("%s vanished before it could be queued", path)
            return
        except OSError as err:
            log.warning("cannot read %s: %s; not queued", path, err)
            return
        job = self.queue.enqueue(path, sha256)
        if job is not None:
            log.info("job %d: queued %s (sha256 %s)", job.id, path.name, sha256[:8])
            return
        known = self.queue.by_sha256(sha256)
        if known is not None and known.path != path and self.queue.add_duplicate(path, sha256):
            log.info("%s has the content of job %d (%s, %s): not tuned again; the status file shows it as a "
                     "duplicate of %s", path.name, known.id, known.path.name, known.state, known.name)

    def _refuse_link(self, path: Path) -> None:
        try:
            job = self.queue.enqueue(path, link_id(path))
        except OSError:  # the link vanished between the event and now
            return
        if job is not None:
            reason = symlink_refusal(path)
            self.queue.mark_failed(job.id, reason)
            log.warning("job %d: failed: %s", job.id, reason)

    def _start_next_job(self) -> None:
        while (job := self.queue.next_queued()) is not None:
            problem = input_problem(job)
            if problem is not None:
                self.queue.mark_failed(job.id, problem)
                log.warning("job %d: failed: %s", job.id, problem)
                continue
            options = self.config.tuning.model_copy(update={"runner": self.config.runner})  # [runner] is top level
            spec = JobSpec(job.id, job.path, self.config.output_dir, self.config.state_dir, options)
            try:
                self.worker.start(spec)
            except OSError as err:
                self.queue.mark_failed(job.id, f"cannot start worker: {err}")
                continue
            self.queue.mark_started(job.id)
            return

    def _collect_worker(self) -> None:
        for job_id, report in self.worker.poll():
            if isinstance(report, Progress):
                if report.stage in RUNNING_STAGES:  # done/failed come only from the outcome
                    self.queue.set_progress(job_id, report.stage, report.trials_done, report.trials_total,
                                            best_estimate_ms=report.best_estimate_ms,
                                            trials_per_minute=report.trials_per_minute,
                                            eta_seconds=report.eta_seconds)
                if report.stage == "tuning" and report.trials_per_minute is not None:  # one per measured batch
                    log.info("job %d %s: %s", job_id, self.queue.get(job_id).path.name, progress_line(report))
                if report.warning:
                    self.queue.set_warning(job_id, report.warning)
                    log.warning("job %d: %s", job_id, report.warning)
            else:
                self._record_outcome(job_id, report)
        self._enforce_time_limit()

    def _enforce_time_limit(self) -> None:
        """A job past `job_timeout_seconds` (a hung import, a runaway search) is stopped and failed."""
        limit = self.config.job_timeout_seconds
        if not limit or self.worker.running_job_id is None or self.worker.running_seconds <= limit:
            return
        stopped = self.worker.stop(self.config.stop_grace_seconds)
        if stopped is not None:
            job_id, outcome = stopped
            self._record_outcome(job_id, outcome or Failed(
                reason=f"stopped after {limit:g} s, the job time limit (job_timeout_seconds)"))

    def _check_schedule(self, now: float) -> None:
        """Note when the local clock has passed `[distill] daily_at` since the last step."""
        daily = self.config.distill.daily_at
        if daily is None:
            return
        previous, self._schedule_checked_at = self._schedule_checked_at, now
        if previous is None:
            return  # the first look: a time passed before the daemon started is not made up for
        local_now = datetime.fromtimestamp(now)
        latest = datetime.combine(local_now.date(), daily)  # today's daily_at, local and naive
        if latest > local_now:
            latest -= timedelta(days=1)
        if previous < latest.timestamp() <= now:
            log.info("distill daily_at %s passed: a round for every platform with new measurements",
                     daily.strftime("%H:%M"))
            self._scheduled_rounds = self._distill_due = True

    def _maybe_distil(self) -> None:
        """Start a round for the first platform with `min_new_records` measurements since its last one.

        After `daily_at` has passed, one new measurement is enough, until no platform has any.
        """
        settings = self.config.distill
        if not settings.enabled or not self._distill_due:
            return
        self._distill_due = False  # until the next job or round ends
        needed = 1 if self._scheduled_rounds else settings.min_new_records
        for entry in self._platforms:
            if entry.records_since_round < needed:
                continue
            spec = RoundSpec(entry.name, database_dir(self.config.state_dir, entry.name), self.config.state_dir,
                             settings.round_settings())
            try:
                self.distiller.start(spec)
            except OSError as err:
                log.error("cannot start a distillation round for %s: %s", entry.name, err)
                continue
            self._distill_records = entry.records
            self._refresh_platforms()
            return
        self._scheduled_rounds = False  # every platform is distilled up to date

    def _collect_distiller(self) -> None:
        outcome = self.distiller.poll()
        if outcome is None:
            return
        if outcome.error is not None:
            log.warning("distillation for %s failed: %s", outcome.platform, outcome.error)
            try:
                record_failure(self.config.state_dir, outcome.platform, self._distill_records, outcome.error)
            except OSError as err:
                log.error("cannot record the failed round: %s", err)
        else:
            result = outcome.result
            log.info("distillation for %s: v%s %s: %s", outcome.platform, result["version"], result["decision"],
                     result["reason"])
        self._distill_due = True  # another platform may be waiting
        self._refresh_platforms()

    def _refresh_platforms(self) -> None:
        try:
            self._platforms = summarise_all(self.config.state_dir, distilling=self.distiller.running_platform)
        except OSError as err:  # the status file goes on without it; the next refresh tries again
            log.error("cannot read the platforms under %s: %s", self.config.state_dir, err)

    def _record_outcome(self, job_id: int, outcome: Succeeded | Failed) -> None:
        self._distill_due = True
        if isinstance(outcome, Succeeded):
            self.queue.mark_done(job_id, outcome.artifact_dir, outcome.latency_ms, outcome.warnings)
            log.info("job %d: done -> %s (tvm %.3f ms)", job_id, outcome.artifact_dir, outcome.latency_ms.tvm)
            for warning in outcome.warnings:
                log.warning("job %d: %s", job_id, warning)
        else:
            self.queue.mark_failed(job_id, outcome.reason)
            log.warning("job %d: failed: %s", job_id, outcome.reason)
        self._refresh_platforms()  # its measurements are in the platform's database now

    def _publish(self, now: float, *, force: bool = False) -> None:
        """Rewrite the status file when anything changed, or when the heartbeat is due."""
        if self._queue is None:
            return  # nothing honest to report before the queue opened
        jobs = self._queue.all_jobs()
        by_content = {job.sha256: job for job in jobs}
        models = [_entry(job) for job in jobs] + [
            _entry(by_content[sha256], name=name, duplicate_of=by_content[sha256].name, queued_at=seen_at)
            for name, sha256, seen_at in self._queue.duplicates() if sha256 in by_content]
        content = (self._state, self.watcher.mode, models, self._platforms)
        if not force and content == self._last_published and now - self._last_write_at < self.config.heartbeat_seconds:
            return
        info = DaemonInfo(
            state=self._state,
            pid=os.getpid(),
            started_at=self._started_at,
            heartbeat_at=datetime.fromtimestamp(now, UTC),
            version=package_version(),
            watch_mode=self.watcher.mode,
        )
        try:
            write_status(self.config.status_file, StatusFile(daemon=info, models=models, platforms=self._platforms))
        except OSError as err:  # a full disk must not stop tuning; the next step tries again
            log.error("cannot write status file %s: %s", self.config.status_file, err)
            return
        self._last_published, self._last_write_at = content, now


def _entry(job: Job, *, name: str | None = None, duplicate_of: str | None = None,
           queued_at: datetime | None = None) -> ModelEntry:
    """The status entry of a job; of a duplicate file (`name`), the job's progress under that name."""
    return ModelEntry(
        name=name or job.name,
        duplicate_of=duplicate_of,
        sha256=job.sha256,
        state=job.state,
        trials_done=job.trials_done,
        trials_total=job.trials_total,
        best_estimate_ms=job.best_estimate_ms,
        trials_per_minute=job.trials_per_minute,
        eta_seconds=job.eta_seconds,
        artifact_dir=job.artifact_dir,
        latency_ms=job.latency_ms,
        error=job.error,
        warning=job.warning,
        queued_at=queued_at or job.queued_at,
        updated_at=job.updated_at,
    )
