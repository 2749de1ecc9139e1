"""Warm start by similarity: a new task's first measured batch replays the best schedules of similar workloads.

MetaSchedule reuses a database record only for the identical workload, so a platform that has
tuned ResNet-18 starts MobileNetV2's 1x1 convolutions from nothing. Transfer-tuning (Gibson and
Cano, PACT'22) recovered most of full tuning's speed-up by reusing schedules of similar
workloads. Here, before the evolutionary search, each task with no record of its own gets:

1. the nearest workloads measured on this platform: same anchor block (the convolution or matmul
   that carries the work, so the trace's tiling applies), nearest loop extents (log distance);
2. their best schedules' decisions (tile sizes refitted to the task's loop extents, unrolling,
   compute locations) written into the task's own design-space sketches
   (tcl_core.tvm_api.replay_trace), so each is a point of the task's design space that the
   search's mutators can work on;
3. ranked by the job's cost model (the student, trained on this platform's records, ranks
   schedules it has never seen timed), the top `candidates` built and measured as the task's
   first batch, committed to the database like any measurement.

The search that follows seeds its population from the database's best records of the task
(EvolutionarySearch's init_measured_ratio), so it starts from the replayed schedules.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tcl_core import tvm_api
from tcl_core.tvm_api import ms

__all__ = ["WarmStartConfig", "WarmStartResult", "SimilarWorkloads", "warm_start"]


@dataclass(frozen=True)
class WarmStartConfig:
    workloads: int = 3       # similar workloads a task borrows from
    per_workload: int = 4    # best records replayed from each
    candidates: int = 4      # replayed schedules measured per task (the student's top picks)


@dataclass(frozen=True)
class WarmStartResult:
    tasks_warm_started: int  # tasks whose first batch was replayed schedules
    measured: int            # candidates built and timed
    seconds_per_task: dict[str, float | None]  # task name -> best replayed mean seconds (None: all failed)


def _distance(a: list[int], b: list[int]) -> float:
    """How far apart two loop nests' extents are: sum of |log ratio|, inf when the nests differ in depth."""
    if len(a) != len(b):
        return math.inf
    return sum(abs(math.log(max(x, 1)) - math.log(max(y, 1))) for x, y in zip(a, b))


class SimilarWorkloads:
    """The platform database's measured workloads, grouped by anchor block, for nearest-workload lookups."""

    def __init__(self, database: ms.Database) -> None:
        by_workload: dict[int, list] = defaultdict(list)
        mods: dict[int, object] = {}
        for record in database.get_all_tuning_records():
            seconds = [float(s) for s in record.run_secs or []]
            if not seconds or max(seconds) >= 1e9:  # failed builds and runs teach nothing to replay
                continue
            key = tvm_api.structural_hash(record.workload.mod)
            by_workload[key].append(record)
            mods[key] = record.workload.mod
        # anchor name -> [(workload hash, loop extents, its records best first)]
        self._by_anchor: dict[str, list[tuple[int, list[int], list]]] = defaultdict(list)
        for key, records in by_workload.items():
            anchor = tvm_api.anchor_block(mods[key])
            extents = tvm_api.loop_extents(mods[key], anchor) if anchor else None
            if extents is not None:
                records.sort(key=lambda r: sum(float(s) for s in r.run_secs) / len(r.run_secs))
                self._by_anchor[anchor].append((key, extents, records))

    def nearest(self, mod, workloads: int) -> list[list]:
        """Records (best first) of up to `workloads` measured workloads most like `mod`, nearest first; itself excluded."""
        anchor = tvm_api.anchor_block(mod)
        extents = tvm_api.loop_extents(mod, anchor) if anchor else None
        if extents is None:
            return []
        own = tvm_api.structural_hash(mod)
        ranked = sorted((_distance(extents, other), key, records)
                        for key, other, records in self._by_anchor.get(anchor, []) if key != own)
        return [records for distance, _, records in ranked[:workloads] if math.isfinite(distance)]


def warm_start(
    tasks: list, *, database: ms.Database, target, cost_model: ms.CostModel, config: WarmStartConfig,
    on_measured: Callable[[int], None], rpc: dict | None = None, threads: int | None = None,
) -> WarmStartResult:
    """Measure replayed schedules of similar workloads as the first batch of each of `tasks` that has no record.

    `tasks`: MetaSchedule ExtractedTasks. `on_measured(n)`: called once, with the count, after the batch is measured.
    """
    similar = SimilarWorkloads(database)
    chosen: list = []    # candidates to measure, all tasks
    owners: list = []    # the task of each
    for task in tasks:
        mod = task.dispatched[0]
        if tvm_api.count_records(database, mod, 1) > 0:
            continue
        sources = similar.nearest(mod, config.workloads)
        if not sources:
            continue
        spaces, postprocs = tvm_api.design_spaces(mod, target)
        candidates = [candidate for records in sources for record in records[:config.per_workload]
                      for candidate in tvm_api.replay_trace(record.trace, mod, spaces, postprocs)]
        if not candidates:
            continue
        context = ms.TuneContext(mod=mod, target=target, task_name=task.task_name)
        scores = np.asarray(cost_model.predict(context, candidates), dtype="float64")  # (n,) higher is faster
        picked = [candidates[i] for i in np.argsort(-scores, kind="stable")[:config.candidates]]
        chosen += picked
        owners += [task] * len(picked)
    if not chosen:
        return WarmStartResult(tasks_warm_started=0, measured=0, seconds_per_task={})
    seconds = tvm_api.measure_candidates(chosen, [task.dispatched[0] for task in owners], target=target,
                                         database=database, rpc=rpc, threads=threads)
    on_measured(len(chosen))
    best: dict[str, float | None] = {}
    for task, mean in zip(owners, seconds):
        previous = best.get(task.task_name)
        best[task.task_name] = mean if previous is None else previous if mean is None else min(previous, mean)
    return WarmStartResult(tasks_warm_started=len(best), measured=len(chosen), seconds_per_task=best)
