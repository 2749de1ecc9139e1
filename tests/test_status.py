"""Status file: the schema, its documentation, and an atomic writer readers can trust."""

from __future__ import annotations

import json
import re
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

from daemon.status import (
    DaemonInfo,
    ModelEntry,
    StatusFile,
    read_status,
    schema_json,
    write_status,
)
from deploy.artifact import Latency

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2020, 1, 1, tzinfo=UTC)


def _status(n_models: int, state: str = "watching") -> StatusFile:
    models = [
        ModelEntry(
            name=f"model{i}", sha256=f"{i:064x}", state="done" if i % 2 else "tuning",
            trials_done=i, trials_total=64, artifact_dir=f"/out/model{i}" if i % 2 else None,
            latency_ms=Latency(tvm=0.1 * i, untuned=0.2, onnxruntime=0.3) if i % 2 else None,
            warning="3 of 16 tasks run TVM's default schedule" if i == 1 else None,
            best_estimate_ms=0.05 * (i + 1), trials_per_minute=30.0 + i, eta_seconds=None if i % 2 else 120.0,
            queued_at=NOW, updated_at=NOW,
        )
        for i in range(n_models)
    ]
    daemon = DaemonInfo(state=state, pid=1234, started_at=NOW, heartbeat_at=NOW, version="0.1.0")
    return StatusFile(daemon=daemon, models=models)


def test_round_trip_and_permissions(tmp_path):
    path = tmp_path / "nested" / "status.json"
    write_status(path, _status(3))
    assert read_status(path) == _status(3)
    assert json.loads(path.read_text())["schema_version"] == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the daemon's group reads it, others do not
    assert [p.name for p in path.parent.iterdir()] == ["status.json"]  # no temp files left behind


def test_reader_never_sees_a_partial_file(tmp_path):
    """A reader parses the file over and over while a writer rewrites it with changing sizes."""
    path = tmp_path / "status.json"
    write_status(path, _status(1))
    done = threading.Event()
    reads: list[int] = []
    failures: list[str] = []

    def reader() -> None:
        while not done.is_set():
            try:
                reads.append(len(read_status(path).models))
            except Exception as err:  # noqa: BLE001 - any failure to parse is what this test counts
                failures.append(repr(err))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(400):
            write_status(path, _status(1 + i % 40))
    finally:
        done.set()
        thread.join()
    assert failures == []
    assert len(reads) >= 200, f"only {len(reads)} reads overlapped the writes"
    assert len(set(reads)) > 5  # the reader really saw many different versions


def test_docs_schema_block_matches_the_model():
    """docs/status.md shows the schema; regenerate it with `python -m daemon.status` when this fails."""
    doc = (REPO / "docs" / "status.md").read_text()
    blocks = re.findall(r"<!-- schema:begin -->\s*```json\n(.*?)```\s*<!-- schema:end -->", doc, re.S)
    assert len(blocks) == 1, "docs/status.md needs exactly one schema block between the markers"
    assert json.loads(blocks[0]) == StatusFile.model_json_schema()
    assert json.loads(schema_json()) == StatusFile.model_json_schema()


def test_docs_example_is_a_valid_status_file():
    doc = (REPO / "docs" / "status.md").read_text()
    example = re.findall(r"<!-- example:begin -->\s*```json\n(.*?)```\s*<!-- example:end -->", doc, re.S)
    assert len(example) == 1
    parsed = StatusFile.model_validate_json(example[0])
    assert {m.state for m in parsed.models} >= {"done", "failed", "tuning", "queued"}


def test_status_command_prints_a_table_and_the_raw_json(tmp_path):
    from typer.testing import CliRunner

    from daemon.cli import app

    path = tmp_path / "status.json"
    status = _status(2, state="stopped")
    write_status(path, status)
    runner = CliRunner()

    table = runner.invoke(app, ["status", "--status-file", str(path)], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output
    assert "daemon stopped (pid 1234" in table.output
    assert "model0" in table.output and "model1" in table.output and "/out/model1" in table.output
    assert "0.100" in table.output  # model1's tvm latency
    assert "warning: 3 of 16 tasks run TVM's default schedule" in table.output
    assert "trials/min" in table.output and "2m" in table.output  # model0 is tuning: 30 trials/min, 2 minutes left

    raw = runner.invoke(app, ["status", "--status-file", str(path), "--json"])
    assert raw.exit_code == 0
    assert raw.output == path.read_text()

    missing = runner.invoke(app, ["status", "--status-file", str(tmp_path / "none.json")])
    assert missing.exit_code == 1 and "no status file" in missing.output


def test_status_command_finds_the_file_through_the_config(tmp_path):
    from typer.testing import CliRunner

    from daemon.cli import app

    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n')
    write_status(tmp_path / "status.json", _status(1))
    result = CliRunner().invoke(app, ["status", "--config", str(config)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "STALE" in result.output  # a 2020 heartbeat is far older than 3 heartbeats
    assert "model0" in result.output
