"""Where a platform's measurements live under state_dir (no TVM here: the daemon reads it too)."""

from __future__ import annotations

from pathlib import Path


def database_dir(state_dir: Path, platform: str) -> Path:
    """The platform's MetaSchedule JSON database: every job's measurements on that platform."""
    return Path(state_dir) / "databases" / platform
