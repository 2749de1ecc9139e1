"""Feature sequences from real MetaSchedule design spaces of a tiny conv task."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.examples import tiny_cnn
from tcl_core import tvm_api
from tcl_core.features import (
    PER_STORE_FEATURE_DIM, TRACE_FEATURE_DIM, pad_batch, per_store_features, trace_features,
)


@pytest.fixture(scope="module")
def conv_task():
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 2})
    lowered = tvm_api.lower_for_tuning(tvm_api.from_onnx(tiny_cnn()), target)
    task = next(t for t in tvm_api.extract_tasks(lowered, target) if "conv" in t.task_name)
    return task, target


def _spaces(task, target, seed: int):
    context = tvm_api.ms.TuneContext(mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                                     search_strategy="evolutionary", task_name=task.task_name, rand_state=seed)
    return context, context.space_generator.generate_design_space(context.mod)


def test_trace_features_encode_decisions(conv_task):
    task, target = conv_task
    _, first = _spaces(task, target, seed=1)
    _, second = _spaces(task, target, seed=2)
    a, b = trace_features(first[0].trace), trace_features(second[0].trace)
    assert a.shape[1] == b.shape[1] == TRACE_FEATURE_DIM and a.dtype == np.float32
    assert 5 < a.shape[0] < len(first[0].trace.insts)  # address-only instructions dropped
    assert np.isfinite(a).all() and a[:, :-1].max() > 0
    assert not np.array_equal(a, b)  # other sampled tile sizes give other features
    np.testing.assert_array_equal(a, trace_features(first[0].trace))  # deterministic


def test_per_store_features_have_one_row_per_store(conv_task):
    task, target = conv_task
    context, spaces = _spaces(task, target, seed=1)
    args = tvm_api.ms.arg_info.ArgInfo.from_prim_func(task.dispatched[0]["main"])
    candidates = [tvm_api.ms.MeasureCandidate(space, args) for space in spaces]
    rows = per_store_features(context, candidates)
    assert len(rows) == len(spaces)
    assert all(r.ndim == 2 and r.shape[0] >= 1 and r.shape[1] == PER_STORE_FEATURE_DIM for r in rows)


def test_pad_batch_masks_and_truncates():
    sequences = [np.ones((3, 4), np.float32), 2 * np.ones((5, 4), np.float32)]
    features, mask = pad_batch(sequences, max_len=4)
    assert features.shape == (2, 4, 4) and mask.tolist() == [[True] * 3 + [False], [True] * 4]
    assert features[0, 3].sum() == 0 and (features[1] == 2).all()
