"""Fitting a student to measured records: one ranking group per task, Adam steps on one thread.

Shared by offline training (tcl_core.train) and distillation (tcl_core.distill), which both
import it; it imports neither.
"""

from __future__ import annotations

import numpy as np
import torch

from tcl_core.features import TRACE_FEATURE_DIM, pad_batch
from tcl_core.records import TaskRecords
from tcl_core.student import GAIN_SCALE, LISTWISE_TEMPERATURE, Student, StudentConfig, train_steps

__all__ = ["to_groups", "train_student"]


def to_groups(tasks: list[TaskRecords], max_len: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """One (features (g, l, f), mask (g, l), labels (g,)) group per task with at least two candidates."""
    groups = []
    for task in tasks:
        if task.size < 2:
            continue
        features, mask = pad_batch(list(task.features), max_len)
        groups.append((torch.from_numpy(features), torch.from_numpy(mask), torch.from_numpy(np.array(task.labels))))
    return groups


def train_student(tasks: list[TaskRecords], *, steps: int, lr: float = 1e-3, seed: int = 0,
                  config: StudentConfig | None = None, loss: str = "lambda",
                  model: torch.nn.Module | None = None, schedule: str = "constant",
                  gain_scale: float = GAIN_SCALE,
                  temperature: float = LISTWISE_TEMPERATURE) -> tuple[Student, list[float]]:
    """A student trained for `steps` Adam steps, one task group per step; returns it and the losses.

    `model` trains another network with the same interface instead (the TenSet-MLP baseline);
    it is built by the caller, so seed its initialisation there. Runs on one torch thread: a
    task group is too small for intra-op threads to pay, and the result then depends only on the
    seed (the first rocketlake student, trained on 2 threads beside another job, ended at loss
    1.04 where the same seed and settings on one thread end at 0.71).
    """
    torch.manual_seed(seed)
    student = model if model is not None else Student(config or StudentConfig(feature_dim=TRACE_FEATURE_DIM))
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        losses = train_steps(student, to_groups(tasks, student.config.max_len), steps=steps, lr=lr, loss=loss,
                             sequential=True, schedule=schedule, gain_scale=gain_scale,  # the faster scan on CPU
                             temperature=temperature)
    finally:
        torch.set_num_threads(previous)
    return student, losses
