"""A MetaSchedule JSON tuning database -> per-task groups of (feature sequence, run time, label).

The cost model only ever compares candidates of one task, so records are grouped by workload.
Order is kept exactly as written: task index = line of the workload in `database_workload.json`,
record index = order of that task's lines in `database_tuning_record.json`. That is measurement
order, so a prediction written as (task index, record index) can be joined back to its record.

We parse the two files ourselves rather than open a `JSONDatabase` and ask for
`get_all_tuning_records()`: that returns records sorted by run time (its store is a multiset) and
loses the line order, while the parse costs about the same (2-core machine, one core busy:
96 records at 430/s here including features vs 515/s through `JSONDatabase` without; 386 records
at 220/s vs 240/s). Nearly all of it is TVM replaying each trace onto its
workload in `TuningRecord.from_json`, which checks the trace is valid for that workload.

Failures are data: MetaSchedule 0.27 writes `run_secs: [1e10]` for a candidate that failed to
build or run (and a record may carry no `run_secs` at all). Both become `run_seconds = inf` and
label 0, and stay in the group: a cost model should learn to rank them last.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tcl_core import tvm_api
from tcl_core.features import trace_features
from tcl_core.student import normalise_labels

__all__ = ["TaskRecords", "RecordsError", "FAILED_SECONDS", "load_task_records", "card_weights", "mean_seconds"]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
# MetaSchedule's AddToDatabase stores 1e10 s for a build or run error; nothing real runs 1e9 s.
FAILED_SECONDS = 1e9

Featurise = Callable[[object], np.ndarray]  # a Trace -> (l, f) float32
# (Workload, its TuningRecords) -> one (l_i, f) float32 array per record: for features such as
# PerStoreFeature that need the whole task (its IRModule and the candidates' schedules) at once.
FeaturiseTask = Callable[[object, list], list[np.ndarray]]


class RecordsError(ValueError):
    """The folder is not a readable tuning database (missing files, corrupt lines), or a model asked for is not there."""


@dataclass(frozen=True, eq=False)  # eq=False: comparing ndarray fields with == is ambiguous
class TaskRecords:
    """One task's measured candidates, in the order they were written."""

    task_index: int                 # line of the workload in database_workload.json (0-based)
    workload_hash: str              # MetaSchedule's structural hash of the task's IRModule
    features: tuple[np.ndarray, ...]  # g arrays, each (l_i, f) float32: one sequence per record
    run_seconds: np.ndarray         # (g,) float64 mean measured seconds; inf where the run failed
    labels: np.ndarray              # (g,) float32 normalise_labels(run_seconds): best = 1, failed = 0
    weight: float = 1.0             # how often the task occurs in its model (top-k averages by it)

    @property
    def size(self) -> int:
        """g, the number of candidates."""
        return len(self.features)

    @property
    def failed(self) -> np.ndarray:
        """(g,) bool: measurement failed (no time, or MetaSchedule's error sentinel)."""
        return ~np.isfinite(self.run_seconds)


def load_task_records(
    database_dir: Path,
    *,
    weights: Mapping[str, float] | None = None,
    featurise: Featurise = trace_features,
    featurise_task: FeaturiseTask | None = None,
) -> list[TaskRecords]:
    """Read a JSON tuning database folder into one TaskRecords per task that has records.

    `weights` maps workload hash -> task weight (see `card_weights`); tasks it omits weigh 1.
    `featurise_task`, when given, replaces `featurise` (see FeaturiseTask).
    Tasks with no records are left out (their indices are simply absent). A last line without
    its newline is skipped, so a database another process is appending to can be read.
    Raises RecordsError when the folder or its files are missing or a line does not parse.
    """
    database_dir = Path(database_dir)
    workload_lines = _json_lines(database_dir / WORKLOAD_FILE)
    record_lines = _json_lines(database_dir / RECORD_FILE)
    workloads = [None] * len(workload_lines)  # parsed on first use: TVM objects, cheap (~1 ms each)
    grouped: dict[int, list[tuple[object, float]]] = {}  # task index -> [(record, seconds)] in line order
    for line_no, row in record_lines:
        try:
            index, record_json = int(row[0]), row[1]
            if not 0 <= index < len(workloads):
                raise IndexError(f"workload index {index} of {len(workloads)}")
            if workloads[index] is None:
                workloads[index] = tvm_api.ms.database.Workload.from_json(workload_lines[index][1])
            record = tvm_api.ms.database.TuningRecord.from_json(record_json, workloads[index])
        except Exception as err:  # TVM raises its own error types for a trace that does not replay
            raise RecordsError(f"{database_dir / RECORD_FILE}:{line_no}: not a tuning record: {err}") from None
        grouped.setdefault(index, []).append((record, mean_seconds(record_json[1])))
    weights = weights or {}
    tasks = []
    for index in sorted(grouped):
        workload_hash = str(workload_lines[index][1][0])
        seconds = np.array([s for _, s in grouped[index]], dtype=np.float64)  # (g,)
        labels = normalise_labels(seconds).numpy()  # (g,) float32
        seconds.setflags(write=False)
        labels.setflags(write=False)
        records = [record for record, _ in grouped[index]]
        if featurise_task is not None:
            features = tuple(featurise_task(workloads[index], records))
        else:
            features = tuple(featurise(record.trace) for record in records)
        tasks.append(TaskRecords(
            task_index=index,
            workload_hash=workload_hash,
            features=features,
            run_seconds=seconds,
            labels=labels,
            weight=float(weights.get(workload_hash, 1.0)),
        ))
    return tasks


def card_weights(database_dir: Path) -> dict[str, float]:
    """Task weights (workload hash -> occurrences in the model) from `tcl-tuned collect`'s card.

    `collect` writes `<platform>/card.json` beside the per-model folders; {} when there is none
    or it does not list this folder's model, so callers fall back to weight 1.
    """
    database_dir = Path(database_dir)
    card_path = database_dir.parent / "card.json"
    if not card_path.is_file():
        return {}
    try:
        model = json.loads(card_path.read_text()).get("models", {}).get(database_dir.name, {})
        return {str(t["structural_hash"]): float(t["weight"]) for t in model.get("tasks", [])}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return {}


def mean_seconds(run_secs) -> float:
    """Mean of a record's `run_secs`; inf for a failure (None, empty, non-positive or sentinel)."""
    if not run_secs:
        return math.inf
    mean = sum(float(s) for s in run_secs) / len(run_secs)
    return mean if 0.0 < mean < FAILED_SECONDS else math.inf


def _json_lines(path: Path) -> list[tuple[int, list]]:
    """(1-based line number, parsed JSON) for each non-blank line; a torn last line is skipped."""
    if not path.is_file():
        raise RecordsError(f"{path}: no such file (not a MetaSchedule JSON database folder?)")
    text = path.read_text()
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            if number == len(lines) and not text.endswith("\n"):
                break  # a writer is mid-append: the line is not complete yet
            raise RecordsError(f"{path}:{number}: not JSON: {err}") from None
    return rows
