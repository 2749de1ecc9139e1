"""`collect` on a tiny zoo model: real measurements into a TVM database, a card, and resumption."""

from __future__ import annotations

import json

import onnx
from torch import nn

from tcl_core import tvm_api
from tcl_core.collect import collect
from tcl_core.zoo import ZOO, ZooModel, export_onnx

TINY = ZooModel("tiny", lambda: nn.Sequential(nn.Linear(16, 8), nn.ReLU()), (1, 16), "train")


PIPELINE_FORMS = {"fast_math": True, "pack_weights": True, "conv_layout": "NHWC"}


def test_collect_measures_writes_a_card_and_resumes(tmp_path):
    lines: list[str] = []
    root = collect(tmp_path, models=[TINY], trials_per_task=4, trials_per_iter=2, population=16,
                   target={"kind": "llvm", "num-cores": 1}, lowering=PIPELINE_FORMS, log=lines.append)
    card = json.loads((root / "card.json").read_text())
    assert card["lowering"] == PIPELINE_FORMS
    entry = card["models"]["tiny"]
    assert entry["split"] == "train" and entry["tasks"] and entry["tasks"][0]["weight"] >= 1
    assert entry["records"] >= 4 * len(entry["tasks"])
    assert card["records"] == entry["records"] and card["hours"] > 0
    assert (root / "tiny" / "database_tuning_record.json").stat().st_size > 0
    assert "| tiny | train |" in (root / "card.md").read_text()
    assert "1 thread(s); tasks lowered with fast_math True, pack_weights True, conv_layout NHWC" in (
        root / "card.md").read_text()
    assert len(tvm_api.open_database(root / "tiny")) == entry["records"]

    lines.clear()
    collect(tmp_path, models=[TINY], trials_per_task=4, trials_per_iter=2, population=16,
            target={"kind": "llvm", "num-cores": 1}, lowering=PIPELINE_FORMS, log=lines.append)
    assert all("0/" in line for line in lines if "phase" in line), lines
    assert json.loads((root / "card.json").read_text())["models"]["tiny"]["records"] == entry["records"]


def test_zoo_models_export_to_valid_onnx(tmp_path):
    for model in ZOO.values():
        path = export_onnx(model, tmp_path / f"{model.name}.onnx")
        loaded = onnx.load(str(path))
        onnx.checker.check_model(loaded)
        dims = [d.dim_value for d in loaded.graph.input[0].type.tensor_type.shape.dim]
        assert dims == list(model.input_shape)
    assert {m.split for m in ZOO.values()} == {"train", "eval"}
    # The ReLU6 MobileNetV1 has clip epilogues like the held-out MobileNetV2; the first one has none.
    ops = {name: {node.op_type for node in onnx.load(str(tmp_path / f"{name}.onnx")).graph.node}
           for name in ("mobilenet_v1", "mobilenet_v1_relu6", "mobilenet_v2")}
    assert "Clip" in ops["mobilenet_v1_relu6"] and "Clip" in ops["mobilenet_v2"]
    assert "Clip" not in ops["mobilenet_v1"] and "Relu" in ops["mobilenet_v1"]


def test_collect_refuses_to_add_to_records_measured_on_other_threads(tmp_path):
    from tcl_core.platform import platform_name

    target = {"kind": "llvm", "num-cores": 2}
    root = tmp_path / platform_name(target, tvm_api.TVM_VERSION)
    root.mkdir()
    # a folder collected before the thread count was recorded: TVM ran half the cores then
    (root / "card.json").write_text(json.dumps({"platform": root.name, "models": {"tiny": {"seconds": 1.0}}}))
    try:
        collect(tmp_path, models=[TINY], trials_per_task=4, target=target, log=lambda _: None)
    except ValueError as err:
        assert "measured on 1 thread(s)" in str(err) and "another --out" in str(err)
    else:
        raise AssertionError("collect added 2-thread records to a 1-thread folder")
    assert not (root / "tiny").exists()  # nothing measured


def test_collect_refuses_to_mix_lowered_forms_in_one_folder(tmp_path):
    from tcl_core.platform import platform_name

    target = {"kind": "llvm", "num-cores": 1}
    root = tmp_path / platform_name(target, tvm_api.TVM_VERSION)
    root.mkdir()
    # a folder collected before the forms were recorded: TVM's default lowering (NCHW, unpacked, libm)
    (root / "card.json").write_text(json.dumps({"platform": root.name, "threads": 1,
                                                "models": {"tiny": {"seconds": 1.0}}}))
    try:
        collect(tmp_path, models=[TINY], trials_per_task=4, target=target, lowering=PIPELINE_FORMS,
                log=lambda _: None)
    except ValueError as err:
        assert "'conv_layout': 'NCHW'" in str(err) and "another --out" in str(err)
    else:
        raise AssertionError("collect added pipeline-form records to a folder of TVM-default forms")
    assert not (root / "tiny").exists()  # nothing measured
