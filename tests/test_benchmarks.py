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
    from benchmarks import retime

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


def test_top_k_headroom_is_the_runner_up_oracle_weighted_as_top_k():
    import numpy as np

    from benchmarks.top_k_headroom import headroom
    from tcl_core.records import TaskRecords
    from tcl_core.student import normalise_labels

    def task(seconds, weight):
        seconds = np.asarray(seconds, dtype=np.float64)
        return TaskRecords(task_index=0, workload_hash=f"w{weight}", features=tuple(np.zeros((1, 2)) for _ in seconds),
                           run_seconds=seconds, labels=normalise_labels(seconds).numpy(), weight=weight)

    tasks = [
        task([1.0, 2.0, 4.0, 8.0, 10.0, 20.0], 1.0),  # runner-up at 1/2, fifth at 1/10
        task([1.0, 1.25, math.inf], 3.0),  # runner-up at 0.8; no fifth; a failed run counts as 0
        task([math.inf, math.inf], 5.0),  # nothing succeeded: left out
        task([2.0], 7.0),  # one candidate: left out
    ]
    result = headroom(tasks, far=0.7)
    assert result["tasks"] == 2 and result["candidates_per_task"] == [3, 6]
    assert result["top1_if_second_best_first"] == pytest.approx((0.5 * 1 + 0.8 * 3) / 4)
    assert result["top1_if_fifth_best_first"] == pytest.approx((0.1 * 1 + 0.0 * 3) / 4)
    assert [r["workload"] for r in result["tasks_runner_up_far_behind"]] == ["w1.0"]
    with pytest.raises(ValueError, match="nothing to rank"):
        headroom(tasks[2:])  # only tasks it leaves out


def test_top_k_by_task_puts_the_costliest_task_first_beside_random():
    import numpy as np

    from benchmarks.top_k_by_task import task_rows
    from tcl_core.records import TaskRecords
    from tcl_core.student import normalise_labels

    def task(index, seconds, weight):
        seconds = np.asarray(seconds, dtype=np.float64)
        return TaskRecords(task_index=index, workload_hash=f"w{index}", features=tuple(np.zeros((1, 2)) for _ in seconds),
                           run_seconds=seconds, labels=normalise_labels(seconds).numpy(), weight=weight)

    tasks = [task(0, [1.0, 2.0, 4.0], 1.0), task(1, [1.0, 4.0], 3.0)]
    # Task 0 ranked right; task 1 ranked worst first, so its top-1 is 1/4 and it weighs 3 of 4.
    scores = [np.array([3.0, 2.0, 1.0]), np.array([0.0, 1.0])]
    rows = task_rows(tasks, scores, {0: "conv", 1: "matmul"}, k=1)
    assert [row["name"] for row in rows] == ["matmul", "conv"]
    assert rows[0]["top1"] == 0.25 and rows[0]["loss_share"] == pytest.approx(3 * 0.75 / 4, abs=1e-4)
    assert rows[1]["top1"] == 1.0 and rows[1]["loss_share"] == 0.0
    assert rows[0]["random_top1"] == pytest.approx((1 + 0.25) / 2, abs=1e-3) and rows[0]["candidates"] == 2
    assert task_rows(tasks, scores, {}, k=1)[0]["name"] == "?"


def test_top_k_density_draws_subsets_and_scores_them_as_top_k_does():
    import numpy as np

    from benchmarks.top_k_density import density_curve

    seconds = [np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.25, 2.0, 4.0])]  # throughput falls along each task
    perfect = [1.0 / s for s in seconds]
    worst_first = [s.copy() for s in seconds]
    weights = [1.0, 3.0]
    rows = density_curve(perfect, seconds, weights, sizes=[2, 10], draws=50)
    assert [r["top1"] for r in rows] == [1.0, 1.0]  # the true order wins on every subset
    whole = rows[1]  # 10 > every task: each draw is the whole task, so no spread
    assert whole["tasks_smaller"] == 2 and whole["random_top1_std"] == 0.0
    assert whole["random_top1"] == pytest.approx(((1 + 0.5 + 0.25) / 3 + (1 + 0.8 + 0.5 + 0.25) / 4 * 3) / 4, abs=1e-4)

    # Worst first on pairs of task 0: {1,2} -> 0.5, {1,4} -> 0.25, {2,4} -> 0.5, so 5/12 in expectation;
    # on task 1 the six pairs give (0.8 + 0.5 + 0.25 + 0.5/0.8 + 0.25/0.8 + 0.25/0.5) / 6.
    pair = density_curve(worst_first, seconds, weights, sizes=[2], draws=3000, seed=1)[0]
    task1 = (0.8 + 0.5 + 0.25 + 0.625 + 0.3125 + 0.5) / 6
    assert pair["top1"] == pytest.approx((5 / 12 + 3 * task1) / 4, abs=0.01)
    assert pair["top5"] == 1.0 and pair["top1_std"] > 0  # both of a pair are in its top 5


