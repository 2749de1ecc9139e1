"""Tasks and the MetaSchedule run: spread a trial budget over the tasks the database lacks.

The tuning database is kept per platform under `state_dir`, so a second model that shares
workloads with an earlier one reuses its records instead of measuring them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tcl_core import tvm_api


# Share of each measured batch drawn at random (MetaSchedule's eps-greedy, rounded down per batch).
# A pretrained student is confidently wrong on some tasks, and with only its own picks measured
# every label it learns from comes from the same bad family, so the search never leaves it
# (README, "Exploration"); XGBoost and random start untrained, explore by themselves and keep
# TVM's 0.05, which draws nothing at batches under 20.
TCL_EXPLORE = 0.25
TVM_EXPLORE = 0.05


def explore_share(explore: float | None, cost_model: str) -> float:
    """`explore` as given, else the default for the resolved `cost_model` ("tcl", "xgb", "random")."""
    if explore is not None:
        return explore
    return TCL_EXPLORE if cost_model == "tcl" else TVM_EXPLORE


@dataclass(frozen=True)
class TuningResult:
    tasks: int
    tasks_reused: int
    trials_measured: int
    seconds: float


def tune_module(
    lowered,
    target,
    *,
    database,
    log_dir: Path,
    trials: int,
    cost_model: str,
    trials_per_iter: int,
    population: int,
    seed: int,
    on_measured: Callable[[int], None],
    student_path: Path | None = None,
    rdu_fraction: float = 0.0,
    explore: float = 0.05,
    rpc: dict | None = None,
) -> TuningResult:
    """Tune every task of `lowered` that `database` has no full round of records for."""
    started = time.perf_counter()
    tasks = tvm_api.extract_tasks(lowered, target)
    fresh = [task for task in tasks if tvm_api.count_records(database, task.dispatched[0], trials_per_iter) < trials_per_iter]
    measured = 0
    if fresh and trials > 0:
        measured = tvm_api.tune_tasks(
            tasks=fresh,
            target=target,
            database=database,
            work_dir=log_dir,
            cost_model=cost_model,
            max_trials_global=trials,
            # No cap below the budget (TVM's own default): the gradient scheduler gives every task
            # one round, then the rest to the tasks that weigh most. An even share per task left a
            # tiny task's unused share unspent and held the big kernels to it (README, "Budget").
            max_trials_per_task=trials,
            num_trials_per_iter=trials_per_iter,
            population=population,
            seed=seed,
            on_measured=on_measured,
            student_path=student_path,
            rdu_fraction=rdu_fraction,
            explore=explore,
            rpc=rpc,
        )
    return TuningResult(tasks=len(tasks), tasks_reused=len(tasks) - len(fresh),
                        trials_measured=measured, seconds=time.perf_counter() - started)

