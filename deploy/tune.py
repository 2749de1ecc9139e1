"""Tasks and the MetaSchedule run: spread a trial budget over the tasks the database lacks.

The tuning database is kept per platform under `state_dir`, so a second model that shares
workloads with an earlier one reuses its records instead of measuring them again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tcl_core import tuning, tvm_api
from tcl_core.warm_start import WarmStartConfig


# Share of each measured batch drawn at random (MetaSchedule's eps-greedy, rounded down per batch).
# A pretrained student is confidently wrong on some tasks, and with only its own picks measured
# every label it learns from comes from the same bad family, so the search never leaves it
# (docs/cost_model.md, "Exploration"); XGBoost and random start untrained, explore by themselves and keep
# TVM's 0.05, which draws nothing at batches under 20.
TCL_EXPLORE = 0.25
TVM_EXPLORE = 0.05


def explore_share(explore: float | None, cost_model: str) -> float:
    """`explore` as given, else the default for the resolved `cost_model` ("tcl", "xgb", "random")."""
    if explore is not None:
        return explore
    return TCL_EXPLORE if cost_model == "tcl" else TVM_EXPLORE


@dataclass(frozen=True)
class TuningPlan:
    """The model's tasks, and those the database has no full round of records for."""

    tasks: list
    fresh: list

    @property
    def reused(self) -> list:
        """The tasks the database already holds a full round of records for: not searched again."""
        fresh = {id(task) for task in self.fresh}
        return [task for task in self.tasks if id(task) not in fresh]


@dataclass(frozen=True)
class TuningResult:
    tasks: int
    tasks_reused: int
    tasks_untuned: int  # tasks to tune that ended with no measured record: they keep TVM's default schedule
    trials_measured: int
    seconds: float
    stopped_early: str | None = None  # "time budget" or "converged": what ended the search before the trials did
    profile: dict[str, float] | None = None  # MetaSchedule's profiler: seconds per scope (build, run, search, ...)
    tasks_warm_started: int = 0  # tasks whose first batch replayed similar workloads' schedules (tcl_core.warm_start)


def plan_tuning(lowered, target, *, database, trials_per_iter: int) -> TuningPlan:
    """Extract `lowered`'s tasks and pick those `database` lacks a full round of records for."""
    tasks = tvm_api.extract_tasks(lowered, target)
    fresh = [task for task in tasks if tvm_api.count_records(database, task.dispatched[0], trials_per_iter) < trials_per_iter]
    return TuningPlan(tasks=tasks, fresh=fresh)


def budget_shortfall(tasks_to_tune: int, trials: int, trials_per_iter: int) -> str | None:
    """A warning when `trials` cannot give every task to tune one round, else None.

    The task scheduler measures one round of `trials_per_iter` per task in turn before it spends
    more on any, so with fewer trials than tasks x trials_per_iter the last tasks are never
    measured and run with TVM's default schedules, often tens of times slower (README, "How
    `trials` is spent"). A task with fewer distinct candidates than a round spends less, so the
    count is an upper bound. No warning for trials 0: that asks for an untuned build.
    """
    needed = tasks_to_tune * trials_per_iter
    if trials <= 0 or trials >= needed:
        return None
    reached = -(-trials // trials_per_iter)
    return (f"trials {trials} cannot give each of the {tasks_to_tune} tasks to tune a round of "
            f"{trials_per_iter}: up to {tasks_to_tune - reached} may keep untuned default schedules; "
            f"trials >= {needed} reaches every task")


def tune_module(
    plan: TuningPlan,
    target,
    *,
    database,
    log_dir: Path,
    trials: int,
    cost_model: str,
    trials_per_iter: int,
    population: int,
    seed: int,
    on_measured: tvm_api.ProgressCallback,
    student_path: Path | None = None,
    rdu_fraction: float = 0.0,
    explore: float = 0.05,
    rpc: dict | None = None,
    threads: int | None = None,
    flush_caches: bool = False,
    time_budget: float | None = None,
    patience_rounds: int | None = None,
    warm: WarmStartConfig | None = None,
) -> TuningResult:
    """Tune the plan's fresh tasks; count those that still have no record (and so no tuned schedule)."""
    started = time.perf_counter()
    tasks, fresh = plan.tasks, plan.fresh
    outcome = tuning.TuneOutcome(0, None, None)
    if fresh and trials > 0:
        outcome = tuning.tune(
            tasks=fresh,
            target=target,
            database=database,
            work_dir=log_dir,
            cost_model=cost_model,
            max_trials_global=trials,
            # No cap below the budget (TVM's own default): the gradient scheduler gives every task
            # one round, then the rest to the tasks that weigh most. An even share per task left a
            # tiny task's unused share unspent and held the big kernels to it (docs/cost_model.md, "Budget").
            max_trials_per_task=trials,
            num_trials_per_iter=trials_per_iter,
            population=population,
            seed=seed,
            on_measured=on_measured,
            student_path=student_path,
            rdu_fraction=rdu_fraction,
            explore=explore,
            rpc=rpc,
            threads=threads,
            flush_caches=flush_caches,
            seconds=time_budget,
            patience_rounds=patience_rounds,
            warm=warm,
        )
    untuned = sum(1 for task in fresh if tvm_api.count_records(database, task.dispatched[0], 1) == 0)
    return TuningResult(tasks=len(tasks), tasks_reused=len(plan.reused), tasks_untuned=untuned,
                        trials_measured=outcome.measured, seconds=time.perf_counter() - started,
                        stopped_early=outcome.stopped_early, profile=outcome.profile,
                        tasks_warm_started=outcome.tasks_warm_started)



def estimate_ms(tasks: list, database) -> float | None:
    """The tuner's estimate of one run of the model: each task's best measured time x its weight, in ms.

    None when a task has no record (its default schedule was never timed). The runtime adds the
    VM's per-call work and the caches' state between kernels, so the deployed latency differs;
    the manifest shows both.
    """
    total = 0.0
    for task in tasks:
        mod = task.dispatched[0]
        if not database.has_workload(mod):
            return None
        best = database.get_top_k(database.commit_workload(mod), 1)
        if not best or not best[0].run_secs:
            return None
        seconds = [float(s) for s in best[0].run_secs]
        if max(seconds) >= 1e9:  # MetaSchedule's mark of a failed build or run
            return None
        total += int(task.weight) * sum(seconds) / len(seconds)
    return total * 1e3
