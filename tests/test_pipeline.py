"""The whole pipeline with real TVM tuning, builds and onnxruntime, on tiny models and budgets."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from deploy import pipeline as pipeline_module
from deploy.artifact import Manifest, Verification
from deploy.errors import PipelineError, VerificationError
from deploy.examples import write_example
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline
from tests.models import conv_relu6_model, corrupt_onnx, gelu_mlp_model, tiny_mlp_onnx

# Small search so one tuning round costs seconds, not tens of seconds.
FAST = dict(trials_per_iter=8, population=64, timing_repeats=3)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """tiny_mlp tuned with "xgb" for 8 trials; shared state_dir for the reuse test."""
    root = tmp_path_factory.mktemp("pipeline")
    progress = []
    manifest = run_pipeline(
        tiny_mlp_onnx(root / "mlp.onnx"), output_dir=root / "out", state_dir=root / "state",
        options=TuningOptions(trials=8, cost_model="xgb", **FAST), on_progress=progress.append,
    )
    return root, manifest, progress


def test_manifest_says_what_was_tuned_and_that_it_verified(tuned):
    root, manifest, _ = tuned
    on_disk = Manifest.model_validate_json((root / "out" / f"mlp-{manifest.sha256[:8]}" / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest.artifact_dir == str(root / "out" / f"mlp-{manifest.sha256[:8]}")
    assert manifest.cost_model == "xgb" and manifest.trials == 8 and manifest.trials_measured == 8
    assert manifest.tasks >= 1 and manifest.tasks_reused == 0
    assert manifest.verification.passed and manifest.verification.max_abs_err < 1e-4
    assert manifest.inputs[0].shape == [1, 16] and manifest.outputs[0].shape == [1, 8]
    assert manifest.target["kind"] == "llvm" and manifest.platform.startswith("llvm-")
    assert min(manifest.latency_ms.tvm, manifest.latency_ms.untuned, manifest.latency_ms.onnxruntime) > 0
    assert manifest.tuning_seconds > 0


def test_manifest_records_threads_levers_estimate_and_where_the_time_goes(tuned):
    import os

    from tcl_core import tvm_api

    _, manifest, _ = tuned
    assert manifest.schema_version == 4
    # candidates ran on the target's cores (test_tvm_api checks the runner's worker); so did verification
    assert manifest.threads == manifest.target["num-cores"] == os.cpu_count() == tvm_api.runtime_threads()
    assert manifest.fast_math and manifest.pack_weights and manifest.conv_layout == "NHWC"
    assert manifest.stopped_by == "trials" and manifest.time_budget == 1800 and not manifest.flush_caches
    profile = manifest.tuning_profile  # where the search's time went: building, running, searching
    assert profile["Total"] > 0 and {"SendToBuilder", "SendToRunner"} <= set(profile)
    assert manifest.latency_ms.onnxruntime_default_threads > 0
    assert manifest.tasks_untuned == 0 and manifest.estimated_ms > 0
    assert manifest.top_kernels and all(k.ms > 0 and 0 < k.share <= 1 for k in manifest.top_kernels)
    assert sum(k.share for k in manifest.top_kernels) <= 1.001
    assert (manifest.advice is None) == (manifest.latency_ms.tvm <= manifest.latency_ms.onnxruntime)
    if manifest.advice:
        assert manifest.advice.startswith("onnxruntime is ") and manifest.top_kernels[0].name in manifest.advice
    assert not any("threads" in warning for warning in manifest.warnings)


def test_advice_names_the_ratio_and_the_slowest_kernels():
    from deploy.artifact import Kernel, Latency

    kernels = [Kernel(name="fused_conv2d", ms=0.5, share=0.8), Kernel(name="mean", ms=0.1, share=0.16)]
    slower = pipeline_module.advice(Latency(tvm=2.0, untuned=9.0, onnxruntime=1.0), kernels, threads=2)
    assert slower.startswith("onnxruntime is 2.00x faster than this library (1 vs 2 ms, 2 threads each)")
    assert "fused_conv2d 0.5 ms (80%), mean 0.1 ms (16%)" in slower
    assert pipeline_module.advice(Latency(tvm=1.0, untuned=9.0, onnxruntime=2.0), kernels, threads=2) is None


def test_fast_math_gelu_verifies_against_onnxruntime(tmp_path):
    import onnx

    path = tmp_path / "gelu.onnx"
    onnx.save(gelu_mlp_model(), str(path))
    manifest = run_pipeline(path, output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                            options=TuningOptions(trials=8, cost_model="random", **FAST))
    assert manifest.fast_math and manifest.verification.passed and manifest.verification.max_abs_err < 1e-4


def test_a_tuned_conv_models_library_does_no_weight_layout_work_at_run_time(tmp_path):
    import onnx

    from tcl_core import tvm_api

    path = tmp_path / "conv.onnx"
    onnx.save(conv_relu6_model(), str(path))
    manifest = run_pipeline(path, output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                            options=TuningOptions(trials=16, cost_model="random", conv_layout="NCHW", **FAST))
    assert manifest.pack_weights and manifest.tasks_untuned == 0 and manifest.verification.passed
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    kernels = [name for name, _ in tvm_api.profile_kernels(Path(manifest.artifact_dir) / "model.so", [x])]
    # the tuned convolutions take their weights pre-packed; the packing ran at build time
    assert any(name.endswith("_prepacked") for name in kernels), kernels
    assert not any("layout_transform" in name or "transpose" in name for name in kernels), kernels


def test_convolutions_are_nhwc_by_default_and_verify(tmp_path):
    import onnx

    path = tmp_path / "conv.onnx"
    onnx.save(conv_relu6_model(), str(path))
    manifest = run_pipeline(path, output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                            options=TuningOptions(trials=16, cost_model="random", **FAST))
    assert manifest.conv_layout == "NHWC" and manifest.verification.passed


def test_a_database_from_before_the_records_schema_is_not_reused(tuned, tmp_path):
    import shutil

    from deploy.layout import database_dir

    root, first, _ = tuned
    old_style = tmp_path / "state" / "databases" / first.platform  # where records lived before schema 2
    shutil.copytree(database_dir(root / "state", first.platform), old_style)
    manifest = run_pipeline(tiny_mlp_onnx(tmp_path / "mlp.onnx"), output_dir=tmp_path / "out",
                            state_dir=tmp_path / "state", options=TuningOptions(trials=8, cost_model="xgb", **FAST))
    assert manifest.sha256 == first.sha256 and manifest.tasks_reused == 0 and manifest.trials_measured == 8
    assert database_dir(tmp_path / "state", first.platform).is_dir() and old_style.is_dir()


def test_progress_walks_through_the_stages(tuned):
    _, _, progress = tuned
    stages = [p.stage for p in progress]
    assert stages[0] == "tuning" and stages[-1] == "verifying"
    assert stages.index("building") < stages.index("verifying")
    assert max(p.trials_done for p in progress) == 8


def test_each_measured_batch_reports_the_rate_the_eta_and_once_every_task_ran_the_estimate(tuned):
    _, manifest, progress = tuned
    batches = [p for p in progress if p.stage == "tuning" and p.trials_done > 0]
    assert batches and all(p.trials_per_minute > 0 and p.eta_seconds is not None for p in batches)
    assert all(p.trials_per_minute is None for p in progress if p.stage == "tuning" and p.trials_done == 0)
    # tiny_mlp's one task was measured in the first batch; this run's best is all the database holds
    assert batches[-1].best_estimate_ms == pytest.approx(manifest.estimated_ms, rel=1e-3)
    assert batches[-1].eta_seconds == 0  # the 8 trials are spent
    after = [p for p in progress if p.stage != "tuning"]
    assert all(p.best_estimate_ms == batches[-1].best_estimate_ms and p.eta_seconds is None for p in after)


def test_output_folder_holds_only_the_artifact(tuned):
    root, manifest, _ = tuned
    assert sorted(p.name for p in (root / "out").iterdir()) == [f"mlp-{manifest.sha256[:8]}"]
    assert sorted(p.name for p in (root / "out" / f"mlp-{manifest.sha256[:8]}").iterdir()) == ["manifest.json", "model.so"]


def test_library_runs_in_a_fresh_process_with_the_tvm_runtime_alone(tuned):
    root, manifest, _ = tuned
    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    np.save(root / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, tvm
        from tvm import relax
        vm = relax.VirtualMachine(tvm.runtime.load_module({manifest.artifact_dir + '/model.so'!r}), tvm.cpu())
        y = vm["main"](tvm.runtime.tensor(np.load({str(root / 'x.npy')!r})))
        np.save({str(root / 'y.npy')!r}, y.numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(root / "mlp.onnx"), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    np.testing.assert_allclose(np.load(root / "y.npy"), expected, rtol=1e-4, atol=1e-5)


def test_second_model_with_same_workloads_reuses_records(tuned):
    root, first, _ = tuned
    manifest = run_pipeline(
        tiny_mlp_onnx(root / "mlp_v2.onnx", seed=1), output_dir=root / "out", state_dir=root / "state",
        options=TuningOptions(trials=8, cost_model="xgb", **FAST),
    )
    assert manifest.sha256 != first.sha256
    assert manifest.tasks_reused == manifest.tasks and manifest.trials_measured == 0
    assert manifest.platform == first.platform and manifest.verification.passed


def test_random_cost_model_tunes(tmp_path):
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=2), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="random", **FAST),
    )
    assert manifest.cost_model == "random" and manifest.trials_measured == 8 and manifest.verification.passed
    assert manifest.tasks_untuned == 0 and manifest.warnings == []  # tiny_mlp's one task got its round


def test_a_task_that_runs_out_of_candidates_leaves_its_budget_to_the_others(tmp_path):
    # tiny_cnn's reshape task has one candidate; an even share per task (24 / 5 -> 5 each) would
    # measure 4 x 5 + 1 = 21 of the 24 trials asked for.
    manifest = run_pipeline(
        write_example("tiny_cnn", tmp_path / "cnn.onnx"), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=24, cost_model="random", trials_per_iter=4, population=32, timing_repeats=3,
                              conv_layout="NCHW"),  # NCHW: tiny_cnn's five tasks, no input transpose
    )
    assert manifest.tasks == 5 and manifest.trials_measured >= 24 and manifest.verification.passed


def test_a_budget_short_of_a_round_per_task_warns_before_tuning_and_the_manifest_counts_the_untuned(tmp_path):
    progress = []
    manifest = run_pipeline(
        write_example("tiny_cnn", tmp_path / "cnn.onnx"), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="random", trials_per_iter=4, population=32, timing_repeats=3,
                              conv_layout="NCHW"),  # NCHW: tiny_cnn's five tasks, no input transpose
        on_progress=progress.append,
    )
    warned = [p for p in progress if p.warning]
    assert len(warned) == 1 and warned[0].trials_done == 0 and progress.index(warned[0]) < 2  # before any measurement
    assert warned[0].warning.startswith("trials 8 cannot give each of the 5 tasks to tune a round of 4: up to 3 ")
    assert warned[0].warning.endswith("trials >= 20 reaches every task")
    # 8 trials reach 2 or 3 of the 5 tasks (the reshape has a single candidate); the rest stay untuned.
    assert manifest.tasks == 5 and 2 <= manifest.tasks_untuned <= 3 and manifest.verification.passed
    assert manifest.warnings == [f"{manifest.tasks_untuned} of 5 tasks run TVM's default schedule, untuned: "
                                 "the 8 trials ran out before the search reached them"]
    # no estimate of the model while tasks have no measured candidate; a rate all the same
    assert all(p.best_estimate_ms is None for p in progress) and manifest.estimated_ms is None
    assert any(p.trials_per_minute for p in progress)


def test_explore_reaches_the_search_and_an_all_random_search_still_tunes(tmp_path, monkeypatch):
    from tcl_core import tvm_api

    built = []
    real = tvm_api.ms.search_strategy.EvolutionarySearch

    def spy(**kwargs):
        strategy = real(**kwargs)
        built.append(strategy.eps_greedy)
        return strategy

    monkeypatch.setattr(tvm_api.ms.search_strategy, "EvolutionarySearch", spy)
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=3), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="tcl", explore=1.0, **FAST),
    )
    assert built == [1.0]  # every pick of every batch a random sample of the design space
    assert manifest.explore == 1.0 and manifest.trials_measured == 8 and manifest.verification.passed
    with pytest.raises(ValueError):
        TuningOptions(explore=1.5)


def test_explore_defaults_to_a_quarter_for_the_student_and_tvms_share_otherwise(tuned, tmp_path):
    assert TuningOptions().explore is None
    assert tuned[1].cost_model == "xgb" and tuned[1].explore == 0.05
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=4), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="tcl", **FAST),
    )
    assert manifest.cost_model == "tcl" and manifest.explore == 0.25


def test_auto_tunes_with_the_platforms_stored_student_and_says_so(tmp_path):
    from tcl_core import tvm_api
    from tcl_core.features import TRACE_FEATURE_DIM
    from tcl_core.platform import platform_name
    from tcl_core.student import Student, StudentConfig, save_student

    platform = platform_name(tvm_api.host_target_dict(), tvm_api.TVM_VERSION)
    folder = tmp_path / "state" / "students" / platform
    folder.mkdir(parents=True)
    save_student(Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=16, n_layers=1)), folder / "student.pt")
    (folder / "student.json").write_text(json.dumps({"version": 7}))
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=5), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, **FAST),  # cost_model defaults to "auto"
    )
    assert manifest.cost_model == "tcl" and manifest.trials_measured == 8 and manifest.verification.passed
    assert manifest.student["platform"] == platform and manifest.student["version"] == 7
    assert manifest.student["source"] == "state" and platform in manifest.cost_model_reason


def test_a_missing_student_file_fails_the_job_with_a_reason(tmp_path):
    with pytest.raises(PipelineError, match="cost model: student file .* does not exist"):
        run_pipeline(
            tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=6), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
            options=TuningOptions(trials=8, student=tmp_path / "nope.pt", **FAST),
        )
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unknown_cost_model_name_is_refused():
    with pytest.raises(ValueError):
        TuningOptions(cost_model="gbdt")


def test_sidecar_trials_override_options(tmp_path):
    path = tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=4)
    (tmp_path / "mlp.json").write_text(json.dumps({"trials": 0}))
    manifest = run_pipeline(path, output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                            options=TuningOptions(trials=64, **FAST))
    assert manifest.trials == 0 and manifest.trials_measured == 0 and manifest.verification.passed
    assert manifest.tasks_untuned == manifest.tasks and manifest.warnings == []  # untuned as asked: no warning


def test_bad_model_raises_and_writes_nothing(tmp_path):
    with pytest.raises(PipelineError, match="not a readable ONNX file"):
        run_pipeline(corrupt_onnx(tmp_path / "bad.onnx"), output_dir=tmp_path / "out",
                     state_dir=tmp_path / "state", options=TuningOptions(trials=0))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_failed_verification_emits_nothing(tmp_path, monkeypatch):
    failing = Verification(max_abs_err=1.0, max_rel_err=1.0, atol=1e-4, rtol=1e-3, passed=False)
    monkeypatch.setattr(pipeline_module.verify, "compare", lambda *args, **kwargs: failing)
    with pytest.raises(VerificationError, match="max_abs_err=1"):
        run_pipeline(tiny_mlp_onnx(tmp_path / "mlp.onnx"), output_dir=tmp_path / "out",
                     state_dir=tmp_path / "state", options=TuningOptions(trials=0, **FAST))
    assert list((tmp_path / "out").iterdir()) == []


def test_bad_target_is_a_pipeline_error(tmp_path):
    with pytest.raises(PipelineError, match="target"):
        run_pipeline(tiny_mlp_onnx(tmp_path / "mlp.onnx"), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
                     options=TuningOptions(trials=0, target={"kind": "no-such-kind"}))


def test_builder_and_runner_workers_killed_mid_tuning_cost_only_their_candidates(tmp_path):
    import psutil

    killed: list[int] = []

    def on_progress(progress):
        if progress.stage == "tuning" and progress.trials_done >= 4 and not killed:
            for helper in psutil.Process().children(recursive=True):
                if "popen_worker" in " ".join(helper.cmdline()):  # TVM's builder and runner pools
                    helper.kill()
                    killed.append(helper.pid)

    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=11), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        on_progress=on_progress,
        options=TuningOptions(trials=12, cost_model="random", trials_per_iter=4, population=32, timing_repeats=3),
    )
    assert killed  # there were workers to kill
    assert manifest.verification.passed and manifest.trials_measured == 12


def test_a_time_budget_stops_the_search_within_one_round_and_the_manifest_says_so(tmp_path):
    import time

    batches_at: list[float] = []  # when each measured batch came back

    def on_progress(progress):
        if progress.stage == "tuning" and progress.trials_done > 0:
            batches_at.append(time.monotonic())

    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=7), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        on_progress=on_progress,
        options=TuningOptions(trials=100_000, time_budget="10s", patience_rounds=None, cost_model="random", **FAST),
    )
    assert manifest.stopped_by == "time budget" and manifest.time_budget == 10
    assert 0 < manifest.trials_measured < 100_000 and manifest.verification.passed
    # The clock starts before the first batch, so every batch after first + 10 s came past the limit:
    # one round at most, i.e. the batches each task had in flight, and nothing sent after it.
    past_limit = [at for at in batches_at if at > batches_at[0] + 10]
    assert len(past_limit) <= manifest.tasks


def test_without_trials_every_task_gets_its_rounds(tmp_path):
    assert TuningOptions().trials is None and TuningOptions().time_budget == 1800
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=8), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(cost_model="random", rounds_per_task=1, trials_per_iter=4, population=32, timing_repeats=3),
    )
    assert manifest.trials == 4 * manifest.tasks and manifest.tasks_untuned == 0 and manifest.warnings == []
    assert manifest.stopped_by in ("trials", "search") and manifest.time_budget == 1800
