"""`python -m tests.daemon_entry CONFIG [PIPELINE]`: the real daemon loop, signals included, with a fake pipeline.

PIPELINE names a function of tests.child_targets (default `fake_pipeline`).

Lets a test SIGTERM a daemon whose job is still running, without TVM and without timing races.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from daemon.config import load_config
from daemon.main import Daemon
from daemon.worker import Worker
from tests import child_targets

if __name__ == "__main__":  # spawned workers re-import this module; only the parent runs the daemon
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pipeline = getattr(child_targets, sys.argv[2] if len(sys.argv) > 2 else "fake_pipeline")
    daemon = Daemon(load_config(Path(sys.argv[1])), worker=Worker(pipeline_fn=pipeline))
    sys.exit(daemon.run())
