"""Warm start by similarity (tcl_core.warm_start): real TVM, real measurements, tiny models."""

from __future__ import annotations

import math

import pytest

from deploy import examples
from deploy.options import TuningOptions
from deploy.pipeline import import_and_lower
from tcl_core import tuning, tvm_api
from tcl_core.warm_start import SimilarWorkloads, WarmStartConfig, _distance, warm_start
from tests.models import conv_relu6_model


def _conv_tasks(model, target):
    lowered = import_and_lower(model, target, TuningOptions())
    return [task for task in tvm_api.extract_tasks(lowered, target) if tvm_api.anchor_block(task.dispatched[0]) == "conv2d_nhwc"]


def _schedule(trace) -> str:
    """A trace's scheduling steps and decisions, as Python (postprocessing, redone on every replay, left out)."""
    return "\n".join(trace.as_python(remove_postproc=True))


def _records(database, mod):
    return database.get_top_k(database.commit_workload(mod), 1000)


@pytest.fixture(scope="module")
def platform_db(tmp_path_factory):
    """A platform database that has tuned the ReLU6 CNN's two convolutions (8 random candidates each)."""
    target = tvm_api.make_target(None)
    database = tvm_api.open_database(tmp_path_factory.mktemp("db"))
    tasks = _conv_tasks(conv_relu6_model(), target)
    tuning.tune(tasks=tasks, cost_model="random", population=16, target=target, database=database,
                work_dir=tmp_path_factory.mktemp("logs"), max_trials_global=8 * len(tasks), max_trials_per_task=8,
                num_trials_per_iter=8, seed=0, on_measured=lambda progress: None)
    return target, database, tasks


def test_the_nearest_workload_shares_the_anchor_and_is_closest_in_shape(platform_db):
    target, database, source_tasks = platform_db
    similar = SimilarWorkloads(database)
    new_task = _conv_tasks(examples.tiny_cnn(batch=1), target)[0]
    extents = tvm_api.loop_extents(new_task.dispatched[0], "conv2d_nhwc")
    nearest = similar.nearest(new_task.dispatched[0], workloads=2)
    assert len(nearest) == 2
    distances = [_distance(extents, tvm_api.loop_extents(records[0].workload.mod, "conv2d_nhwc")) for records in nearest]
    assert distances == sorted(distances)
    # a workload is never its own neighbour
    own = tvm_api.structural_hash(source_tasks[0].dispatched[0])
    assert all(tvm_api.structural_hash(r[0].workload.mod) != own for r in similar.nearest(source_tasks[0].dispatched[0], 5))


def test_a_warm_started_task_first_measures_replayed_schedules_of_a_similar_workload(platform_db):
    target, database, source_tasks = platform_db
    # tiny_cnn's convolutions: other shapes (3->16 on 32x32; 16->32 stride 2) and a ReLU epilogue, not ReLU6
    tasks = _conv_tasks(examples.tiny_cnn(batch=1), target)
    assert all(tvm_api.count_records(database, task.dispatched[0]) == 0 for task in tasks)
    similar = SimilarWorkloads(database)  # as warm_start sees it, before its own measurements join
    reports = []
    result = warm_start(tasks, database=database, target=target, cost_model=tuning.make_cost_model("random"),
                        config=WarmStartConfig(workloads=2, per_workload=4, candidates=3), on_measured=reports.append)

    assert result.tasks_warm_started == len(tasks) and result.measured == 3 * len(tasks) and reports == [result.measured]
    assert all(seconds is not None and seconds > 0 for seconds in result.seconds_per_task.values())
    for task in tasks:
        mod = task.dispatched[0]
        measured = _records(database, mod)
        assert len(measured) == 3  # the whole first batch, nothing else yet
        # every one is a source schedule replayed onto this task (not a sample of its design space)
        spaces, postprocs = tvm_api.design_spaces(mod, target)
        replays = {_schedule(candidate.sch.trace) for records in similar.nearest(mod, 2) for record in records[:4]
                   for candidate in tvm_api.replay_trace(record.trace, mod, spaces, postprocs)}
        assert {_schedule(record.trace) for record in measured} <= replays
        # each is a point of the task's own design space: a sketch's steps, only the decisions differ
        sketches = {tuple(inst.kind.name for inst in space.insts) for space in spaces}
        for record in measured:
            steps = [inst.kind.name for inst in record.trace.insts]
            assert tuple(steps[:steps.index("EnterPostproc")]) in sketches
        # and its tile sizes were refitted to this task's loops: they multiply out to its extents
        extents = tvm_api.loop_extents(mod, "conv2d_nhwc")
        for record in measured:
            tiles = [[int(f) for f in record.trace.decisions[inst]] for inst in record.trace.insts
                     if inst.kind.name == "SamplePerfectTile"]
            products = sorted(math.prod(t) for t in tiles)
            assert products == sorted(extents)


def test_the_search_evolves_from_warm_started_records(platform_db, tmp_path):
    """The evolutionary search seeds its population with the task's best records and mutates them:
    replayed schedules must replay and mutate like its own (a foreign trace crashed the search)."""
    target, database, _ = platform_db
    tasks = _conv_tasks(examples.tiny_cnn(batch=2), target)  # shapes no other test measured
    reports = []
    outcome = tuning.tune(tasks=tasks, cost_model="random", population=32, target=target, database=database,
                          work_dir=tmp_path, max_trials_global=16 * len(tasks), max_trials_per_task=16,
                          num_trials_per_iter=8, seed=1, on_measured=reports.append,
                          warm=WarmStartConfig(candidates=2))
    assert outcome.tasks_warm_started == len(tasks)
    # the warm batch is reported first, then the search's counts on top of it
    assert reports[0].trials == 2 * len(tasks) and reports[-1].trials == outcome.measured > 2 * len(tasks)
    assert {report.extra_trials for report in reports} == {2 * len(tasks)}  # on top of the budget, said so
    assert all(tvm_api.count_records(database, task.dispatched[0]) > 2 for task in tasks)


def test_tile_sizes_keep_the_inner_factors_that_divide_the_new_extent():
    assert tvm_api._fit_tile([1, 2, 1, 64], 1280) == [10, 2, 1, 64]
    assert tvm_api._fit_tile([7, 2, 1, 1], 4) == [2, 2, 1, 1]
    assert tvm_api._fit_tile([1, 1, 2, 64], 96) == [3, 1, 1, 32]


def test_a_task_with_records_of_its_own_or_no_similar_workload_is_left_to_the_search(platform_db, tmp_path):
    target, database, source_tasks = platform_db
    result = warm_start(source_tasks, database=database, target=target, cost_model=tuning.make_cost_model("random"),
                        config=WarmStartConfig(), on_measured=lambda n: None)
    assert result.tasks_warm_started == 0 and result.measured == 0
    empty = tvm_api.open_database(tmp_path / "empty")
    result = warm_start(source_tasks, database=empty, target=target, cost_model=tuning.make_cost_model("random"),
                        config=WarmStartConfig(), on_measured=lambda n: None)
    assert result.tasks_warm_started == 0 and tvm_api.count_records(empty, source_tasks[0].dispatched[0]) == 0
