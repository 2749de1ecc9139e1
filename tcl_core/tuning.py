"""One tuning run assembled from our method's parts: cost-model names, the search strategy, then MetaSchedule.

tcl_core.tvm_api knows TVM; this module knows which cost model a name means ("tcl" is our
student, "xgb" and "random" are TVM's) and when the RDU sampler wraps the evolutionary search.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcl_core import tvm_api
from tcl_core.tvm_api import ms
from tcl_core.warm_start import WarmStartConfig, WarmStartResult, warm_start

__all__ = ["COST_MODELS", "TuneOutcome", "make_cost_model", "make_search_strategy", "tune"]

COST_MODELS = ("tcl", "xgb", "random")


def make_cost_model(name: str, student_path: Path | None = None) -> ms.CostModel:
    """Resolve a cost-model name to a MetaSchedule cost model: the one place names are mapped.

    "tcl" loads the student at `student_path` (None: an untrained one that learns in the job).
    """
    if name == "xgb":
        return ms.CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1)
    if name == "random":
        return ms.CostModel.create("random")
    if name == "tcl":
        from tcl_core.cost_model import TclCostModel  # imports torch; only when asked for
        from tcl_core.student import load_student

        return TclCostModel(load_student(student_path) if student_path is not None else None)
    raise ValueError(f"unknown cost model {name!r}; expected one of: {', '.join(COST_MODELS)}")


def make_search_strategy(cost_model_name: str, model: ms.CostModel, *, population: int, explore: float,
                         rdu_fraction: float) -> ms.search_strategy.SearchStrategy:
    """MetaSchedule's evolutionary search; with "tcl" and `rdu_fraction` > 0, wrapped by the RDU sampler.

    `population` sizes the search: TVM's default 512 costs more search time than measuring on small
    budgets (notes, item 12). `explore` is its eps-greedy share: that many of each batch (rounded
    down) are random samples of the design space, for every cost model; a learned model's confident
    mistakes need them (docs/cost_model.md, "Exploration"). The RDU sampler picks `rdu_fraction` of
    each measured batch among the search's proposals (tcl_core.rdu_search).
    """
    strategy = ms.search_strategy.EvolutionarySearch(population_size=population, eps_greedy=explore)
    if cost_model_name == "tcl" and rdu_fraction > 0:
        from tcl_core.rdu_search import RDUSearch  # imports torch; only when asked for

        strategy = RDUSearch(strategy, model, fraction=rdu_fraction)
    return strategy


@dataclass(frozen=True)
class TuneOutcome:
    measured: int                    # candidates measured, warm start included
    stopped_early: str | None        # "time budget" or "converged": what ended the search before the trials
    profile: dict[str, float]        # MetaSchedule's profiler: seconds per scope
    tasks_warm_started: int = 0      # tasks whose first batch replayed similar workloads' schedules


def tune(*, tasks: list, cost_model: str, population: int, student_path: Path | None = None,
         rdu_fraction: float = 0.0, explore: float = 0.05, warm: WarmStartConfig | None = None,
         **run: Any) -> TuneOutcome:
    """Tune `tasks` with the named cost model.

    `warm`: first measure, for each task without records, the cost model's picks among replayed
    schedules of similar workloads (tcl_core.warm_start). They come on top of the trial budget
    (at most `warm.candidates` per task: taken from it, the last tasks of a tight budget got no
    round of their own and kept TVM's default schedules) and within the time budget. `run`: the
    rest of tcl_core.tvm_api.tune_tasks's arguments (target, database, work_dir, budgets, seed,
    on_measured, rpc, threads, flush_caches, seconds, patience_rounds).
    """
    model = make_cost_model(cost_model, student_path)
    strategy = make_search_strategy(cost_model, model, population=population, explore=explore,
                                    rdu_fraction=rdu_fraction)
    warmed = WarmStartResult(tasks_warm_started=0, measured=0, seconds_per_task={})
    if warm is not None:
        started = time.monotonic()
        report = run["on_measured"]
        warmed = warm_start(tasks, database=run["database"], target=run["target"], cost_model=model, config=warm,
                            on_measured=lambda n: report(tvm_api.TuningProgress(n, None, extra_trials=n)),
                            rpc=run.get("rpc"), threads=run.get("threads"))
        if run.get("seconds") is not None:
            run["seconds"] = max(0.0, run["seconds"] - (time.monotonic() - started))
        run["on_measured"] = lambda progress: report(
            tvm_api.TuningProgress(progress.trials + warmed.measured, progress.best_estimate_ms,
                                   extra_trials=warmed.measured))
    measured, stopped, profile = tvm_api.tune_tasks(tasks=tasks, cost_model=model, strategy=strategy, **run)
    return TuneOutcome(measured + warmed.measured, stopped, profile, warmed.tasks_warm_started)
