"""Score a tuning database's candidates with a student and measure how well it ranks them.

The offline check of a cost model: it sees each task's measured candidates (tcl_core.records),
scores them, and tcl_core.metrics compares its order with the measured one. This is the number
to watch before a student is let near a search.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tcl_core.features import TRACE_FEATURE_DIM, pad_batch
from tcl_core.metrics import ranking_summary
from tcl_core.records import TaskRecords
from tcl_core.student import Student, StudentConfig, load_student, predict

__all__ = ["UNTRAINED", "open_student", "score_tasks", "evaluate"]

UNTRAINED = "untrained"  # what `model` says in the report when no weights were given
_UNTRAINED_SEED = 0


def open_student(path: Path | None) -> Student:
    """The student saved at `path`, or (None) a freshly initialised one seeded with 0.

    The untrained student is the baseline a trained one must beat (the shipped ones live in
    tcl_core/students/); seeding it makes its numbers reproducible, so reports compare run to run.
    """
    if path is not None:
        return load_student(path)
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG where it was
        torch.manual_seed(_UNTRAINED_SEED)
        model = Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM))
    return model.eval()


def score_tasks(
    model: Student, tasks: list[TaskRecords], *, batch_size: int = 64, threads: int = 1
) -> list[np.ndarray]:
    """One (g_t,) float32 score array per task, in record order (higher = predicted faster).

    Runs on `threads` torch threads (restored afterwards). The student's ops on 64-candidate
    batches are too small for intra-op threads to pay: scoring 96 records took 0.06 s on one
    thread and 1.4-9 s on two while the machine's other core was busy (threads wait on each other).
    """
    expected = model.config.feature_dim
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        scores = []
        for task in tasks:
            width = task.features[0].shape[1]
            if width != expected:
                raise ValueError(f"the model takes {expected} features per step, task {task.task_index} has {width}")
            features, mask = pad_batch(list(task.features), model.config.max_len)  # (g, l, f), (g, l)
            # sequential scan: measured 2-4x faster on CPU than the parallel one (student.predict)
            scores.append(predict(model, features, mask, batch_size=batch_size, sequential=True))  # (g,)
    finally:
        torch.set_num_threads(previous)
    return scores


def evaluate(model: Student, tasks: list[TaskRecords], *, ks: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """Task-weighted top-k, random top-k and pairwise accuracy of `model` on `tasks` (see metrics)."""
    scores = score_tasks(model, tasks)
    return ranking_summary(
        scores, [t.run_seconds for t in tasks], [t.labels for t in tasks], [t.weight for t in tasks], ks=ks
    )
