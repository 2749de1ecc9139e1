"""Continual knowledge distillation: the previous student teaches the next, at constant size.

A new student starts as a copy of the teacher (the nearest platform's student, or this
platform's previous version) and trains on the new measurements with the ranking loss plus a
distillation term: within each task of an unlabelled pool of candidates (features only; no old
platform's data), the KL divergence from the teacher's softmax over the task's candidates to the
student's. The ranking loss moves the student towards the new platform; the distillation term
keeps the orderings the teacher got right wherever the new labels say nothing, so what
transfers is kept without old data, without a head per platform, without growing.

`alpha=0` is plain fine-tuning, and `teacher=None` training from scratch: the baselines the
distilled student is compared with (research/continual.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tcl_core.features import pad_batch
from tcl_core.records import TaskRecords
from tcl_core.student import Student, StudentConfig, predict, train_steps
from tcl_core.fit import to_groups, train_student

__all__ = ["DistillConfig", "distillation_loss", "distil_student"]


@dataclass(frozen=True)
class DistillConfig:
    """How one distillation round trains."""

    steps: int = 300            # Adam steps, one labelled task per step
    lr: float = 1e-3
    alpha: float = 0.1          # weight of the distillation term; 0 = fine-tune without distillation
                                # (0.1 measured best of 1.0 / 0.3 / 0.1: research/results/cross-platform/continual_transfer*.md)
    temperature: float = 1.0    # softmax temperature over a task's candidates
    seed: int = 0


def distillation_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Listwise KL(teacher || student) over one task's candidates: (g,), (g,) -> scalar.

    Softmax over the group makes it see only the order and relative gaps the teacher predicts
    (scores mean nothing across tasks); scaled by T^2 so its gradient does not shrink with T.
    """
    teacher_log_p = F.log_softmax(teacher_scores / temperature, dim=0)  # (g,)
    student_log_p = F.log_softmax(student_scores / temperature, dim=0)  # (g,)
    return F.kl_div(student_log_p, teacher_log_p, log_target=True, reduction="sum") * temperature ** 2


def distil_student(
    teacher: Student | None, labelled: list[TaskRecords], *, pool: list[TaskRecords] | None = None,
    config: DistillConfig = DistillConfig(), student_config: StudentConfig | None = None,
) -> tuple[Student, list[float]]:
    """A new student (the teacher is not changed) and its per-step losses.

    labelled: tasks with measured candidates (the ranking loss); pool: tasks whose candidates'
    features the distillation term reads (defaults to `labelled`; their run times are unused).
    teacher None: a fresh student (`student_config`, default the standard one) from scratch.
    """
    if teacher is None:
        return train_student(labelled, steps=config.steps, lr=config.lr, seed=config.seed, config=student_config)
    torch.manual_seed(config.seed)
    student = copy.deepcopy(teacher)
    groups = to_groups(labelled, student.config.max_len)
    extra = None
    if config.alpha > 0:
        targets = _teacher_targets(teacher, pool if pool is not None else labelled)
        rng = np.random.default_rng(config.seed)

        def extra() -> torch.Tensor:
            features, mask, teacher_scores = targets[rng.integers(len(targets))]
            scores = student(features, mask, sequential=True)  # (g,)
            return config.alpha * distillation_loss(scores, teacher_scores, config.temperature)

        extra = extra if targets else None
    losses = train_steps(student, groups, steps=config.steps, lr=config.lr, sequential=True, extra_loss=extra)
    return student, losses


def _teacher_targets(teacher: Student, pool: list[TaskRecords]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(features (g, l, f), mask (g, l), teacher scores (g,)) per pool task with two or more candidates."""
    targets = []
    for task in pool:
        if task.size < 2:
            continue
        features, mask = pad_batch(list(task.features), teacher.config.max_len)
        scores = predict(teacher, features, mask, sequential=True)  # (g,)
        targets.append((torch.from_numpy(features), torch.from_numpy(mask), torch.from_numpy(scores)))
    return targets
