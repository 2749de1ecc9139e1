"""The benchmark suite: its arithmetic on hand-made results, and its smallest case end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import report, suite


def _results() -> dict:
    tasks = [{"name": "fused_matmul", "weight": 2, "structural_hash": "a", "flops": 2e6},
             {"name": "reshape", "weight": 1, "structural_hash": "b", "flops": 0.0}]
    def run(cost_model, measurements, timeline):
        best = {}
        for workload, seconds in measurements:
            if math.isfinite(seconds):
                best[workload] = min(seconds, best.get(workload, math.inf))
        return {"model": "m", "cost_model": cost_model, "measurements": measurements, "timeline": timeline,
                "best_seconds_per_task": best}
    return {
        "peak_gflops": 10.0,
        "models": {"m": {"tasks": tasks}},
        "runs": [
            # xgb: estimate 2*4e-3 + 1e-3 = 9 ms after round 1, 2*1e-3 + 1e-3 = 3 ms after round 2 (at 100 s)
            run("xgb", [("a", 4e-3), ("b", 1e-3), ("a", 1e-3), ("b", math.inf)], [(50.0, 2), (100.0, 4)]),
            # tcl: 2*1e-3 + 1e-3 = 3 ms already after round 1 (at 25 s)
            run("tcl", [("a", 1e-3), ("b", 1e-3), ("a", 2e-3), ("b", 2e-3)], [(25.0, 2), (60.0, 4)]),
            # random: task b fails in round 1, so no estimate until round 2; never reaches 3 ms
            run("random", [("a", 5e-3), ("b", math.inf), ("a", 6e-3), ("b", 1e-3)], [(10.0, 2), (20.0, 4)]),
        ],
    }


def test_curves_estimate_the_weighted_best_so_far_after_each_round():
    curves = report.curves(_results(), "m")
    assert curves["xgb"] == [(2, 50.0, pytest.approx(9.0)), (4, 100.0, pytest.approx(3.0))]
    assert curves["random"][0][2] == math.inf and curves["random"][1][2] == pytest.approx(11.0)


def test_time_to_target_is_the_baselines_seconds_over_the_seconds_to_reach_its_final_estimate():
    rows = {r["cost_model"]: r for r in report.time_to_target(_results(), "m", "xgb")}
    assert rows["xgb"]["speedup"] == 1.0 and rows["xgb"]["trials_to_target"] == 4
    assert rows["tcl"]["seconds_to_target"] == 25.0 and rows["tcl"]["speedup"] == 4.0
    assert rows["random"]["seconds_to_target"] is None and rows["random"]["speedup"] is None


def test_time_to_onnxruntime_and_the_estimate_at_equal_time_against_the_baseline():
    # onnxruntime at 5 ms: xgb gets there at 100 s (3 ms), tcl at 25 s, random never (11 ms at its end)
    rows = {r["cost_model"]: r for r in report.against_time(_results(), "m", "xgb", 5.0)}
    assert "xgb" not in rows
    assert rows["tcl"]["seconds_to_onnxruntime"] == 25.0 and rows["tcl"]["baseline_seconds_to_onnxruntime"] == 100.0
    assert rows["tcl"]["speedup_to_onnxruntime"] == 4.0
    # equal time = the shorter run's end: tcl 60 s (3 ms) against xgb's estimate at 60 s (9 ms)
    assert rows["tcl"]["equal_seconds"] == 60.0 and rows["tcl"]["equal_time_gain"] == pytest.approx(3.0)
    assert rows["random"]["seconds_to_onnxruntime"] is None and rows["random"]["speedup_to_onnxruntime"] is None
    # random ended at 20 s, before xgb had an estimate: no ratio
    assert rows["random"]["equal_time_gain"] is None


def test_kernel_efficiency_covers_compute_kernels_only():
    rows = report.kernel_efficiency(_results(), "m")
    assert [r["task"] for r in rows] == ["fused_matmul"]
    assert rows[0]["gflops"] == {"xgb": 2.0, "tcl": 2.0, "random": 0.4}  # 2 MFLOP in 1 ms / 5 ms
    assert rows[0]["best_share_of_peak"] == 0.2


def test_the_quick_suites_smallest_case_end_to_end(tmp_path, monkeypatch):
    """tiny_cnn (the smallest quick model) with all three cost models, at a budget that measures every task."""
    config = suite.SuiteConfig(models=("tiny_cnn",), budget=20, trials_per_iter=4, population=32, timing_repeats=5)
    results = suite.run_suite(config, tmp_path, "bench", command="test")
    runs = {r["cost_model"]: r for r in results["runs"]}
    assert sorted(runs) == ["random", "tcl", "xgb"]
    # the reshape task has one candidate; the others take what it leaves, and the last batch of 4
    # may start below the budget and end above it
    assert all(20 <= len(r["measurements"]) == r["trials_measured"] == r["timeline"][-1][1] <= 20 + 3
               for r in runs.values())
    deployed = results["models"]["tiny_cnn"]["deployed"]
    assert sorted(deployed["tvm"]) == ["random", "tcl", "xgb"] and all(v > 0 for v in deployed["tvm"].values())
    assert {"default", "1_threads"} <= set(deployed["onnxruntime"]) and deployed["untuned"] > 0
    assert 0 < results["peak_gflops"] < 1e5
    kernels = report.kernel_efficiency(results, "tiny_cnn")
    assert kernels and all(0 < r["best_share_of_peak"] < 2 for r in kernels)  # convs and the matmul were measured
    assert json.loads((tmp_path / "bench.json").read_text())["runs"] and not (tmp_path / ".work").exists()

    md, curves_png, latency_png = report.write_report(results, tmp_path, "bench")
    text = md.read_text()
    assert "| tiny_cnn | xgb |" in text and "![best latency" in text
    baseline = next(r for r in report.time_to_target(results, "tiny_cnn", "xgb") if r["cost_model"] == "xgb")
    assert baseline["speedup"] >= 1.0  # xgb reaches its own final estimate, at the latest when its budget is spent
    for png in (curves_png, latency_png):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000

    def no_tuning(*args, **kwargs):
        raise AssertionError("a finished model was tuned again")

    monkeypatch.setattr(suite, "tune_once", no_tuning)
    again = suite.run_suite(config, tmp_path, "bench", command="test")  # resumes: nothing left to do
    assert len(again["runs"]) == 3


def test_kept_libraries_can_be_timed_again(tmp_path, capsys, monkeypatch):
    """--keep-work leaves the libraries; --retime (and retime.py) time them side by side again, untuned."""
    from research import retime

    config = suite.SuiteConfig(models=("tiny_cnn",), budget=8, trials_per_iter=4, population=16,
                               cost_models=("random",), timing_repeats=2)
    first = suite.run_suite(config, tmp_path, "kept", command="test", keep_work=True)
    monkeypatch.setattr(suite, "tune_once", lambda *a, **k: pytest.fail("--retime tuned again"))
    again = suite.run_suite(config, tmp_path, "kept", command="retime", retime=True)
    deployed = again["models"]["tiny_cnn"]["deployed"]
    assert deployed["retimed"] and deployed["tvm"]["random"] > 0 and again["command"] == "test"
    assert deployed["untuned"] == first["models"]["tiny_cnn"]["deployed"]["untuned"] and again["retime_command"] == "retime"
    libraries = retime.kept_libraries(tmp_path / ".work" / "kept")
    assert list(libraries) == ["tiny_cnn"] and list(libraries["tiny_cnn"]) == ["random"]
    assert libraries["tiny_cnn"]["random"].name == "model.so" and libraries["tiny_cnn"]["random"].is_file()

    capsys.readouterr()
    retime.main(["kept", "--out", str(tmp_path), "--rounds", "2", "--repeats", "4"])
    timed = json.loads(capsys.readouterr().out.strip())
    assert timed["model"] == "tiny_cnn" and timed["tvm"]["random"] > 0
    assert len(timed["rounds_ms"]["tvm random"]) == 2 and timed["timing"] == {"rounds": 2, "samples_per_round": 2}
    with pytest.raises(SystemExit, match="no kept libraries"):
        retime.main(["nothing-kept", "--out", str(tmp_path)])

    from research import estimate_gap  # the same kept run: estimate, kernels alone, whole call

    estimate_gap.main(tmp_path / ".work" / "kept" / "tiny_cnn" / "random")
    first_line = capsys.readouterr().out.splitlines()[0].split()
    # kernels alone, the whole call; the estimate is nan here (8 trials leave some of the 6 tasks unmeasured)
    assert first_line[0] == "estimate" and float(first_line[1]) != 0 and all(float(first_line[i]) > 0 for i in (5, 9))


def test_the_suite_tunes_with_the_student_it_is_given(tmp_path):
    """--student pins the tcl runs' student (a neighbour's, here), and the run records which one it was."""
    given = sorted((Path(suite.__file__).parents[1] / "tcl_core" / "students").glob("*/student.pt"))[-1]
    config = suite.SuiteConfig(models=("tiny_cnn",), budget=8, trials_per_iter=4, population=16,
                               cost_models=("tcl",), timing_repeats=2, student=str(given))
    results = suite.run_suite(config, tmp_path, "given", command="test")
    (run,) = results["runs"]
    assert run["resolved_cost_model"] == "tcl" and run["student"]["path"] == str(given)
    assert json.loads((tmp_path / "given.json").read_text())["config"]["student"] == str(given)


def test_deployed_engines_take_turns_and_report_the_median_of_their_round_medians(monkeypatch):
    """Each round times every engine once, starting one later each round, so a slow spell lands on all alike."""
    from deploy import verify

    timed = []

    def fake_median_ms(call, repeats):
        timed.append((call, repeats))
        return float(len(timed))  # 1, 2, 3, ... in the order timed

    monkeypatch.setattr(verify, "median_ms", fake_median_ms)
    deployed = suite.measure_deployed("tiny_cnn", {}, repeats=7, seed=0, rounds=3)
    engines = len(deployed["onnxruntime"])  # default and one per core; no libraries given
    assert engines >= 2 and len(timed) == 3 * engines
    assert all(repeats == 3 for _, repeats in timed)  # ceil(7 / 3) samples a round
    rounds = [[call for call, _ in timed[i * engines:(i + 1) * engines]] for i in range(3)]
    assert all(len(set(map(id, r))) == engines for r in rounds)  # every engine once a round
    assert rounds[1] == rounds[0][1:] + rounds[0][:1] and rounds[2] == rounds[0][2:] + rounds[0][:2]  # rotated
    default = rounds[0][0]  # onnxruntime's default setting goes first in round 1, last in round 2
    values = [i + 1 for i, (call, _) in enumerate(timed) if call is default]
    assert values == [1, 2 * engines, 3 * engines - 1]
    assert deployed["onnxruntime"]["default"] == 2 * engines  # the median of its three rounds
    assert deployed["rounds_ms"]["onnxruntime default"] == values
    assert deployed["timing"] == {"rounds": 3, "samples_per_round": 3}


def test_lever_table_orders_rows_and_times_a_repeated_program_once():
    from benchmarks import levers

    def row(lever, threads, **extra):
        return {"model": "m", "lever": lever, "threads": threads, "tasks": 2, "trials_measured": 16,
                "tuning_seconds": 10.0, "estimated_ms": 1.0, **extra}

    results = {"machine": {"cpu": "cpu", "cores": 2}, "command": "-m benchmarks levers",
               "rows": [row("+ threads", 2), row("baseline (1 thread)", 1),
                        row("+ fast math", 2, same_as="+ threads")],
               "timed": {"m": {"1": {"tvm": {"baseline (1 thread)": 3.0}, "onnxruntime": {"1_threads": 2.0}},
                               "2": {"tvm": {"+ threads": 1.0}, "onnxruntime": {"2_threads": 2.0}}}}}
    lines = [line for line in levers.markdown(results, 2).splitlines() if line.startswith("| m |")]
    assert [line.split(" | ")[1] for line in lines] == [
        "baseline (1 thread)", "+ threads", "+ fast math (the same program as + threads: not tuned again)"]
    assert lines[0].endswith("| 3.0000 | 2.0000 | 1.50x |") and lines[2].endswith("| 1.0000 | 2.0000 | 0.50x |")


def test_onnx_backend_runs_a_shipped_model_both_ways_and_compares_with_its_shipped_outputs():
    """test_Linear (Gemm at opset 6): plain tvm.compile and the pipeline both verify against the shipped outputs."""
    import numpy as np

    from benchmarks import onnx_backend

    (folder,) = [f for f in onnx_backend.cases(("pytorch-converted",)) if f.name == "test_Linear"]
    row = onnx_backend.run_case(str(folder))
    assert row["plain"] == {"stage": "verified"}
    assert row["pipeline"]["stage"] == "verified" and row["pipeline"]["reference"].startswith("onnxruntime, converted")
    assert onnx_backend._compare([np.ones(3)], [np.ones(3)]) is None
    assert onnx_backend._compare([np.ones(3)], [np.zeros(3)]) == "output 0: 3 of 3 values differ"
    assert "shape" in onnx_backend._compare([np.ones(2)], [np.ones(3)])
    results = {"command": "-m benchmarks onnx-backend", "onnx": "x", "onnxruntime": "y", "tvm": "z",
               "sets": ["pytorch-converted"],
               "cases": {"pytorch-converted/test_Linear": {"set": "pytorch-converted", **row},
                         "pytorch-converted/test_X": {"set": "pytorch-converted", "plain": {"stage": "verified"},
                                                      "pipeline": {"stage": "failed", "reason": "why"}}}}
    text = onnx_backend.markdown(results)
    assert "| pytorch-converted | 2 | 2 | 1 | 1 | 0 |" in text and "| pytorch-converted/test_X | verified | failed: why |" in text


# One onnx backend test model per distinct outcome of the full run (onnx-backend.md): what the
# pipeline says, and that plain tvm.compile verifies no model the pipeline refuses.
ONNX_BACKEND_SAMPLE = {
    "pytorch-converted/test_PReLU_2d_multiparam": ("failed", "TVM could not import the model: AssertionError"),
    "pytorch-operator/test_operator_index": ("failed", "Cannot cast"),
    "pytorch-operator/test_operator_symbolic_override_nested": ("verified", ""),   # NHWC refused: built in NCHW
    "pytorch-operator/test_operator_sqrt": ("verified", ""),                       # NaN where the reference has NaN
    "simple/test_expand_shape_model1": ("failed", "broadcast_to expects"),
    "simple/test_expand_shape_model3": ("failed", "'ExternFunc' object has no attribute 'name'"),
    "simple/test_gradient_of_add": ("failed", "TVM's ONNX importer lacks Gradient: Gradient (ai.onnx.preview.training opset 1)"),
    "simple/test_sequence_model3": ("failed", "outputs differ from onnxruntime"),
    "simple/test_sequence_model6": ("failed", "object of type 'Call' has no len()"),
    "simple/test_sequence_model8": ("failed", "has dynamic dimension(s)"),
    "simple/test_strnorm_model_monday_empty_output": ("failed", "unknown dtype `object`"),
}


def test_onnx_backend_sample_gets_every_outcome_of_the_full_run():
    from benchmarks import onnx_backend

    root = onnx_backend.data_root()
    for key, (stage, reason) in ONNX_BACKEND_SAMPLE.items():
        row = onnx_backend.run_case(str(root / key))
        assert row["pipeline"]["stage"] == stage and reason in row["pipeline"].get("reason", ""), (key, row)
        assert "\n" not in row["pipeline"].get("reason", "")
        if stage == "failed":
            assert row["plain"]["stage"] != "verified", (key, row)  # nothing plain TVM runs right is refused
