"""Tiny ONNX files for daemon tests, built with onnx.helper from seeded weights (byte-identical each run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_mlp_model(seed: int = 0) -> onnx.ModelProto:
    """y = Relu(x @ W + b) on x[1,16] -> y[1,8]; `seed` changes the weights (hence the sha256)."""
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32) / 4, "W")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
        ],
        "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tcl-tuned-tests")
    model.ir_version = 8  # what onnxruntime of this era reads
    onnx.checker.check_model(model)
    return model


def tiny_mlp_onnx(path: Path, seed: int = 0) -> Path:
    """Write the tiny MLP to `path` and return it."""
    path = Path(path)
    path.write_bytes(tiny_mlp_model(seed).SerializeToString())
    return path


def corrupt_onnx(path: Path) -> Path:
    """Write bytes that are not a protobuf ONNX model (but look like a file someone dropped)."""
    path = Path(path)
    path.write_bytes(b"\x89not an onnx model\x00" + bytes(range(256)) * 4)
    return path
