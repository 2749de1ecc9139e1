"""The status file as a person reads it: a header line about the daemon and a rich table of models."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group
from rich.table import Table
from rich.text import Text

from daemon.status import StatusFile
from deploy.options import format_duration

STATE_STYLES = {"done": "green", "failed": "red", "queued": "dim"}


def render_status(status: StatusFile, *, now: datetime | None = None, stale_after_seconds: float = 30.0) -> Group:
    """Header + table; the header says when the heartbeat is older than `stale_after_seconds`."""
    now = now or datetime.now(UTC)
    daemon = status.daemon
    age = (now - daemon.heartbeat_at).total_seconds()
    header = Text(f"daemon {daemon.state} (pid {daemon.pid}, {daemon.version}), heartbeat {age:.0f}s ago")
    if daemon.state not in ("stopped",) and age > stale_after_seconds:
        header.append("  STALE: the daemon may have died", style="bold red")

    table = Table(show_edge=False)
    for column in ("model", "sha256", "state", "trials", "trials/min", "eta", "est. ms", "tvm ms", "untuned ms",
                   "onnxruntime ms", "artifact / error"):
        table.add_column(column, justify="right" if column.endswith(("ms", "trials", "/min", "eta")) else "left")
    for model in status.models:
        latency = model.latency_ms
        table.add_row(
            model.name,
            model.sha256[:8],
            Text(model.state, style=STATE_STYLES.get(model.state, "yellow")),
            f"{model.trials_done}/{model.trials_total}",
            "-" if model.trials_per_minute is None else f"{model.trials_per_minute:.1f}",
            format_duration(model.eta_seconds) if model.eta_seconds is not None and model.state == "tuning" else "-",
            "-" if model.best_estimate_ms is None else f"{model.best_estimate_ms:.3g}",
            *(("-",) * 3 if latency is None else (f"{latency.tvm:.3f}", f"{latency.untuned:.3f}",
                                                     "-" if latency.onnxruntime is None else f"{latency.onnxruntime:.3f}")),
            _last_column(model),
        )
    platforms = [render_platforms(status.platforms)] if status.platforms else []
    if not status.models:
        return Group(header, Text("no models seen yet"), *platforms)
    footer = [Text(THREADS_NOTE, style="dim")] if any(m.latency_ms is not None for m in status.models) else []
    return Group(header, table, *footer, *platforms)


# TVM reads its thread count once, at start, and uses half the logical CPUs on x86 without it.
THREADS_NOTE = ("tvm and onnxruntime were timed on the same threads (the manifest's `threads`); serve model.so "
                "with TVM_NUM_THREADS set to that count")


def _last_column(model) -> Text:
    """The artifact or the error, then the warning on its own line."""
    text = Text(model.error or model.artifact_dir or "")
    if getattr(model, "duplicate_of", None):
        text.append(("\n" if text else "") + f"same content as {model.duplicate_of}: tuned once", style="cyan")
    if model.warning:
        text.append(("\n" if text else "") + f"warning: {model.warning}", style="yellow")
    return text


def render_platforms(platforms) -> Table:
    """One row per platform: measurements, the student `auto` uses, its last distillation round."""
    table = Table(show_edge=False)
    for column in ("platform", "records", "new", "student", "top-1", "last round"):
        table.add_column(column, justify="right" if column in ("records", "new", "top-1") else "left")
    for entry in platforms:
        student = "-" if entry.student_source is None else f"v{entry.student_version} ({entry.student_source})"
        last = entry.last_round
        round_text = "distilling now" if entry.distilling else (
            "-" if last is None else f"{last.decision} v{last.version}: {last.reason}" if last.version else
            f"{last.decision}: {last.reason}")
        table.add_row(entry.name, str(entry.records), str(entry.records_since_round), student,
                      "-" if entry.validation_top1 is None else f"{entry.validation_top1:.3f}", round_text)
    return table
