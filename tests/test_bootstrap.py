"""Bootstrapping a platform from another's candidates: RDU picks, measured here for real, resumable."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from daemon.cli import app
from tcl_core import tvm_api
from tcl_core.bootstrap import bootstrap
from tcl_core.rdu import embed_candidates, rdu_select, subset_size
from tcl_core.features import trace_features
from tcl_core.records import RECORD_FILE, load_task_records

NEW_TARGET = {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}  # another platform than `measured`'s


def _traces_by_task(database_dir) -> dict[str, set[str]]:
    """workload hash -> the str() of every stored trace of that task."""
    traces: dict[str, set[str]] = {}
    database = tvm_api.open_database(database_dir)
    for record in database.get_all_tuning_records():
        key = str(tvm_api.structural_hash(record.workload.mod))
        traces.setdefault(key, set()).add(str(record.trace))
    return traces


def test_bootstrap_measures_the_rdu_picks_of_each_task_here_and_resumes(tmp_path, measured):
    source = measured.parent  # the platform folder: <platform>/two/
    logged: list[str] = []
    root = bootstrap(source, tmp_path / "data", fraction=0.5, student=None, student_name="raw features",
                     target=NEW_TARGET, log=logged.append)
    assert root.name.startswith("llvm-x86-64-1c-") and root != source
    source_traces: list[str] = []  # every source record's trace text, in load_task_records' order

    def featurise(trace):
        source_traces.append(str(trace))
        return trace_features(trace)

    source_tasks = load_task_records(measured, featurise=featurise)
    here_tasks = {t.workload_hash: t for t in load_task_records(root / "two")}
    assert len(here_tasks) == len(source_tasks) >= 2
    here_traces = _traces_by_task(root / "two")
    start = 0
    for task in source_tasks:
        traces, start = source_traces[start:start + task.size], start + task.size
        share = subset_size(task.size, 0.5)
        here = here_tasks[task.workload_hash]
        assert here.size == share < task.size
        assert np.isfinite(here.run_seconds).all() and (here.run_seconds > 0).all()  # measured, none failed
        # exactly the candidates RDU picks from the source's features (never its run times)
        chosen = rdu_select(*embed_candidates(list(task.features), None), share)
        assert here_traces[task.workload_hash] == {traces[i] for i in chosen}
    card = json.loads((root / "card.json").read_text())
    assert card["bootstrap"] == {"source": source.name, "fraction": 0.5, "embedded_by": "raw features"}
    assert card["models"]["two"]["records"] == sum(t.size for t in here_tasks.values())
    assert card["models"]["two"]["tasks"] == json.loads((source / "card.json").read_text())["models"]["two"]["tasks"]
    assert f"Bootstrapped (`collect --bootstrap-from`): two, from {source.name}: 50%" in (root / "card.md").read_text()

    logged.clear()
    bootstrap(source, tmp_path / "data", fraction=0.5, student=None, student_name="raw features",
              target=NEW_TARGET, log=logged.append)
    assert logged == [f"two: 0 measured here, {card['models']['two']['records']} in {root / 'two'}"]  # resumed


def test_bootstrap_refuses_its_own_folder_and_an_empty_one(tmp_path, measured):
    with pytest.raises(ValueError, match="own folder"):
        bootstrap(measured.parent, measured.parent.parent, fraction=0.1, student=None, student_name="-",
                  target={"kind": "llvm", "num-cores": 1})
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["collect", "--bootstrap-from", str(tmp_path / "empty"), "--out", str(tmp_path)])
    assert result.exit_code == 1 and "holds no tuning databases" in result.output


def test_bootstrap_takes_only_the_named_models_and_names_a_missing_one(tmp_path, measured):
    source = measured.parent
    result = CliRunner().invoke(app, ["collect", "--bootstrap-from", str(source), "--model", "two", "--model", "nine",
                                      "--out", str(tmp_path / "data")])
    assert result.exit_code == 1 and "no model folder nine; it has two" in result.output
    assert not list((tmp_path / "data").glob(f"*/two/{RECORD_FILE}"))  # refused before measuring anything
