"""The persistent job queue: one row per distinct model content, surviving restarts.

Storage is SQLite (stdlib sqlite3) in WAL mode at `<state_dir>/jobs.sqlite3`, chosen over JSON +
filelock because every change is one small transaction that is either on disk whole or not at
all (a crash mid-write loses nothing), the UNIQUE index on sha256 is the dedup rule itself, and
progress updates touch one row instead of rewriting a file. Only the daemon's main thread uses
the connection. `PRAGMA user_version` carries the schema version.

Dedup: a file whose sha256 was ever queued, done or failed is not queued again, whatever its
name. To retry a failed model, change its content (or remove its row). Content that failed
before it ran (its file vanished or changed while queued) may be dropped again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from deploy.artifact import Latency
from deploy.intake import sha256_of, symlink_refusal
from deploy.options import Stage

# 2: warning; 3: duplicates (the same content dropped under another name); 4: best estimate, rate, ETA
SCHEMA_VERSION = 4
RUNNING_STAGES: tuple[Stage, ...] = ("tuning", "building", "verifying")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    trials_done INTEGER NOT NULL DEFAULT 0,
    trials_total INTEGER NOT NULL DEFAULT 0,
    artifact_dir TEXT,
    latency_tvm REAL,
    latency_untuned REAL,
    latency_onnxruntime REAL,
    error TEXT,
    warning TEXT,
    best_estimate_ms REAL,
    trials_per_minute REAL,
    eta_seconds REAL,
    queued_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    updated_at TEXT NOT NULL
)
"""
# Columns later schemas added to `jobs`: an older queue gains them and keeps its jobs.
_ADDED_COLUMNS = {"warning": "TEXT", "best_estimate_ms": "REAL", "trials_per_minute": "REAL", "eta_seconds": "REAL"}
# A file whose content a job already has: shown under its own name, pointing at that job.
_DUPLICATES_SCHEMA = """
CREATE TABLE IF NOT EXISTS duplicates (
    path TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    seen_at TEXT NOT NULL
)
"""


class Job(BaseModel):
    """One model's way through the daemon, as stored."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    path: Path
    sha256: str
    state: Stage
    trials_done: int
    trials_total: int
    artifact_dir: str | None
    latency_ms: Latency | None
    error: str | None
    warning: str | None
    best_estimate_ms: float | None = None  # the running search's, as deploy.options.Progress has them
    trials_per_minute: float | None = None
    eta_seconds: float | None = None
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


def one_line(text: str, limit: int = 500) -> str:
    """Collapse a reason to one line a status table can show."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# A job that starts again has measured nothing yet in this run.
