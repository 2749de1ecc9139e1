"""The research scripts (research/): their arithmetic on hand-made records, and the replay on a measured database."""

from __future__ import annotations

import json
import math

import pytest


def test_top_k_headroom_is_the_runner_up_oracle_weighted_as_top_k():
    import numpy as np

    from research.top_k_headroom import headroom
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

    from research.top_k_by_task import task_rows
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

    from research.top_k_density import density_curve

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

    from research.top_k_gap import task_gap

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

    from research.top_k_gap import task_gap

    a = np.array([0.2, 0.4, 0.6, 0.8])
    same = task_gap(a, a + 0.1, np.ones(4))
    assert same["gap_ci95"] == [pytest.approx(0.1), pytest.approx(0.1)]
    mixed = task_gap(a, np.array([1.0, 0.4, 0.6, 0.0]), np.ones(4))  # +0.8 and -0.8: no gap on average
    low, high = mixed["gap_ci95"]
    assert mixed["gap"] == pytest.approx(0.0) and low < -0.1 and high > 0.1


def test_search_round_cost_groups_a_tasks_calls_between_updates_into_rounds():
    from research.search_round_cost import rounds, summarise

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
    from research.search_round_cost import repeated_trace_share

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
    from research.search_replay import parse_policy

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

    from research.search_replay import pick

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

    from research.search_replay import Blend, standardised

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

    from research.search_replay import Task, round_scores

    tasks = [Task("a", None, [], np.array([1.0, 2.0]), weight=2.0), Task("b", None, [], np.array([4.0, 8.0]), weight=1.0)]
    scores = round_scores(tasks, [2.0, 4.0])  # a found its runner-up, b its best
    assert scores["kernels"] == pytest.approx((2 * 2.0 + 4.0) / (2 * 1.0 + 4.0))
    assert scores["found"] == pytest.approx((2 * 0.5 + 1.0) / 3)


def test_input_sensitivity_times_each_tasks_best_schedule_on_the_runners_fill_and_centred_inputs(measured, capsys):
    from research import input_sensitivity

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

    from research.search_replay import load_tasks, make_model, parse_policy, replay_job, round_scores
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


def test_loop_profile_sums_metaschedules_scopes_into_build_run_search_and_update():
    from research.loop_profile import summarise

    profile = {"Total": 100.0, "SendToBuilder": 50.0, "SendToRunner": 10.0, "JoinRunnerFutures": 5.0,
               "EvoSearch/SampleInitPopulation": 4.0, "EvoSearch/Evolve/Mutation": 6.0,
               "EvoSearch/Evolve/Misc/CopyMeasuredWorkloads": 1.0,  # inside Evolve/Misc: not counted twice
               "MeasureCallback/UpdateCostModel": 3.0}
    summary = summarise(profile, trials=120, seconds=120.0)
    assert (summary["build"], summary["run"], summary["search"], summary["cost_model_update"]) == (50.0, 15.0, 10.0, 3.0)
    assert summary["other"] == 22.0 and summary["trials_per_minute"] == 60.0


def test_student_refresh_finds_kept_databases_and_trains_on_no_workload_of_the_held_out_model(measured, tmp_path):
    import shutil

    from benchmarks.harness import seed_database
    from research import student_refresh
    from tcl_core import tvm_api

    work = tmp_path / "work"
    for model in ("held", "other"):  # <work>/<model>/<cost model>/state/databases-v2/<platform>/, as --keep-work keeps them
        shutil.copytree(measured, work / model / "xgb" / "state" / "databases-v2" / "llvm-test")
    held = student_refresh._databases([work], lambda name: name == "held")
    assert [folder.relative_to(work).parts[0] for folder in held] == ["held"]

    records = tvm_api.open_database(measured).get_all_tuning_records()
    workloads = {tvm_api.structural_hash(record.workload.mod) for record in records}
    assert student_refresh._workloads(measured) == workloads
    left_out = min(workloads)
    copied = seed_database(tmp_path / "train", student_refresh._databases([work], lambda n: n != "held"),
                           leave_out=frozenset({left_out}))
    kept = student_refresh._workloads(tmp_path / "train")
    assert kept == workloads - {left_out} and left_out not in kept
    assert copied == sum(tvm_api.structural_hash(r.workload.mod) != left_out for r in records)
    merged = tvm_api.open_database(tmp_path / "train").get_all_tuning_records()
    assert len(merged) == copied and all(tvm_api.structural_hash(r.workload.mod) != left_out for r in merged)
