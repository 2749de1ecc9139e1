"""ONNX intake: every way a dropped file can be wrong gets a one-line reason that says what to do."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from deploy.errors import IntakeError
from deploy.examples import tiny_cnn
from deploy.intake import load_model, sha256_of
from deploy.options import IntakeLimits
from tests.models import corrupt_onnx, tiny_mlp_onnx


def test_static_model_loads_with_shapes_and_sha(tmp_path):
    path = tiny_mlp_onnx(tmp_path / "mlp.onnx")
    spec = load_model(path)
    assert spec.name == "mlp"
    assert spec.sha256 == sha256_of(path) and len(spec.sha256) == 64
    assert [(i.name, i.shape, i.dtype) for i in spec.inputs] == [("x", [1, 16], "float32")]
    assert spec.output_names == ("y",)


def test_corrupt_file_is_refused_with_reason(tmp_path):
    with pytest.raises(IntakeError, match="not a readable ONNX file"):
        load_model(corrupt_onnx(tmp_path / "bad.onnx"))


def test_missing_file(tmp_path):
    with pytest.raises(IntakeError, match="no such file"):
        load_model(tmp_path / "nope.onnx")


def test_checker_failure_is_reported(tmp_path):
    model = tiny_cnn()
    model.graph.node[0].input[1] = "no_such_tensor"
    path = tmp_path / "broken.onnx"
    onnx.save(model, str(path))
    with pytest.raises(IntakeError, match="fails the ONNX checker"):
        load_model(path)


def test_dynamic_dimension_without_sidecar_says_what_to_write(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(batch="N"), str(path))
    with pytest.raises(IntakeError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "'x'" in message and "N" in message
    assert "cnn.json" in message and '{"inputs": {"x": [1, 3, 32, 32]}}' in message


def test_sidecar_fixes_dynamic_dimension_and_overrides(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(batch="N"), str(path))
    (tmp_path / "cnn.json").write_text(json.dumps({"inputs": {"x": [4, 3, 32, 32]}, "trials": 3,
                                                   "target": {"kind": "llvm"}}))
    spec = load_model(path)
    assert spec.inputs[0].shape == [4, 3, 32, 32]
    assert spec.sidecar.trials == 3 and spec.sidecar.target == {"kind": "llvm"}
    graph_dims = [d.dim_value for d in spec.model.graph.input[0].type.tensor_type.shape.dim]
    assert graph_dims == [4, 3, 32, 32]


@pytest.mark.parametrize(
    "sidecar, expected",
    [
        ({"inputs": {"x": [1, 3, 32]}}, "does not fit"),
        ({"inputs": {"x": [1, 3, 64, 64]}}, "does not fit"),
        ({"inputs": {"y": [1, 3, 32, 32]}}, "does not have"),
        ({"inputs": {"x": [1, 3, 32, 32]}, "trails": 3}, "trails"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_sidecar_is_refused(tmp_path, sidecar, expected):
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(batch="N"), str(path))
    text = sidecar if isinstance(sidecar, str) else json.dumps(sidecar)
    (tmp_path / "cnn.json").write_text(text)
    with pytest.raises(IntakeError, match=expected):
        load_model(path)


def _model_with_external_weights(folder, location: str):
    """tiny_cnn saved with its weights in an external file, then pointed at `location`."""
    model = tiny_cnn()
    onnx.save(model, str(folder / "cnn.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    saved = onnx.load(str(folder / "cnn.onnx"), load_external_data=False)
    for tensor in saved.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(saved, str(folder / "cnn.onnx"))
    return folder / "cnn.onnx"


def test_external_data_beside_the_model_loads(tmp_path):
    spec = load_model(_model_with_external_weights(tmp_path, "weights.bin"))
    assert all(init.raw_data for init in spec.model.graph.initializer)


def test_external_data_outside_the_folder_is_refused(tmp_path):
    inner = tmp_path / "watch"
    inner.mkdir()
    path = _model_with_external_weights(inner, "weights.bin")
    (inner / "weights.bin").rename(tmp_path / "weights.bin")
    _model_with_external_weights(inner, "../weights.bin")
    (inner / "weights.bin").unlink()
    with pytest.raises(IntakeError, match="outside the model's folder"):
        load_model(path)


def test_input_without_shape_is_refused(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "norank.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(IntakeError, match="shape"):
        load_model(path)


def test_empty_file_is_refused(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(IntakeError, match="is empty"):
        load_model(tmp_path / "empty.onnx")


def test_random_bytes_and_a_truncated_model_are_refused(tmp_path):
    (tmp_path / "noise.onnx").write_bytes(bytes(range(256)) * 64)
    real = tiny_mlp_onnx(tmp_path / "mlp.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(real[: len(real) // 2])
    for name in ("noise.onnx", "cut.onnx"):
        with pytest.raises(IntakeError, match="not a readable ONNX file|empty graph|checker"):
            load_model(tmp_path / name)


def test_a_protobuf_that_is_not_a_model_is_refused(tmp_path):
    tensor = helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0])
    (tmp_path / "tensor.onnx").write_bytes(tensor.SerializeToString())
    with pytest.raises(IntakeError, match="empty graph|not a readable"):
        load_model(tmp_path / "tensor.onnx")


def test_symlink_in_the_drop_folder_is_refused(tmp_path):
    elsewhere = tiny_mlp_onnx(tmp_path / "elsewhere.onnx")
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "link.onnx").symlink_to(elsewhere)
    with pytest.raises(IntakeError, match="symbolic link"):
        load_model(watch / "link.onnx")


@pytest.mark.parametrize("location", ["/etc/passwd", "../../etc/passwd"])
def test_external_data_at_absolute_or_escaping_paths_is_refused(tmp_path, location):
    watch = tmp_path / "a" / "watch"
    watch.mkdir(parents=True)
    path = _model_with_external_weights(watch, location)
    with pytest.raises(IntakeError, match="outside the model's folder"):
        load_model(path)


def test_missing_external_data_is_refused(tmp_path):
    path = _model_with_external_weights(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(IntakeError, match="missing"):
        load_model(path)


def test_model_over_the_size_limit_is_refused_before_parsing(tmp_path):
    path = tiny_mlp_onnx(tmp_path / "mlp.onnx")
    with pytest.raises(IntakeError, match="over the .* MiB limit"):
        load_model(path, limits=IntakeLimits(max_model_mb=path.stat().st_size / 2 / (1 << 20)))
    (tmp_path / "ext").mkdir()
    external = _model_with_external_weights(tmp_path / "ext", "weights.bin")
    with pytest.raises(IntakeError, match="exceed the size limit"):
        load_model(external, limits=IntakeLimits(max_model_mb=(external.stat().st_size + 100) / (1 << 20)))


def test_enormous_declared_input_is_refused(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(batch="N"), str(path))
    (tmp_path / "cnn.json").write_text(json.dumps({"inputs": {"x": [100000, 3, 32, 32]}}))  # 1.1 GiB of floats
    with pytest.raises(IntakeError, match="would take 1172 MiB, over the 1024 MiB limit"):
        load_model(path)


def test_names_with_spaces_and_non_ascii_load(tmp_path):
    path = tiny_mlp_onnx(tmp_path / "mein modell ü.onnx")
    spec = load_model(path)
    assert spec.name == "mein modell ü"
