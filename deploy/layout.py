"""Where a platform's measurements live under state_dir (no TVM here: the daemon reads it too)."""

from __future__ import annotations

from pathlib import Path

# Bumped when measurements stop being comparable with earlier ones. 2 (2026-12-07): candidates
# run on the target's num-cores threads (before: one thread on 2-core x86), on N(0, 1) inputs,
# with fast math and packed weights. Older databases stay where they were, unread.
RECORDS_SCHEMA = 2


def databases_root(state_dir: Path) -> Path:
    """The folder holding one tuning database per platform, for this records schema."""
    return Path(state_dir) / f"databases-v{RECORDS_SCHEMA}"


def database_dir(state_dir: Path, platform: str) -> Path:
    """The platform's MetaSchedule JSON database: every job's measurements on that platform."""
    return databases_root(state_dir) / platform


def records_key(platform: str, threads: int, num_cores: int | None, *, flush_caches: bool = False) -> str:
    """The database a job's measurements go to: the platform's, or its own when timed another way.

    Candidates timed on fewer threads than the target's cores rank differently (parallel loops
    pay off less), and so do candidates timed with their weights flushed from the caches, so such
    records never share a database with the platform's own.
    """
    return platform + ("" if threads == num_cores else f"-{threads}t") + ("-cold" if flush_caches else "")
