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


def _backend_case(name: str):
    """A model of onnx's own backend test data, its input infos, inputs and reference outputs."""
    import glob
    import os

    import onnx
    from onnx import numpy_helper

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted", name)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    tensors = lambda kind: [numpy_helper.to_array(onnx.load_tensor(f))  # noqa: E731
                            for f in sorted(glob.glob(os.path.join(folder, "test_data_set_0", f"{kind}_*.pb")))]
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    arrays = tensors("input")
    infos = [TensorInfo(name=n, shape=list(a.shape), dtype=str(a.dtype)) for n, a in zip(names, arrays)]
    return model, infos, arrays, tensors("output")


def test_a_model_onnxruntime_cannot_run_is_checked_against_its_newer_opset():
    from deploy.verify import CONVERTED_OPSET, open_reference

    model, infos, arrays, expected = _backend_case("test_Linear")  # Gemm at opset 6: no kernel in onnxruntime
    reference = open_reference(model, infos, arrays, threads=1)
    assert reference.name == f"onnxruntime, converted to opset {CONVERTED_OPSET}"
    assert "Gemm" in reference.why and reference.onnxruntime_model is not None
    np.testing.assert_allclose(reference.call()[0], expected[0], atol=1e-5, rtol=1e-4)


def test_without_onnxruntime_onnx_reference_checks_small_models_and_nothing_is_a_one_line_reason(monkeypatch):
    import onnx
    import pytest
    from onnx import TensorProto, helper

    from deploy import verify
    from deploy.errors import PipelineError

    def no_onnxruntime(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : pretend\nsecond line")

    monkeypatch.setattr(verify, "onnxruntime_session", no_onnxruntime)
    model, infos, arrays, expected = _backend_case("test_GLU")
    reference = verify.open_reference(model, infos, arrays, threads=1)
    assert reference.name == "onnx.reference" and reference.onnxruntime_model is None
    assert reference.why == "onnxruntime cannot run it ([ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : pretend)"
    np.testing.assert_allclose(reference.call()[0], expected[0], atol=1e-5, rtol=1e-4)

    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    unknown = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(PipelineError, match="^no reference can run this model: onnxruntime cannot run it") as err:
        verify.open_reference(unknown, [TensorInfo(name="x", shape=[2], dtype="float32")],
                              [np.zeros(2, np.float32)], threads=1)
    assert "\n" not in str(err.value)


def test_nan_and_infinities_where_the_reference_has_them_agree():
    want = [np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)]
    assert compare([want[0].copy()], want, atol=1e-4, rtol=1e-3).passed
    one_sided = compare([np.array([1.0, np.inf, -np.inf, np.nan], np.float32)], want, atol=1e-4, rtol=1e-3)
    assert not one_sided.passed and one_sided.max_abs_err == float("inf")