_NO_RATE = {"best_estimate_ms": None, "trials_per_minute": None, "eta_seconds": None}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class JobQueue:
    """Jobs in SQLite; every method commits before returning."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = Path(db_path)
        self.recovered_from: Path | None = None  # set by `open` when it had to move a corrupt file aside
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: every change is a single statement, so each one is its own transaction.
        self._db = sqlite3.connect(self.db_path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a job marked done stays done after a power cut
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, 2, 3, SCHEMA_VERSION):
            raise RuntimeError(f"{self.db_path}: job schema {version}, this daemon knows {SCHEMA_VERSION}")
        self._db.execute(_SCHEMA)
        self._db.execute(_DUPLICATES_SCHEMA)
        present = {row["name"] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in present:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")  # names from this module only
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @classmethod
    def open(cls, state_dir: Path) -> JobQueue:
        """The queue of `state_dir`, with jobs a dead daemon left running put back to queued.

        A queue file SQLite cannot read (disk trouble, a stray write) is moved aside to
        `jobs.sqlite3.corrupt-<time>` and a fresh queue starts, so the daemon still comes up; the
        start-up scan then queues every model in the watch folder again, and their tasks are
        mostly found in the tuning database. `recovered_from` names the file moved aside.
        """
        path = Path(state_dir) / "jobs.sqlite3"
        try:
            jobs = cls(path)
            if jobs._db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                jobs.close()
                raise sqlite3.DatabaseError("quick_check failed")
        except sqlite3.DatabaseError:
            aside = path.with_name(f"{path.name}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}")
            path.rename(aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            jobs = cls(path)
            jobs.recovered_from = aside
        jobs.requeue_interrupted()
        return jobs

    def close(self) -> None:
        self._db.close()

    def requeue_interrupted(self) -> int:
        """Running jobs (a previous daemon died or was stopped) go back to queued; return how many."""
        marks = ",".join("?" * len(RUNNING_STAGES))
        cursor = self._db.execute(
            f"UPDATE jobs SET state='queued', trials_done=0, started_at=NULL, best_estimate_ms=NULL, "
            f"trials_per_minute=NULL, eta_seconds=NULL, updated_at=? WHERE state IN ({marks})",
            (_now(), *RUNNING_STAGES),
        )
        return cursor.rowcount

    def enqueue(self, path: Path, sha256: str) -> Job | None:
        """Queue `path` (content `sha256`) under its stem; None if that content is already known.

        One exception: content whose job failed before it ever ran (its file vanished or changed
        while queued) is queued again under the new path, since that content was never tried.
        """
        now = _now()
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO jobs (name, path, sha256, state, queued_at, updated_at) "
            "VALUES (?, ?, ?, 'queued', ?, ?)",
            (Path(path).stem, str(path), sha256, now, now),
        )
        if cursor.rowcount == 1:
            return self.get(cursor.lastrowid)
        cursor = self._db.execute(
            "UPDATE jobs SET state='queued', name=?, path=?, error=NULL, finished_at=NULL, queued_at=?, updated_at=? "
            "WHERE sha256=? AND state='failed' AND started_at IS NULL",
            (Path(path).stem, str(path), now, now, sha256),
        )
        return self.by_sha256(sha256) if cursor.rowcount == 1 else None

    def get(self, job_id: int) -> Job:
        row = self._db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    def by_sha256(self, sha256: str) -> Job | None:
        row = self._db.execute("SELECT * FROM jobs WHERE sha256=?", (sha256,)).fetchone()
        return None if row is None else _job(row)

    def next_queued(self) -> Job | None:
        """The oldest queued job: first dropped, first tuned."""
        row = self._db.execute("SELECT * FROM jobs WHERE state='queued' ORDER BY id LIMIT 1").fetchone()
        return None if row is None else _job(row)

    def add_duplicate(self, path: Path, sha256: str) -> bool:
        """Record `path` as another name for the content `sha256`; False if it was recorded before."""
        cursor = self._db.execute("INSERT OR IGNORE INTO duplicates (path, name, sha256, seen_at) VALUES (?, ?, ?, ?)",
                                  (str(path), Path(path).stem, sha256, _now()))
        return cursor.rowcount == 1

    def duplicates(self) -> list[tuple[str, str, datetime]]:
        """(name, sha256, seen_at) of every file recorded as a duplicate, oldest first."""
        rows = self._db.execute("SELECT name, sha256, seen_at FROM duplicates ORDER BY seen_at, path")
        return [(row["name"], row["sha256"], datetime.fromisoformat(row["seen_at"])) for row in rows]

    def all_jobs(self) -> list[Job]:
        return [_job(row) for row in self._db.execute("SELECT * FROM jobs ORDER BY id")]

    def mark_started(self, job_id: int) -> None:
        """The worker took the job: its first stage is tuning (which includes the import)."""
        self._update(job_id, state="tuning", trials_done=0, error=None, warning=None, started_at=_now(), **_NO_RATE)

    def set_progress(self, job_id: int, stage: Stage, trials_done: int, trials_total: int, *,
                     best_estimate_ms: float | None = None, trials_per_minute: float | None = None,
                     eta_seconds: float | None = None) -> None:
        """The last report of the running job; each replaces the one before, estimate and rate included."""
        self._update(job_id, state=stage, trials_done=trials_done, trials_total=trials_total,
                     best_estimate_ms=best_estimate_ms, trials_per_minute=trials_per_minute, eta_seconds=eta_seconds)

    def set_warning(self, job_id: int, warning: str) -> None:
        """What the user should know about a running job that is not a failure (cleared when it starts again)."""
        self._update(job_id, warning=one_line(warning))

    def mark_done(self, job_id: int, artifact_dir: str, latency_ms: Latency, warnings: Sequence[str] = ()) -> None:
        """Done; `warnings` (the manifest's) replace any given while it ran."""
        self._update(
            job_id,
            state="done",
            warning=one_line("; ".join(warnings)) if warnings else None,
            artifact_dir=artifact_dir,
            latency_tvm=latency_ms.tvm,
            latency_untuned=latency_ms.untuned,
            latency_onnxruntime=latency_ms.onnxruntime,
            error=None,
            eta_seconds=None,
            finished_at=_now(),
        )

    def mark_failed(self, job_id: int, reason: str) -> None:
        self._update(job_id, state="failed", error=one_line(reason), eta_seconds=None, finished_at=_now())

    def requeue(self, job_id: int) -> None:
        """Put a job back (daemon stopping): the next run starts it again from the tuning database."""
        self._update(job_id, state="queued", trials_done=0, started_at=None, **_NO_RATE)

    def _update(self, job_id: int, **columns: object) -> None:
        columns["updated_at"] = _now()
        assignments = ", ".join(f"{name}=?" for name in columns)  # names come from this module only
        self._db.execute(f"UPDATE jobs SET {assignments} WHERE id=?", (*columns.values(), job_id))


def _job(row: sqlite3.Row) -> Job:
    latency = None
    if row["latency_tvm"] is not None:
        latency = Latency(tvm=row["latency_tvm"], untuned=row["latency_untuned"], onnxruntime=row["latency_onnxruntime"])
    return Job(
        id=row["id"],
        name=row["name"],
        path=Path(row["path"]),
        sha256=row["sha256"],
        state=row["state"],
        trials_done=row["trials_done"],
        trials_total=row["trials_total"],
        artifact_dir=row["artifact_dir"],
        latency_ms=latency,
        error=row["error"],
        warning=row["warning"],
        best_estimate_ms=row["best_estimate_ms"],
        trials_per_minute=row["trials_per_minute"],
        eta_seconds=row["eta_seconds"],
        queued_at=row["queued_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        updated_at=row["updated_at"],
    )


def input_problem(job: Job) -> str | None:
    """Why `job` cannot run as queued (its file vanished, changed or became a link), or None if it can."""
    if job.path.is_symlink():
        return symlink_refusal(job.path)
    try:
        sha256 = sha256_of(job.path)
    except FileNotFoundError:
        return f"input file {job.path} disappeared before the job ran"
    except OSError as err:
        return f"input file {job.path} cannot be read: {err.strerror or err}"
    if sha256 != job.sha256:
        return f"input file {job.path} changed after it was queued (sha256 {sha256[:8]}, queued {job.sha256[:8]})"
    return None
