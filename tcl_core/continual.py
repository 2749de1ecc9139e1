"""One round of the feedback loop: a platform's measurements -> a new student version, kept only if not worse.

The daemon runs this in a child process when enough new measurements of a platform have
arrived (daemon/distiller.py); `tcl-tuned distill --platform NAME` runs it by hand.

1. Read the platform's tuning database (every job's measurements land there).
2. Split its tasks, by a hash of the workload so the split never moves, into a training part
   and a held-out validation slice (about one task in five, at least one).
3. Teacher: the platform's current student, else the nearest platform's (tcl_core.students).
   The candidate starts from the teacher and is distilled on the training part (tcl_core.distill).
4. Score the candidate and the incumbent (the teacher: the platform's current student, else
   the nearest platform's, else an untrained one) on the validation slice; promote only if the
   candidate's top-1 is not worse.
5. Every candidate is kept as `state_dir/student_versions/<platform>/v<N>/` (weights + card);
   promotion repoints the symlink `state_dir/students/<platform>` at it with one rename, so a job
   starting at any moment opens either the old version or the new one, complete.
   `history.jsonl` beside the versions records each round's decision and reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tcl_core.students import CARD_FILE, STUDENT_FILE, StudentRef, find_student, nearest_student

__all__ = ["RoundSettings", "RoundResult", "versions_dir", "history", "last_round", "record_count", "run_round",
           "record_failure"]

HISTORY_FILE = "history.jsonl"


@dataclass(frozen=True)
class RoundSettings:
    """What one round trains with and how strict promotion is."""

    steps: int = 300
    lr: float = 1e-3
    alpha: float = 0.1              # distillation weight (tcl_core.distill.DistillConfig)
    tolerance: float = 0.0          # promote if candidate top-1 >= incumbent top-1 - tolerance
    validation_share: int = 5       # one task in this many is held out
    seed: int = 0


@dataclass(frozen=True)
class RoundResult:
    """What a round did; one line of history.jsonl."""

    platform: str
    decision: str                   # "promoted", "rejected" or "skipped"
    reason: str
    records: int                    # records in the platform's database when the round started
    version: int | None = None      # the candidate's version (None when skipped)
    candidate_top1: float | None = None
    incumbent_top1: float | None = None
    teacher: dict | None = None     # the student it started from and was compared against (platform, version, ...)
    train_tasks: int = 0
    validation_tasks: int = 0
    seconds: float = 0.0
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


def versions_dir(state_dir: Path, platform: str) -> Path:
    return Path(state_dir) / "student_versions" / platform


def history(state_dir: Path, platform: str) -> list[dict]:
    """Every recorded round of the platform, oldest first; unreadable lines are skipped."""
    path = versions_dir(state_dir, platform) / HISTORY_FILE
    rounds = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rounds.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash; the rounds before it still count
    return rounds


def last_round(state_dir: Path, platform: str) -> dict | None:
    rounds = history(state_dir, platform)
    return rounds[-1] if rounds else None


def record_count(database_dir: Path) -> int:
    """Complete lines in the database's record file (cheap: no parsing, no TVM)."""
    path = Path(database_dir) / "database_tuning_record.json"
    try:
        with path.open("rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def run_round(platform: str, database_dir: Path, state_dir: Path, settings: RoundSettings = RoundSettings(),
              *, log=print) -> RoundResult:
    """Distil, validate, and promote or reject one candidate student for `platform`; record it."""
    from tcl_core.distill import DistillConfig, distil_student  # torch and TVM only when a round runs
    from tcl_core.evaluate import evaluate, open_student
    from tcl_core.records import load_task_records
    from tcl_core.student import save_student

    started = time.perf_counter()
    records = record_count(database_dir)
    tasks = [task for task in load_task_records(database_dir) if task.size >= 2] if records else []
    if len(tasks) < 2:
        return _record(state_dir, RoundResult(
            platform, "skipped", f"{len(tasks)} task(s) with two or more measured candidates; a round needs 2",
            records))
    train, validation = _split(tasks, settings.validation_share)
    current = find_student(platform, state_dir)
    teacher_ref = current or nearest_student(platform, state_dir)
    teacher = open_student(teacher_ref.path) if teacher_ref is not None else None
    log(f"{platform}: distilling from {teacher_ref.platform if teacher_ref else 'scratch'} on {len(train)} tasks "
        f"({sum(t.size for t in train)} records), validating on {len(validation)}")
    candidate, losses = distil_student(teacher, train, config=DistillConfig(
        steps=settings.steps, lr=settings.lr, alpha=settings.alpha, seed=settings.seed))
    incumbent = teacher if teacher is not None else open_student(None)
    candidate_top1 = evaluate(candidate, validation)["top1"]
    incumbent_top1 = evaluate(incumbent, validation)["top1"]
    promote = candidate_top1 >= incumbent_top1 - settings.tolerance
    version = _next_version(state_dir, platform, current)
    folder = versions_dir(state_dir, platform) / f"v{version}"
    staging = folder.with_name(f".v{version}.tmp")
    staging.mkdir(parents=True, exist_ok=True)
    save_student(candidate, staging / STUDENT_FILE)
    described = teacher_ref.describe() if teacher_ref is not None else None
    card = {"version": version, "platform": platform, "teacher": described, "records": records,
            "train_tasks": len(train), "validation_tasks": len(validation), "steps": settings.steps,
            "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
            "metrics": {"validation": {"top1": candidate_top1}}, "incumbent_top1": incumbent_top1}
    (staging / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    os.replace(staging, folder)  # a version folder is complete or absent
    if promote:
        _point(state_dir, platform, folder)
        reason = f"validation top-1 {candidate_top1:.3f} >= incumbent's {incumbent_top1:.3f}"
    else:
        reason = f"validation top-1 {candidate_top1:.3f} < incumbent's {incumbent_top1:.3f} - {settings.tolerance}"
    log(f"{platform}: v{version} {'promoted' if promote else 'rejected'}: {reason}")
    return _record(state_dir, RoundResult(
        platform, "promoted" if promote else "rejected", reason, records, version=version,
        candidate_top1=candidate_top1, incumbent_top1=incumbent_top1, teacher=described,
        train_tasks=len(train), validation_tasks=len(validation), seconds=round(time.perf_counter() - started, 1)))


def _split(tasks: list, share: int) -> tuple[list, list]:
    """(train, validation): a task is held out when its workload hash falls in one `share`-th."""
    def bucket(task) -> int:
        return int(hashlib.sha256(task.workload_hash.encode()).hexdigest(), 16) % share
    validation = [task for task in tasks if bucket(task) == 0]
    if not validation:
        validation = [min(tasks, key=lambda task: hashlib.sha256(task.workload_hash.encode()).hexdigest())]
    if len(validation) == len(tasks):
        validation = validation[:1]
    train = [task for task in tasks if task not in validation]
    return train, validation


def _next_version(state_dir: Path, platform: str, current: StudentRef | None) -> int:
    seen = [int(p.name[1:]) for p in versions_dir(state_dir, platform).glob("v*") if p.name[1:].isdigit()]
    if current is not None:
        version = current.describe().get("version")
        if isinstance(version, int):
            seen.append(version)
    return max(seen, default=0) + 1


def _point(state_dir: Path, platform: str, folder: Path) -> None:
    """Make `state_dir/students/<platform>` name `folder`, atomically (a symlink replaced by rename)."""
    link = Path(state_dir) / "students" / platform
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() and not link.is_symlink():  # a student placed by hand: keep it as a version
        os.replace(link, versions_dir(state_dir, platform) / f"manual-{int(time.time())}")
    temporary = link.with_name(f".{platform}.link")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(os.path.relpath(folder, link.parent))
    os.replace(temporary, link)


def record_failure(state_dir: Path, platform: str, records: int, reason: str) -> RoundResult:
    """Note a round that never reached a decision (its child crashed), so it is not retried until new data."""
    return _record(state_dir, RoundResult(platform, "failed", reason, records))


def _record(state_dir: Path, result: RoundResult) -> RoundResult:
    folder = versions_dir(state_dir, result.platform)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / HISTORY_FILE).open("a") as handle:
        handle.write(json.dumps(asdict(result)) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return result
