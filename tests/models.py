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


def gelu_mlp_model() -> onnx.ModelProto:
    """y = GELU(x @ W) with GELU written out through Erf, as exporters emit it: x[1,16] -> y[1,32]."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32) / 4, "W")
    constants = [numpy_helper.from_array(np.array(value, np.float32), name)
                 for name, value in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Div", ["h", "sqrt2"], ["scaled"]),
            helper.make_node("Erf", ["scaled"], ["erf"]),
            helper.make_node("Add", ["erf", "one"], ["shifted"]),
            helper.make_node("Mul", ["h", "shifted"], ["gated"]),
            helper.make_node("Mul", ["gated", "half"], ["y"]),
        ],
        "gelu_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        initializer=[weight, *constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tcl-tuned-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_relu6_model() -> onnx.ModelProto:
    """Two 3x3 convolutions, each followed by Clip(0, 6) as in MobileNetV2: x[1,4,8,8] -> y[1,8,8,8]."""
    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) / 4, name)
                    for name, shape in (("W1", (8, 4, 3, 3)), ("W2", (8, 8, 3, 3)))]
    initializers += [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in (("lo", 0.0), ("hi", 6.0))]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
            helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
            helper.make_node("Clip", ["c2", "lo", "hi"], ["y"]),
        ],
        "conv_relu6",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tcl-tuned-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def two_in_two_out_model() -> onnx.ModelProto:
    """Two inputs, a tuple of two outputs: y = Relu(x @ W + s), t = Tanh(s) * 2 on x[2,16], s[2,8]."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32) / 4, "W")
    two = numpy_helper.from_array(np.full(8, 2, np.float32), "two")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "s"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
            helper.make_node("Tanh", ["s"], ["ts"]),
            helper.make_node("Mul", ["ts", "two"], ["t"]),
        ],
        "two_in_two_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 8])],
        initializer=[weight, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tcl-tuned-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
