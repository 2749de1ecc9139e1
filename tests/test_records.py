"""Reading a tuning database into per-task groups, on one written by hand with known run times.

The database is real (TVM's JSONDatabase writes it, from real design-space traces of the example
MLP's tasks), but the run times are chosen, so order, failures and labels can be checked exactly.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from deploy.examples import mlp
from tcl_core import tvm_api
from tcl_core.features import PER_STORE_FEATURE_DIM, TRACE_FEATURE_DIM, per_store_task_featuriser, trace_features
from tcl_core.records import RECORD_FILE, RecordsError, card_weights, load_task_records

ms = tvm_api.ms
# (task, run_secs) in the order they are committed: interleaved tasks, failures of both kinds
PLAN = [(0, [2e-5, 4e-5]), (1, [1e-4]), (0, [1e10]), (0, [1e-5]), (1, None), (0, [3e-5])]


@pytest.fixture(scope="module")
def hand_db(tmp_path_factory):
    """(folder, workloads in commit order, traces per task in commit order)."""
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 1})
    tasks = tvm_api.extract_tasks(tvm_api.lower_for_tuning(tvm_api.from_onnx(mlp(width=32)), target), target)
    assert len(tasks) >= 3
    folder = tmp_path_factory.mktemp("hand_db")
    database = tvm_api.open_database(folder)
    workloads = [database.commit_workload(task.dispatched[0]) for task in tasks[:3]]  # the third gets no records
    traces: dict[int, list] = {0: [], 1: []}
    for seed, (task, run_secs) in enumerate(PLAN):
        context = ms.TuneContext(mod=tasks[task].dispatched[0], target=target, space_generator="post-order-apply",
                                 search_strategy="evolutionary", rand_state=seed + 1)
        trace = context.space_generator.generate_design_space(context.mod)[0].trace
        args = ms.arg_info.ArgInfo.from_prim_func(tasks[task].dispatched[0]["main"])
        record = ms.database.TuningRecord(trace, workloads[task], run_secs=run_secs, target=target, args_info=args)
        database.commit_tuning_record(record)
        traces[task].append(trace)
    return folder, workloads, traces


def test_groups_keep_file_order_and_mark_failures(hand_db):
    folder, workloads, traces = hand_db
    tasks = load_task_records(folder)
    assert [t.task_index for t in tasks] == [0, 1]  # the workload without records is left out
    first, second = tasks
    assert first.workload_hash == str(tvm_api.structural_hash(workloads[0].mod))
    np.testing.assert_allclose(first.run_seconds, [3e-5, math.inf, 1e-5, 3e-5], rtol=1e-6)
    np.testing.assert_allclose(first.labels, [1 / 3, 0.0, 1.0, 1 / 3], rtol=1e-5)
    assert first.failed.tolist() == [False, True, False, False]
    np.testing.assert_allclose(second.run_seconds, [1e-4, math.inf], rtol=1e-6)
    assert second.labels.tolist() == [1.0, 0.0] and second.size == 2
    for task in tasks:  # features in record order, from the traces that were committed, as stored
        assert all(f.dtype == np.float32 and f.shape[1] == TRACE_FEATURE_DIM for f in task.features)
        workload = workloads[task.task_index]
        for feature, trace in zip(task.features, traces[task.task_index], strict=True):
            np.testing.assert_array_equal(feature, trace_features(_as_stored(trace, workload)))
    assert not np.array_equal(first.features[0], first.features[2])  # seeds differ, so order is tested
    assert first.weight == 1.0 and not first.run_seconds.flags.writeable


def _as_stored(trace, workload):
    """The trace as it comes back from a database: through its JSON form and a replay."""
    record = ms.database.TuningRecord(trace, workload, run_secs=[1.0])
    return ms.database.TuningRecord.from_json(record.as_json(), workload).trace


def test_stored_traces_give_the_features_of_fresh_ones(hand_db):
    _, workloads, traces = hand_db
    trace = traces[0][0]
    np.testing.assert_array_equal(trace_features(_as_stored(trace, workloads[0])), trace_features(trace))


def test_agrees_with_tvms_own_reader(hand_db):
    folder, _, _ = hand_db
    tasks = load_task_records(folder)
    records = tvm_api.open_database(folder).get_all_tuning_records()
    assert sum(t.size for t in tasks) == len(records) == len(PLAN)
    theirs = [np.mean([float(x) for x in r.run_secs]) if r.run_secs else math.inf for r in records]
    theirs = sorted(x if x < 1e9 else math.inf for x in theirs)
    ours = sorted(float(x) for t in tasks for x in t.run_seconds)
    assert ours == pytest.approx(theirs, rel=1e-6)

def test_weights_and_the_collect_card(hand_db, tmp_path):
    folder, workloads, _ = hand_db
    model_dir = tmp_path / "platform" / "mlp"
    shutil.copytree(folder, model_dir)
    first_hash = str(tvm_api.structural_hash(workloads[0].mod))
    card = {"models": {"mlp": {"tasks": [{"name": "a", "weight": 3, "structural_hash": first_hash}]}}}
    (tmp_path / "platform" / "card.json").write_text(json.dumps(card))
    assert card_weights(model_dir) == {first_hash: 3.0}
    assert card_weights(folder) == {}
    weights = [t.weight for t in load_task_records(model_dir, weights=card_weights(model_dir))]
    assert weights == [3.0, 1.0]


def test_a_torn_last_line_is_skipped_and_a_corrupt_one_is_an_error(hand_db, tmp_path):
    folder, _, _ = hand_db
    torn = tmp_path / "torn"
    shutil.copytree(folder, torn)
    with (torn / RECORD_FILE).open("a") as handle:
        handle.write('[0, [[["Get')  # another process is mid-append
    assert sum(t.size for t in load_task_records(torn)) == len(PLAN)
    with (torn / RECORD_FILE).open("a") as handle:
        handle.write("\n")
    with pytest.raises(RecordsError, match=f"{RECORD_FILE}:{len(PLAN) + 1}"):
        load_task_records(torn)


def test_missing_folder_and_empty_database(tmp_path):
    with pytest.raises(RecordsError, match="no such file"):
        load_task_records(tmp_path / "absent")
    tvm_api.open_database(tmp_path / "empty")  # TVM creates the two files, empty
    assert load_task_records(tmp_path / "empty") == []


def test_a_task_featuriser_sees_the_whole_task(hand_db):
    folder, _, traces = hand_db
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 1})
    tasks = load_task_records(folder, featurise_task=per_store_task_featuriser(target))
    assert [t.size for t in tasks] == [len(traces[0]), len(traces[1])]
    for task in tasks:
        assert all(f.ndim == 2 and f.shape[1] == PER_STORE_FEATURE_DIM and len(f) >= 1 for f in task.features)
        assert all(np.isfinite(f).all() for f in task.features)