def test_top_k_gap_splits_the_weighted_difference_into_per_task_shares():
    import numpy as np

    from benchmarks.top_k_gap import task_gap

    a = np.array([1.0, 0.5, np.nan, 0.2])
    b = np.array([0.5, 0.5, 1.0, 1.0])
    result = task_gap(a, b, np.array([1.0, 2.0, 3.0, 1.0]), top=1)
    # weighted means over the three scored tasks (weights 1, 2, 1): B 2.5 / 4, A 2.2 / 4
    assert result["gap"] == pytest.approx(2.5 / 4 - 2.2 / 4)
    assert result["tasks_scored"] == 3 and [r["task"] for r in result["tasks"]] == [3, 0, 1]
    assert [r["contribution"] for r in result["tasks"]] == [0.2, -0.125, 0.0]
    assert sum(r["contribution"] for r in result["tasks"]) == pytest.approx(result["gap"])
    assert result["top_share"] == pytest.approx(0.2 / 0.075, abs=1e-3)  # one task carries more than the gap


def test_top_k_gap_interval_is_a_point_when_every_task_moves_alike_and_spreads_otherwise():
    import numpy as np

    from benchmarks.top_k_gap import task_gap

    a = np.array([0.2, 0.4, 0.6, 0.8])
    same = task_gap(a, a + 0.1, np.ones(4))
    assert same["gap_ci95"] == [pytest.approx(0.1), pytest.approx(0.1)]
    mixed = task_gap(a, np.array([1.0, 0.4, 0.6, 0.0]), np.ones(4))  # +0.8 and -0.8: no gap on average
    low, high = mixed["gap_ci95"]
    assert mixed["gap"] == pytest.approx(0.0) and low < -0.1 and high > 0.1


def test_search_round_cost_groups_a_tasks_calls_between_updates_into_rounds():
    from benchmarks.search_round_cost import rounds, summarise

    calls = lambda task, size: ("predict", task, [None] * size)  # noqa: E731  (traces are not read here)
    events = [calls("a", 4), calls("a", 4), ("update", "a"), calls("b", 2), calls("a", 4), ("update", "a"),
              calls("a", 4)]
    assert rounds(events) == [[0, 1], [2], [3], [4]]  # a task switch also starts a round
    summary = summarise(events, every_s=[1.0, 1.0, 0.5, 1.0, 1.0], cached_s=[1.0, 0.0, 0.5, 0.5, 0.5],
                        scored=[4, 0, 2, 2, 4])
    assert summary["candidates"] == 18 and summary["rounds"] == 4 and summary["scored_share"] == round(12 / 18, 3)
    assert summary["every_candidate"]["seconds_per_round"] == pytest.approx((2.0 + 0.5 + 1.0 + 1.0) / 4)
    assert summary["cached"]["seconds_per_round"] == pytest.approx((1.0 + 0.5 + 0.5 + 0.5) / 4)
    assert summary["every_candidate"]["slowest_round_seconds"] == 2.0 and summary["cached"]["slowest_round_seconds"] == 1.0
    assert summary["speedup"] == pytest.approx(4.5 / 2.5)


def test_search_round_cost_counts_trace_objects_seen_again_within_a_round():
    from benchmarks.search_round_cost import repeated_trace_share

    events = [("predict", "a", ["x", "y"]), ("predict", "a", ["x", "z"]), ("update", "a"), ("predict", "a", ["x"]),
              ("predict", "b", ["x"])]
    assert repeated_trace_share(events) == round(1 / 6, 3)  # "x" in the second call; an update or a task switch starts afresh


def test_student_sweep_trains_on_the_named_models_of_the_train_split_only(tmp_path):
    from tcl_core.train import chosen_train_split

    train = [tmp_path / "resnet18", tmp_path / "mlp", tmp_path / "bert_layer"]
    assert chosen_train_split(train, None) == train
    assert chosen_train_split(train, ["bert_layer", "resnet18"]) == [train[0], train[2]]  # the split's order
    with pytest.raises(ValueError, match=r"\['vit_block'\] are not in the train split"):
        chosen_train_split(train, ["vit_block", "mlp"])


def test_search_replay_policies_parse_with_the_adapters_defaults_and_reject_typos():
    from benchmarks.search_replay import parse_policy

    default = parse_policy("tcl")
    assert (default.steps, default.lr, default.gain, default.explore) == (8, 1e-4, 1.0, 0.25)
    tuned = parse_policy("tcl:steps=32:lr=0.001:gain=4:explore=0")
    assert (tuned.steps, tuned.lr, tuned.gain, tuned.explore) == (32, 1e-3, 4.0, 0.0)
    assert parse_policy("xgb").explore == 0.0
    assert default.blend == 0.0 and parse_policy("tcl:blend=0.5").blend == 0.5
    for bad in ("tcl:step=3", "tcl:steps", "xgb:steps=3", "xgb:blend=1", "mlp"):
        with pytest.raises(ValueError):
            parse_policy(bad)


