"""`make run` in miniature: the real daemon process tunes the example model into a verified artifact.

Marked slow (a real tuning run through the daemon process, under a minute on 2 cores): `.venv/bin/python -m pytest -m slow`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.status import read_status
from deploy.artifact import Manifest
from deploy.examples import write_example
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
CLI = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent)) or "tcl-tuned"


@pytest.mark.slow
def test_demo_config_tunes_the_example_model(tmp_path):
    # The demo config's relative var/ paths, under tmp_path; a smaller budget through the environment.
    (tmp_path / "demo.toml").write_text((REPO / "examples" / "demo.toml").read_text())
    write_example("tiny_cnn", tmp_path / "var" / "watch" / "tiny_cnn.onnx")
    env = {**os.environ, "TCL_TUNED_TUNING__TRIALS": "16"}
    process = subprocess.Popen([CLI, "daemon", "--config", "demo.toml"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status_file = tmp_path / "var" / "status.json"
    try:
        def finished():
            if not status_file.exists():
                return None
            models = read_status(status_file).models
            return models and models[0].state in ("done", "failed") and models[0]

        entry = wait_until(finished, timeout=600, interval=1.0, what="the example model to finish")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert entry.state == "done", entry.error
    assert process.returncode == 0, stderr
    manifest = Manifest.model_validate_json((Path(entry.artifact_dir) / "manifest.json").read_text())
    assert manifest.verification.passed and manifest.trials == 16 and manifest.trials_measured >= 16
    assert Path(entry.artifact_dir).parent == tmp_path / "var" / "out"
