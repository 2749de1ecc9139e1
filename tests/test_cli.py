"""`tcl-tuned tune` and `tcl-tuned example` as a user runs them: real subprocesses, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx

from deploy.artifact import Manifest
from tests.models import corrupt_onnx, tiny_mlp_onnx

CLI = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent)) or "tcl-tuned"


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_tune_emits_a_verified_artifact_and_exits_zero(tmp_path):
    model = tiny_mlp_onnx(tmp_path / "mlp.onnx")
    result = _run("tune", str(model), "--out", str(tmp_path / "out"), "--trials", "0",
                  "--state-dir", str(tmp_path / "state"), "--target", json.dumps({"kind": "llvm", "num-cores": 1}))
    assert result.returncode == 0, result.stderr
    assert "verified:" in result.stdout
    (artifact,) = (tmp_path / "out").iterdir()
    manifest = Manifest.model_validate_json((artifact / "manifest.json").read_text())
    assert manifest.verification.passed and manifest.target == {"kind": "llvm", "num-cores": 1}


def test_tune_on_a_corrupt_model_exits_nonzero_with_reason(tmp_path):
    result = _run("tune", str(corrupt_onnx(tmp_path / "bad.onnx")), "--out", str(tmp_path / "out"),
                  "--trials", "0", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 1
    assert "error:" in result.stderr and "not a readable ONNX file" in result.stderr
    assert "Traceback" not in result.stderr


def test_tune_rejects_bad_arguments_before_importing_tvm(tmp_path):
    model = tiny_mlp_onnx(tmp_path / "mlp.onnx")
    bad_json = _run("tune", str(model), "--out", str(tmp_path / "out"), "--target", "{kind: llvm")
    assert bad_json.returncode == 1 and "--target is not valid JSON" in bad_json.stderr
    bad_name = _run("tune", str(model), "--out", str(tmp_path / "out"), "--cost-model", "gbdt")
    assert bad_name.returncode == 1 and "cost_model" in bad_name.stderr


def test_example_writes_a_valid_model(tmp_path):
    result = _run("example", "tiny_cnn", "--out", str(tmp_path / "m.onnx"))
    assert result.returncode == 0, result.stderr
    onnx.checker.check_model(onnx.load(str(tmp_path / "m.onnx")))
    assert _run("example", "resnet9000", "--out", str(tmp_path / "x.onnx")).returncode == 1


def test_a_malformed_tracker_address_is_refused_before_any_work(tmp_path):
    model = tiny_mlp_onnx(tmp_path / "tiny.onnx")
    tune = _run("tune", str(model), "--out", str(tmp_path / "out"), "--tracker", "no-port", "--device-key", "k",
                timeout=120)
    assert tune.returncode == 1
    assert "a tuning farm needs --tracker HOST:PORT and --device-key KEY" in tune.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    farm = _run("farm", "status", "--tracker", "host:port", timeout=120)
    assert farm.returncode == 1 and "--tracker must be HOST:PORT, got 'host:port'" in farm.stderr


def test_a_model_onnxruntime_cannot_run_is_tuned_and_verified_against_its_newer_opset(tmp_path):
    """onnx's backend test model test_Linear (Gemm, opset 6): onnxruntime 1.32 has no kernel for it."""
    import os

    source = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "pytorch-converted" / "test_Linear"
    shutil.copy(source / "model.onnx", tmp_path / "linear.onnx")
    result = _run("tune", str(tmp_path / "linear.onnx"), "--out", str(tmp_path / "out"), "--trials", "0",
                  "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "verified against onnxruntime, converted to opset" in result.stderr
    (artifact,) = (tmp_path / "out").iterdir()
    manifest = Manifest.model_validate_json((artifact / "manifest.json").read_text())
    assert manifest.reference.startswith("onnxruntime, converted") and manifest.verification.passed
    assert manifest.latency_ms.onnxruntime > 0


def _bad_models(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what its one-line reason must say)."""
    from onnx import TensorProto, helper

    def save(name: str, nodes, inputs, outputs, opsets=(("", 17),)) -> Path:
        graph = helper.make_graph(nodes, name, inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
        model.ir_version = 8
        onnx.save(model, str(folder / f"{name}.onnx"))
        return folder / f"{name}.onnx"

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    (folder / "empty.onnx").write_bytes(b"")
    (folder / "text.onnx").write_text("this is not a model\n")
    return {
        "corrupt": (corrupt_onnx(folder / "corrupt.onnx"), "not a readable ONNX file"),
        "empty": (folder / "empty.onnx", "error: "),
        "text": (folder / "text.onnx", "error: "),
        "custom op": (save("custom", [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], [x], [y],
                           (("", 17), ("com.example", 1))),
                      "TVM's ONNX importer lacks Frobnicate: Frobnicate (com.example opset 1) at node #0 (unnamed), "
                      "inputs x float32[2, 3]"),
        "dynamic shape": (save("dynamic", [helper.make_node("Relu", ["x"], ["y"])],
                               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])], [y]), "n"),
    }


def test_bad_and_unusual_models_end_in_one_error_line_and_no_traceback(tmp_path):
    for case, (path, reason) in _bad_models(tmp_path).items():
        result = _run("tune", str(path), "--out", str(tmp_path / "out"), "--trials", "0",
                      "--state-dir", str(tmp_path / "state"))
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        others = [line for line in result.stderr.splitlines()
                  if not line.startswith("error: ") and not line.startswith(f"{path.name}: ")]  # progress lines
        assert result.returncode == 1 and len(errors) == 1 and reason in errors[0], (case, result.stderr)
        assert others == [] and "Traceback" not in result.stderr, (case, result.stderr)
    assert not (tmp_path / "out").exists() or not any(p for p in (tmp_path / "out").iterdir() if not p.name.startswith("."))


def test_a_mistyped_command_line_is_one_error_line_for_every_command(tmp_path):
    for args, reason in [(["tune"], "Missing argument 'model'"),
                         (["collect", "--out", str(tmp_path), "--trials-per-task", "0"], "'--trials-per-task'"),
                         (["cost-model", "eval"], "Missing option '--database'"),
                         (["bundle", str(tmp_path)], "Missing option '--out'"),
                         (["frobnicate"], "No such command 'frobnicate'")]:
        result = _run(*args)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, (args, result.stderr)
        assert result.stderr.startswith("error: tcl-tuned") and reason in result.stderr, (args, result.stderr)
    assert _run().returncode == 0 and "Usage" in _run().stdout  # no arguments: the help, as before
