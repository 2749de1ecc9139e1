"""`tcl-tuned cost-model eval|predict` on a database this module measures itself (real MetaSchedule).

One measurement run (a one-task model, 4 candidates) is shared by every test in the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tcl_core.collect import collect
from tcl_core.evaluate import open_student, score_tasks
from tcl_core.records import load_task_records
from tcl_core.student import Student, StudentConfig, save_student
from tcl_core.zoo import ZooModel

CLI = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent)) or "tcl-tuned"
TINY = ZooModel("tiny", lambda: nn.Sequential(nn.Linear(16, 8), nn.ReLU()), (1, 16), "train")
FIELDS = {"tasks", "records", "failed", "top1", "top5", "pairwise_accuracy", "random_top1", "random_top5", "model",
          "model_reason"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "cost-model", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def measured_db(tmp_path_factory) -> Path:
    """<tmp>/<platform>/tiny: a real tuning database (and collect's card.json beside it)."""
    root = collect(tmp_path_factory.mktemp("measured"), models=[TINY], trials_per_task=4, trials_per_iter=2,
                   population=16, target={"kind": "llvm", "num-cores": 1}, log=lambda _: None)
    return root / "tiny"


@pytest.fixture(scope="module")
def other_student(tmp_path_factory) -> Path:
    """A saved student that is not the default one (seed 1)."""
    from tcl_core.features import TRACE_FEATURE_DIM

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("model") / "student.pt"
    save_student(Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=16, n_layers=1)), path)
    return path


def test_eval_prints_the_ranking_report(measured_db):
    result = _run("eval", "--database", str(measured_db), "--untrained")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == FIELDS and report["model"] == "untrained" and report["model_reason"] == "--untrained"
    lines = (measured_db / "database_tuning_record.json").read_text().splitlines()
    assert report["records"] == len(lines) >= 4 and report["tasks"] >= 1
    assert 0 < report["top1"] <= report["top5"] <= 1
    assert 0 < report["random_top1"] <= report["random_top5"] <= 1
    assert report["pairwise_accuracy"] is None or 0 <= report["pairwise_accuracy"] <= 1


def test_predict_writes_one_line_per_record_in_file_order(measured_db, other_student, tmp_path):
    out = tmp_path / "scores.jsonl"
    result = _run("predict", "--database", str(measured_db), "--out", str(out), "--model", str(other_student))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tasks = load_task_records(measured_db)
    assert len(rows) == sum(t.size for t in tasks)
    assert [(r["task"], r["record"]) for r in rows] == [(t.task_index, i) for t in tasks for i in range(t.size)]
    expected = np.concatenate(score_tasks(open_student(other_student), tasks))  # (records,)
    np.testing.assert_allclose([r["score"] for r in rows], expected, rtol=1e-5, atol=1e-6)
    assert {r["workload"] for r in rows} == {t.workload_hash for t in tasks}


def test_eval_defaults_to_the_student_auto_picks_here(measured_db, tmp_path):
    from tcl_core import tvm_api
    from tcl_core.platform import platform_name
    from tcl_core.students import choose_cost_model

    state = tmp_path / "state"  # an empty state_dir: the shipped students decide
    result = subprocess.run([CLI, "cost-model", "eval", "--database", str(measured_db)], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    choice = choose_cost_model("auto", platform_name(tvm_api.host_target_dict(), tvm_api.TVM_VERSION),
                               state_dir=state / "tcl-tuned")
    assert report["model"] == (str(choice.student.path) if choice.student else "untrained")
    assert choice.reason in report["model_reason"]
    both = _run("eval", "--database", str(measured_db), "--untrained", "--model", str(measured_db))
    assert both.returncode == 1 and "not both" in both.stderr


def test_eval_names_the_model_it_was_given(measured_db, other_student):
    result = _run("eval", "--database", str(measured_db), "--model", str(other_student))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model"] == str(other_student)


def test_the_untrained_student_is_reproducible(measured_db):
    tasks = load_task_records(measured_db)
    first, second = score_tasks(open_student(None), tasks), score_tasks(open_student(None), tasks)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    narrow = Student(StudentConfig(feature_dim=4, d_model=8, n_layers=1))
    with pytest.raises(ValueError, match="features per step"):
        score_tasks(narrow, tasks)


@pytest.mark.parametrize("case", ["missing folder", "empty database", "not a student"])
def test_errors_exit_1_with_a_reason(case, measured_db, tmp_path):
    from tcl_core import tvm_api

    database, extra = measured_db, []
    if case == "missing folder":
        database = tmp_path / "absent"
    elif case == "empty database":
        database = tmp_path / "empty"
        tvm_api.open_database(database)
    else:
        bogus = tmp_path / "bogus.pt"
        torch.save({"format": "something else"}, bogus)
        extra = ["--model", str(bogus)]
    result = _run("eval", "--database", str(database), *extra)
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert {"missing folder": "no database folder", "empty database": "no tuning records",
            "not a student": "cannot load the student"}[case] in result.stderr


def test_train_writes_a_student_and_its_card(measured_db, tmp_path):
    out = tmp_path / "student.pt"
    result = _run("train", "--data", str(measured_db.parent), "--out", str(out), "--steps", "5",
                  "--d-model", "16", "--d-state", "4", "--layers", "1", "--version", "3",
                  "--also-eval", str(measured_db))
    assert result.returncode == 0, result.stderr
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["train_models"] == ["tiny"] and card["eval_models"] == [] and card["steps"] == 5
    assert "--train-model tiny" in card["command"]  # named, so the command rebuilds it after more collects
    assert card["train_records"] >= 4 and 0 < card["metrics"]["train"]["top1"] <= 1
    assert card["version"] == 3 and card["config"]["d_model"] == 16 and card["config"]["n_layers"] == 1
    assert card["metrics"][str(measured_db)] == card["metrics"]["train"]  # the same records, scored twice
    markdown = out.with_suffix(".md").read_text()
    assert "version 3" in markdown and card["command"] in markdown and "| train |" in markdown
    report = json.loads(_run("eval", "--database", str(measured_db), "--model", str(out)).stdout)
    assert report["model"] == str(out)


def test_train_bootstraps_from_a_teacher_on_an_rdu_fraction(measured_db, tmp_path, other_student):
    out = tmp_path / "student.pt"
    result = _run("train", "--data", str(measured_db.parent), "--out", str(out), "--steps", "5",
                  "--teacher", str(other_student), "--fraction", "0.5")
    assert result.returncode == 0, result.stderr
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["teacher"] == str(other_student) and card["fraction"] == 0.5
    assert card["train_records"] < card["pool_records"]  # half of each task's candidates labelled
    assert card["config"]["d_model"] == 16  # the teacher's size, not the default: the student is its copy
    assert "--teacher" in card["command"] and "distilled from" in out.with_suffix(".md").read_text()


def test_train_on_a_model_not_in_the_train_split_fails_cleanly(measured_db, tmp_path):
    out = tmp_path / "s.pt"
    result = _run("train", "--data", str(measured_db.parent), "--out", str(out), "--steps", "2",
                  "--train-model", "tiny", "--train-model", "vit_block")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "['vit_block'] are not in the train split ['tiny']" in result.stderr and not out.exists()


def test_train_without_a_card_fails_cleanly(tmp_path):
    result = _run("train", "--data", str(tmp_path), "--out", str(tmp_path / "s.pt"))
    assert result.returncode == 1 and "card.json" in result.stderr and "Traceback" not in result.stderr