def test_search_replay_picks_the_top_scores_and_draws_the_explore_share_from_the_rest():
    import numpy as np

    from benchmarks.search_replay import pick

    scores = np.array([0.1, 0.9, 0.5, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4, 0.0])
    rng = np.random.default_rng(0)
    assert sorted(pick(scores, 4, 0.0, rng)) == [1, 3, 5, 7]
    random_picks = set()
    for _ in range(20):
        chosen = pick(scores, 4, 0.25, rng)  # floor(0.25 * 4) = 1 random pick, from the 7 not in the top 3
        assert len(set(chosen)) == 4 and {1, 3, 5} <= set(chosen)
        random_picks |= set(chosen) - {1, 3, 5}
    assert len(random_picks) > 1
    assert sorted(pick(scores[:3], 8, 0.25, rng)) == [0, 1, 2]  # a pool smaller than the batch is measured whole


def test_search_replay_blend_adds_standardised_scores_and_lets_an_untrained_model_abstain():
    import numpy as np

    from benchmarks.search_replay import Blend, standardised

    assert standardised([1.0, 2.0, 3.0]) == pytest.approx([-1.2247449, 0.0, 1.2247449])
    assert standardised([5.0, 5.0]).tolist() == [0.0, 0.0]  # XGBoost before it trains: no say

    class Fixed:
        def __init__(self, scores):
            self.scores, self.updates = np.asarray(scores), 0

        def predict(self, context, candidates):
            return self.scores

        def update(self, context, candidates, results):
            self.updates += 1

    student, xgb = Fixed([0.0, 1.0, 2.0]), Fixed([7.0, 7.0, 7.0])
    blend = Blend(student, xgb, weight=2.0)
    assert blend.predict(None, [1, 2, 3]) == pytest.approx(standardised([0.0, 1.0, 2.0]))
    xgb.scores = np.array([2.0, 1.0, 0.0])  # now trained, and of the opposite opinion at twice the weight
    assert np.argmax(blend.predict(None, [1, 2, 3])) == 0
    blend.update(None, [], [])
    assert student.updates == xgb.updates == 1  # both learn from every measurement


def test_search_replay_scores_a_round_as_weighted_kernel_sums_and_found_ratios():
    import numpy as np

    from benchmarks.search_replay import Task, round_scores

    tasks = [Task("a", None, [], np.array([1.0, 2.0]), weight=2.0), Task("b", None, [], np.array([4.0, 8.0]), weight=1.0)]
    scores = round_scores(tasks, [2.0, 4.0])  # a found its runner-up, b its best
    assert scores["kernels"] == pytest.approx((2 * 2.0 + 4.0) / (2 * 1.0 + 4.0))
    assert scores["found"] == pytest.approx((2 * 0.5 + 1.0) / 3)


def test_input_sensitivity_times_each_tasks_best_schedule_on_the_runners_fill_and_centred_inputs(measured, capsys):
    from benchmarks import input_sensitivity

    best = input_sensitivity.best_records(measured)
    assert len(best) >= 2 and all(0 < seconds < 1 for seconds, _ in best.values())
    input_sensitivity.main([str(measured), "--target", '{"kind": "llvm", "num-cores": 1}'])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["workload"] for r in rows) == sorted(best)
    assert [r["database_ms"] for r in rows] == sorted((r["database_ms"] for r in rows), reverse=True)  # slowest first
    for row in rows:
        assert list(row["ms"]) == list(input_sensitivity.DISTRIBUTIONS) and all(ms > 0 for ms in row["ms"].values())
        assert row["database_ms"] == pytest.approx(1e3 * best[row["workload"]][0], abs=1e-4)
    with pytest.raises(SystemExit, match="mentions 'no such op'"):
        input_sensitivity.main([str(measured), "--contains", "no such op"])


def test_search_replay_drives_real_cost_models_over_a_measured_database(measured, tmp_path):
    import numpy as np
    import torch

    from benchmarks.search_replay import load_tasks, make_model, parse_policy, replay_job, round_scores
    from tcl_core import tvm_api
    from tcl_core.features import TRACE_FEATURE_DIM
    from tcl_core.student import Student, StudentConfig, save_student

    torch.manual_seed(0)
    student_path = tmp_path / "student.pt"
    save_student(Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=8, n_layers=1, d_state=4)), student_path)
    tasks = load_tasks(measured)
    assert len(tasks) >= 2 and all(len(t.candidates) == len(t.seconds) for t in tasks)
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 1})
    for spec in ("tcl:steps=2", "tcl:steps=2:blend=1", "random"):
        policy = parse_policy(spec)
        model = make_model(policy, student_path)
        found = replay_job(tasks, model, policy, rounds=3, batch=3, target=target, rng=np.random.default_rng(0))
        assert len(found) == 3
        for task, first, last in zip(tasks, found[0], found[-1]):
            assert task.best <= last <= first < np.inf  # the best so far only improves
        # Three rounds of three cover every pool of <= 9 candidates, so every task's best is found.
        assert round_scores(tasks, found[-1])["kernels"] == pytest.approx(1.0)
        assert round_scores(tasks, found[0])["kernels"] >= 1.0


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
