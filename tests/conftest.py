"""Shared fixtures. Daemon fixtures are prefixed `daemon_` to stay clear of the pipeline's."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.config import DaemonConfig
from daemon.main import Daemon
from daemon.notify import SystemdNotify
from daemon.worker import Worker
from deploy.options import TuningOptions
from tests.fakes import RecordingNotifier
from tests.models import tiny_mlp_onnx


@pytest.fixture
def daemon_config(tmp_path: Path):
    """Factory: a DaemonConfig with every folder under tmp_path and quick timings; kwargs override."""

    def make(**overrides) -> DaemonConfig:
        values = dict(
            watch_dir=tmp_path / "watch",
            output_dir=tmp_path / "out",
            state_dir=tmp_path / "state",
            status_file=tmp_path / "state" / "status.json",
            tuning=TuningOptions(trials=0, timing_repeats=3),
            settle_seconds=0.3,
            tick_seconds=0.05,
            stop_grace_seconds=2.0,
        )
        values.update(overrides)
        return DaemonConfig(**values)

    return make


@pytest.fixture
def daemon_factory(daemon_config):
    """Factory: a started Daemon (fake pipeline unless `pipeline_fn=None` is given); shut down after the test."""
    from tests import child_targets

    started: list[Daemon] = []

    def make(*, pipeline_fn=child_targets.fake_pipeline, config=None, **overrides) -> Daemon:
        daemon = Daemon(
            config or daemon_config(**overrides),
            worker=Worker(pipeline_fn=pipeline_fn),
            notify=SystemdNotify(RecordingNotifier()),
        )
        daemon.start()
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.shutdown()


@pytest.fixture
def daemon_tiny_model(tmp_path: Path) -> Path:
    """A real, valid tiny ONNX model outside the watch folder (move or copy it in)."""
    source = tmp_path / "src"
    source.mkdir()
    return tiny_mlp_onnx(source / "tiny.onnx")


@pytest.fixture(scope="session")
def measured(tmp_path_factory) -> Path:
    """A real tuning database (read-only for tests): a model with two or more tasks, 6 candidates each."""
    from tcl_core.collect import collect
    from tests.zoo_models import TWO_TASKS

    root = collect(tmp_path_factory.mktemp("measured"), models=[TWO_TASKS], trials_per_task=6, trials_per_iter=3,
                   population=16, target={"kind": "llvm", "num-cores": 1}, log=lambda _: None)
    return root / "two"
