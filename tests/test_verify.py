"""Verification maths and timing, on plain arrays and a real onnxruntime session."""

from __future__ import annotations

import numpy as np

from deploy.artifact import TensorInfo
from deploy.verify import compare, median_ms, onnxruntime_call, onnxruntime_session, random_inputs
from tests.models import tiny_mlp_model


def test_compare_within_tolerance_passes_and_reports_errors():
    want = [np.array([1.0, 2.0, -4.0], dtype=np.float32)]
    got = [np.array([1.0, 2.001, -4.0], dtype=np.float32)]
    result = compare(got, want, atol=1e-4, rtol=1e-3)
    assert result.passed
    assert abs(result.max_abs_err - 0.001) < 1e-6
    assert abs(result.max_rel_err - 0.0005) < 1e-6


def test_compare_outside_tolerance_fails():
    result = compare([np.array([1.1], np.float32)], [np.array([1.0], np.float32)], atol=1e-4, rtol=1e-3)
    assert not result.passed and result.max_abs_err > 0.09


def test_compare_shape_or_count_mismatch_fails():
    one = [np.zeros((2, 2), np.float32)]
    assert not compare([np.zeros((4,), np.float32)], one, atol=1, rtol=1).passed
    assert not compare(one + one, one, atol=1, rtol=1).passed


def test_random_inputs_are_seeded_and_typed():
    infos = [TensorInfo(name="x", shape=[2, 3], dtype="float32"), TensorInfo(name="ids", shape=[4], dtype="int64")]
    first, second = random_inputs(infos, seed=7), random_inputs(infos, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert first[0].dtype == np.float32 and first[1].dtype == np.int64
    assert first[1].min() >= 0
    assert not np.array_equal(first[0], random_inputs(infos, seed=8)[0])


def test_onnxruntime_timing_is_positive_and_outputs_are_real():
    model = tiny_mlp_model()
    infos = [TensorInfo(name="x", shape=[1, 16], dtype="float32")]
    arrays = random_inputs(infos, seed=0)
    call = onnxruntime_call(onnxruntime_session(model.SerializeToString()), infos, arrays)
    (output,) = call()
    assert output.shape == (1, 8) and (output >= 0).all()
    assert median_ms(call, repeats=3) > 0
