"""Continual distillation: the loss, and that the teacher's knowledge is kept on unlabelled candidates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tcl_core.distill import DistillConfig, distil_student, distillation_loss
from tcl_core.metrics import pairwise_accuracy
from tcl_core.records import TaskRecords
from tcl_core.student import Student, StudentConfig, normalise_labels, predict, train_steps
from tcl_core.train import to_groups

torch.set_num_threads(1)
CONFIG = StudentConfig(feature_dim=3, d_model=16, n_layers=1, d_state=4, max_len=8)


def test_distillation_loss_is_zero_for_agreement_and_shift_invariant():
    teacher = torch.tensor([1.0, -2.0, 0.5])
    assert distillation_loss(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    assert distillation_loss(teacher + 5.0, teacher).item() == pytest.approx(0.0, abs=1e-6)
    assert distillation_loss(-teacher, teacher).item() > 0.5


def _tasks(rng, rule, count=6, g=16, offset=0):
    """Tasks whose run time follows `rule` (features (l, 3) -> seconds)."""
    tasks = []
    for i in range(count):
        features = tuple(rng.normal(size=(int(rng.integers(2, 7)), 3)).astype(np.float32) for _ in range(g))
        seconds = np.array([rule(f) for f in features])
        tasks.append(TaskRecords(offset + i, str(offset + i), features, seconds, normalise_labels(seconds).numpy()))
    return tasks


def _accuracy(model, tasks):
    values = []
    for t in tasks:
        groups = to_groups([t], model.config.max_len)
        scores = predict(model, groups[0][0], groups[0][1], sequential=True)
        values.append(pairwise_accuracy(scores, t.labels))
    return float(np.mean(values))


def test_distillation_keeps_the_old_rule_where_fine_tuning_forgets():
    rng = np.random.default_rng(0)
    old_rule = lambda f: float(np.exp(f[:, 0].mean()))  # noqa: E731 - platform A: feature 0 is slow
    new_rule = lambda f: float(np.exp(f[:, 0].mean() + 2 * f[:, 1].mean()))  # noqa: E731 - B: feature 1 too
    old_tasks, new_tasks = _tasks(rng, old_rule), _tasks(rng, new_rule, offset=100)
    torch.manual_seed(0)
    teacher = Student(CONFIG)
    train_steps(teacher, to_groups(old_tasks, 8), steps=300, lr=3e-3, sequential=True)
    assert _accuracy(teacher, old_tasks) > 0.85
    # platform B's candidates, few labelled; the old tasks' features are not given to the student
    labelled = [TaskRecords(t.task_index, t.workload_hash, t.features[:4], t.run_seconds[:4],
                            normalise_labels(t.run_seconds[:4]).numpy()) for t in new_tasks]
    kwargs = dict(steps=300, lr=3e-3)
    fine_tuned, _ = distil_student(teacher, labelled, config=DistillConfig(alpha=0.0, **kwargs))
    distilled, losses = distil_student(teacher, labelled, pool=new_tasks, config=DistillConfig(alpha=1.0, **kwargs))
    assert np.isfinite(losses).all()
    assert _accuracy(teacher, old_tasks) > 0.85  # the teacher itself is untouched
    assert _accuracy(distilled, old_tasks) > _accuracy(fine_tuned, old_tasks) + 0.05
    # and it learned from 4 labels per task of platform B what the teacher did not know
    assert _accuracy(distilled, new_tasks) > _accuracy(teacher, new_tasks) + 0.04


def test_no_teacher_trains_from_scratch():
    rng = np.random.default_rng(1)
    tasks = _tasks(rng, lambda f: float(np.exp(f[:, 2].mean())))
    student, losses = distil_student(None, tasks, config=DistillConfig(steps=200, lr=3e-3),
                                     student_config=CONFIG)
    assert len(losses) == 200 and _accuracy(student, tasks) > 0.8
