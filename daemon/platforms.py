"""Per-platform summary: measurements, the student in use and its last distillation round.

Read by the status file (daemon/main.py) and `tcl-tuned platforms`. No TVM, no torch: counting
lines, reading small JSON cards and hashing a few hundred kilobytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from deploy.layout import database_dir, databases_root
from tcl_core.continual import last_round, record_count
from tcl_core.students import CARD_FILE, STUDENT_FILE, find_student, student_roots


class LastRound(BaseModel):
    model_config = ConfigDict(frozen=True)

    decision: str = Field(description="promoted | rejected | skipped | failed")
    reason: str = Field(description="one line: the validation scores compared, or what went wrong")
    version: int | None = Field(None, description="the candidate's version")
    at: str = Field(description="when the round finished (UTC, ISO 8601)")


class PlatformEntry(BaseModel):
    """One platform (target + CPU + TVM release) the daemon has measured on or holds a student for."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="platform name, as in manifests and state_dir/databases-v2/<name>/")
    records: int = Field(description="measurements in this platform's tuning database")
    records_since_round: int = Field(description="measurements added since the last distillation round")
    student_version: int | None = Field(None, description="version of this platform's own student, which `auto` uses; null: none yet")
    student_source: str | None = Field(None, description="state (distilled here) | shipped; null: none")
    validation_top1: float | None = Field(None, description="the student's top-1 on held-out tasks (from its card)")
    distilling: bool = Field(False, description="a round is running for this platform now")
    last_round: LastRound | None = None


def platform_names(state_dir: Path, *, include_shipped: bool = False) -> list[str]:
    """Platforms with a database or a distilled student under state_dir (and shipped students)."""
    names = {p.name for p in databases_root(state_dir).glob("*") if p.is_dir()}
    names |= {p.parent.name for root, shipped in student_roots(state_dir) if include_shipped or not shipped
              for p in root.glob(f"*/{STUDENT_FILE}")}
    return sorted(names)


def summarise(state_dir: Path, platform: str, *, distilling: bool = False) -> PlatformEntry:
    records = record_count(database_dir(Path(state_dir), platform))
    previous = last_round(state_dir, platform)
    student = find_student(platform, state_dir)
    version = top1 = None
    if student is not None:
        card = _card(student.path.parent / CARD_FILE)
        version = card.get("version")
        metrics = card.get("metrics") or {}
        held_out = metrics.get("validation") or metrics.get("eval") or {}
        top1 = held_out.get("top1")
    return PlatformEntry(
        name=platform, records=records,
        records_since_round=records - int(previous.get("records", 0)) if previous else records,
        student_version=version if isinstance(version, int) else None,
        student_source=None if student is None else ("shipped" if student.shipped else "state"),
        validation_top1=top1, distilling=distilling,
        last_round=None if previous is None else LastRound(
            decision=previous.get("decision", "?"), reason=previous.get("reason", ""),
            version=previous.get("version"), at=previous.get("created_at", "")),
    )


def summarise_all(state_dir: Path, *, distilling: str | None = None, include_shipped: bool = False) -> list[PlatformEntry]:
    return [summarise(state_dir, name, distilling=name == distilling)
            for name in platform_names(state_dir, include_shipped=include_shipped)]


def _card(path: Path) -> dict:
    try:
        card = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return card if isinstance(card, dict) else {}
