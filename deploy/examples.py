"""Example models built with `onnx.helper` and seeded weights: no downloads, byte-identical every run.

`make run` drops `tiny_cnn` into the demo watch folder; the benchmark tunes all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_OPSET = 17


def _weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)


def tiny_cnn(batch: int | str = 1) -> onnx.ModelProto:
    """Conv(3->16) ReLU, Conv(16->32, stride 2) ReLU, global pool, Gemm(32->10): x[batch,3,32,32]."""
    rng = np.random.default_rng(0)
    weights = [
        _weight(rng, "conv1.w", (16, 3, 3, 3)), _weight(rng, "conv1.b", (16,)),
        _weight(rng, "conv2.w", (32, 16, 3, 3)), _weight(rng, "conv2.b", (32,)),
        _weight(rng, "fc.w", (10, 32)), _weight(rng, "fc.b", (10,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializer=weights,
    )
    return _finish(graph)


def mlp(batch: int | str = 1, width: int = 256) -> onnx.ModelProto:
    """Gemm(128->width) ReLU, Gemm(width->width) ReLU, Gemm(width->10): x[batch,128]."""
    rng = np.random.default_rng(1)
    weights = [
        _weight(rng, "fc1.w", (width, 128)), _weight(rng, "fc1.b", (width,)),
        _weight(rng, "fc2.w", (width, width)), _weight(rng, "fc2.b", (width,)),
        _weight(rng, "fc3.w", (10, width)), _weight(rng, "fc3.b", (10,)),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.w", "fc1.b"], ["h1"], transB=1),
        helper.make_node("Relu", ["h1"], ["a1"]),
        helper.make_node("Gemm", ["a1", "fc2.w", "fc2.b"], ["h2"], transB=1),
        helper.make_node("Relu", ["h2"], ["a2"]),
        helper.make_node("Gemm", ["a2", "fc3.w", "fc3.b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 128])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializer=weights,
    )
    return _finish(graph)


def _finish(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="tcl-tuned")
    model.ir_version = 8  # readable by every onnxruntime we support
    onnx.checker.check_model(model)
    return model


EXAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {"tiny_cnn": tiny_cnn, "mlp": mlp}


def write_example(name: str, path: Path) -> Path:
    """Write example `name` to `path` atomically (temp file + rename), so a watcher never sees half of it."""
    if name not in EXAMPLES:
        raise KeyError(f"unknown example {name!r}; choose from {sorted(EXAMPLES)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part")
    onnx.save(EXAMPLES[name](), str(partial))
    partial.rename(path)
    return path
