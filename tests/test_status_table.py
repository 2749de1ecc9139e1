"""The status table: a done model shows its latencies, the advice in its warning, and how to get the threads."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from daemon.status import DaemonInfo, ModelEntry, StatusFile
from daemon.status_table import THREADS_NOTE, render_status
from deploy.artifact import Latency


def _text(status: StatusFile) -> str:
    console = Console(record=True, width=400)
    console.print(render_status(status, now=status.daemon.heartbeat_at))
    return console.export_text()


def _status(models: list[ModelEntry]) -> StatusFile:
    now = datetime(2026, 12, 7, tzinfo=UTC)
    daemon = DaemonInfo(state="watching", pid=1, started_at=now, heartbeat_at=now, version="0.1.0")
    return StatusFile(daemon=daemon, models=models)


def test_a_done_model_shows_the_advice_and_the_thread_setting():
    now = datetime(2026, 12, 7, tzinfo=UTC)
    advice = "advice: onnxruntime is 1.50x faster than this library (1 vs 1.5 ms, 2 threads each)"
    done = ModelEntry(name="cnn", sha256="ab" * 32, state="done", artifact_dir="/out/cnn-abababab",
                      latency_ms=Latency(tvm=1.5, untuned=9.0, onnxruntime=1.0), warning=advice,
                      queued_at=now, updated_at=now)
    text = _text(_status([done]))
    assert "1.500" in text and "1.000" in text and "onnxruntime is 1.50x faster" in text
    assert "TVM_NUM_THREADS" in THREADS_NOTE and THREADS_NOTE.split(";")[0] in " ".join(text.split())


def test_no_thread_note_before_anything_is_timed():
    now = datetime(2026, 12, 7, tzinfo=UTC)
    queued = ModelEntry(name="cnn", sha256="ab" * 32, state="queued", queued_at=now, updated_at=now)
    assert "TVM_NUM_THREADS" not in _text(_status([queued]))


def test_a_tuning_model_shows_its_rate_eta_and_estimate_and_a_done_one_no_eta():
    now = datetime(2026, 12, 7, tzinfo=UTC)
    tuning = ModelEntry(name="resnet18", sha256="cd" * 32, state="tuning", trials_done=96, trials_total=528,
                        best_estimate_ms=6.123, trials_per_minute=32.9, eta_seconds=788, queued_at=now, updated_at=now)
    done = tuning.model_copy(update={"name": "cnn", "state": "done", "eta_seconds": 5.0})
    assert _cells(tuning)[3:7] == ["96/528", "32.9", "13m", "6.12"]
    assert _cells(done)[3:7] == ["96/528", "32.9", "-", "6.12"]  # the ETA was for the search, which ended


def _cells(model: ModelEntry) -> list[str]:
    row = next(line for line in _text(_status([model])).splitlines() if line.split()[0] == model.name)
    return [cell.strip() for cell in row.split("│")]
