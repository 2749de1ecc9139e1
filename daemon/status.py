"""The status file: what the daemon is doing and where every model stands, as one JSON document.

This module owns the file's public schema (documented in docs/status.md, which a test keeps
equal to `StatusFile.model_json_schema()`) and its atomic writer: a reader opens either the
previous complete file or the new complete file, never a half-written one.
Print the schema with `python -m daemon.status`.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.platforms import PlatformEntry
from deploy.artifact import Latency
from deploy.options import Stage

STATUS_SCHEMA_VERSION = 1

DaemonState = Literal["starting", "watching", "stopping", "stopped"]


class DaemonInfo(BaseModel):
    """The daemon process itself."""

    model_config = ConfigDict(frozen=True)

    state: DaemonState = Field(description="starting -> watching -> stopping -> stopped")
    pid: int = Field(description="process id of the daemon (not of its worker)")
    started_at: datetime = Field(description="when this daemon process started (UTC)")
    heartbeat_at: datetime = Field(description="when this file was written; stale if much older than heartbeat_seconds")
    version: str = Field(description="tcl-tuned version")
    watch_mode: Literal["inotify", "polling"] | None = Field(None, description="how the watch folder is observed")


class ModelEntry(BaseModel):
    """One distinct model content (sha256) the daemon has seen."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="file stem of the dropped model")
    sha256: str = Field(description="sha256 of the file's bytes; the dedup key")
    state: Stage = Field(description="queued -> tuning -> building -> verifying -> done | failed")
    trials_done: int = Field(0, description="measured tuning trials so far")
    trials_total: int = Field(0, description="tuning trials planned")
    best_estimate_ms: float | None = Field(None, description=(
        "the tuner's estimate of one run of the model from the best candidates measured so far (each task's "
        "weight x its best time), ms; null until every task has a measured candidate"))
    trials_per_minute: float | None = Field(None, description="measured trials per minute of tuning so far")
    eta_seconds: float | None = Field(None, description=(
        "while tuning: seconds until the trials at this rate or the time budget run out, whichever is sooner; "
        "an upper bound, as the search may converge before"))
    artifact_dir: str | None = Field(None, description="folder with model.so and manifest.json once done")
    latency_ms: Latency | None = Field(None, description="set once done")
    error: str | None = Field(None, description="one-line reason when failed, else null")
    warning: str | None = Field(None, description=(
        "what limits the result, else null: while tuning, that the trials cannot reach every task; once done, "
        "how many tasks were left with TVM's default schedule (the manifest's warnings) and, where onnxruntime "
        "is faster, the manifest's advice (by how much, and the kernels that take the time)"))
    duplicate_of: str | None = Field(None, description=(
        "set when this file's bytes were already dropped under another name: that model's name; this entry "
        "then shows that job's progress and artifact (the content is tuned once)"))
    queued_at: datetime
    updated_at: datetime


class StatusFile(BaseModel):
    """The whole status document."""

    model_config = ConfigDict(frozen=True)

    schema_version: Literal[1] = STATUS_SCHEMA_VERSION
    daemon: DaemonInfo
    models: list[ModelEntry] = Field(description="every model seen, oldest first")
    platforms: list[PlatformEntry] = Field(
        default_factory=list, description="every platform measured on: records, student version, distillation")


def write_status(path: Path, status: StatusFile) -> None:
    """Replace `path` with `status` atomically: temp file in the same folder, fsync, rename, fsync folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (status.model_dump_json(indent=2) + "\n").encode()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes 0600; `tcl-tuned status` runs as people in the daemon's group, nobody else reads it
        os.chmod(tmp_name, 0o640)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def read_status(path: Path) -> StatusFile:
    """Parse and validate a status file."""
    return StatusFile.model_validate_json(Path(path).read_bytes())


def schema_json() -> str:
    """The status file's JSON schema, as docs/status.md shows it."""
    return json.dumps(StatusFile.model_json_schema(), indent=2)


if __name__ == "__main__":
    print(schema_json())
