"""The TCL PyCostModel adapter: real design spaces, real MetaSchedule results, a real tuning run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deploy.examples import tiny_cnn
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline
from tcl_core import tvm_api
from tcl_core.cost_model import TclCostModel
from tests.models import tiny_mlp_onnx


@pytest.fixture(scope="module")
def conv_candidates():
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 2})
    lowered = tvm_api.lower_for_tuning(tvm_api.from_onnx(tiny_cnn()), target)
    task = next(t for t in tvm_api.extract_tasks(lowered, target) if "conv" in t.task_name)
    args = tvm_api.ms.arg_info.ArgInfo.from_prim_func(task.dispatched[0]["main"])
    candidates, context = [], None
    for seed in range(1, 4):
        context = tvm_api.ms.TuneContext(mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                                         search_strategy="evolutionary", task_name=task.task_name, rand_state=seed)
        candidates += [tvm_api.ms.MeasureCandidate(s, args) for s in context.space_generator.generate_design_space(context.mod)]
    return context, candidates


def test_predict_gives_one_finite_score_per_candidate(conv_candidates):
    context, candidates = conv_candidates
    scores = TclCostModel().predict(context, candidates)
    assert scores.shape == (len(candidates),) and np.isfinite(scores).all()


def test_scores_reach_the_search_positive_in_the_students_order_on_one_scale(conv_candidates):
    """EvolutionarySearch clips scores below 0 to 0: raw (negative) student scores would all tie."""
    from tcl_core.features import pad_batch, trace_features
    from tcl_core.student import predict

    context, candidates = conv_candidates
    model = TclCostModel()
    with torch.no_grad():  # push every raw score far below 0, as the shipped students' are
        model.student.head[-1].bias.fill_(-50.0)
    features, mask = pad_batch([trace_features(c.sch.trace) for c in candidates], model.student.config.max_len)
    raw = predict(model.student, features, mask)
    assert (raw < 0).all()
    scores = model.predict(context, candidates)
    assert (scores > 0).all() and scores.max() == pytest.approx(1.0)
    np.testing.assert_array_equal(np.argsort(scores, kind="stable"), np.argsort(raw, kind="stable"))
    # a later call in the same round (a subset of the population) is on the same scale
    np.testing.assert_allclose(model.predict(context, candidates[1:3]), scores[1:3], rtol=1e-6)


def test_each_distinct_sequence_is_scored_once_between_updates(conv_candidates, monkeypatch):
    """A round predicts its evolving population several times; repeats must not rerun the student."""
    from tcl_core import cost_model
    from tcl_core.features import pad_batch, trace_features
    from tcl_core.student import predict

    context, candidates = conv_candidates
    model = TclCostModel()
    scored_rows: list[int] = []
    real_predict = cost_model.predict

    def counting_predict(student, features, mask, **kwargs):
        scored_rows.append(len(features))
        return real_predict(student, features, mask, **kwargs)

    monkeypatch.setattr(cost_model, "predict", counting_predict)
    population = candidates + candidates[:3] + candidates  # survivors come back within a call and across calls
    distinct = len({trace_features(c.sch.trace).tobytes() for c in candidates})
    first = model.predict(context, population)
    assert scored_rows == [distinct]
    features, mask = pad_batch([trace_features(c.sch.trace) for c in population], model.student.config.max_len)
    raw = predict(model.student, features, mask)  # every candidate scored, as without the cache
    np.testing.assert_allclose(np.log(first), raw - raw.max(), rtol=1e-5, atol=1e-5)  # first = exp(raw - anchor)
    np.testing.assert_allclose(model.predict(context, candidates[::-1]), first[: len(candidates)][::-1], rtol=1e-6)
    assert scored_rows == [distinct]  # the second call hit the cache only
    results = [tvm_api.ms.runner.RunnerResult(run_secs=[1e-3 * (i + 1)], error_msg=None) for i in range(len(candidates))]
    model.update(context, candidates, results)
    model.predict(context, candidates)
    assert scored_rows == [distinct, distinct]  # new weights: everything scored again


def test_each_trace_object_is_featurised_once_in_a_round(conv_candidates, monkeypatch):
    """Survivors of a generation come back as the same trace object; an update starts a new round."""
    from tcl_core import cost_model

    context, candidates = conv_candidates
    featurised: list[object] = []
    real_features = cost_model.trace_features

    def counting_features(trace):
        featurised.append(trace)
        return real_features(trace)

    monkeypatch.setattr(cost_model, "trace_features", counting_features)
    model = TclCostModel()
    first = model.predict(context, candidates + candidates[:2])
    assert len(featurised) == len(candidates)
    # the same schedules, through new wrapper objects (as MetaSchedule hands them back): no new features
    again = [tvm_api.ms.MeasureCandidate(c.sch, c.args_info) for c in candidates]
    np.testing.assert_array_equal(model.predict(context, again), first[: len(candidates)])
    assert len(featurised) == len(candidates)
    results = [tvm_api.ms.runner.RunnerResult(run_secs=[1e-3 * (i + 1)], error_msg=None) for i in range(len(candidates))]
    model.update(context, candidates, results)  # its features come from the round's cache
    assert len(featurised) == len(candidates)
    model.predict(context, candidates)
    assert len(featurised) == 2 * len(candidates)
    # the search moving to another task ends the round too (the caches hold one round at a time)
    another_task = tvm_api.ms.TuneContext(mod=context.mod, target=context.target, task_name="another task")
    model.predict(another_task, candidates[:1])
    model.predict(context, candidates[:1])
    assert len(featurised) == 2 * len(candidates) + 2


def test_update_fine_tunes_on_fresh_measurements(conv_candidates, tmp_path):
    torch.manual_seed(0)
    context, candidates = conv_candidates
    model = TclCostModel(update_steps=20, lr=1e-2)
    before = [p.detach().clone() for p in model.student.parameters()]
    results = [tvm_api.ms.runner.RunnerResult(run_secs=[1e-3 * (i + 1)], error_msg=None) for i in range(len(candidates) - 1)]
    results.append(tvm_api.ms.runner.RunnerResult(run_secs=None, error_msg="build failed"))
    model.update(context, candidates, results)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.student.parameters()))
    model.save(str(tmp_path / "student.pt"))
    reloaded = TclCostModel()
    reloaded.load(str(tmp_path / "student.pt"))
    np.testing.assert_allclose(reloaded.predict(context, candidates), model.predict(context, candidates), rtol=1e-6)


def test_task_scoped_updates_tune_a_copy_for_that_task_and_leave_the_others_on_the_offline_student(conv_candidates):
    torch.manual_seed(0)
    context, candidates = conv_candidates
    other = tvm_api.ms.TuneContext(mod=context.mod, target=context.target, task_name="another task")
    model = TclCostModel(update_steps=20, lr=1e-2, update_scope="task")
    offline = [p.detach().clone() for p in model.student.parameters()]
    before_this, before_other = model.predict(context, candidates), model.predict(other, candidates)
    results = [tvm_api.ms.runner.RunnerResult(run_secs=[1e-3 * (i + 1)], error_msg=None) for i in range(len(candidates))]
    model.update(context, candidates, results)
    assert all(torch.equal(a, b) for a, b in zip(offline, model.student.parameters()))  # the offline student is kept
    assert not np.allclose(model.predict(context, candidates), before_this)  # this task ranks with its tuned copy
    np.testing.assert_allclose(model.predict(other, candidates), before_other, rtol=1e-6)  # the other task does not
    with pytest.raises(ValueError, match="update_scope"):
        TclCostModel(update_scope="model")


def test_tcl_cost_model_drives_a_real_tuning_run(tmp_path):
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=5), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="tcl", trials_per_iter=4, population=32, timing_repeats=3),
    )
    assert manifest.cost_model == "tcl" and manifest.trials_measured == 8 and manifest.verification.passed
    # an empty state_dir: the shipped student of this platform, or of the nearest one, guided the search
    assert manifest.student is not None and manifest.student["source"] == "shipped"
