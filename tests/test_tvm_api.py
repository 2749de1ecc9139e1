"""The TVM adapter module: targets, and CPU-only tensor intrinsics (a fresh process each)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import os

import pytest

from tcl_core import tvm_api
from tests.models import conv_relu6_model, gelu_mlp_model


def test_host_target_names_this_cpu():
    target = tvm_api.host_target_dict()
    assert target["kind"] == "llvm" and target["mcpu"] and target["num-cores"] >= 1
    assert tvm_api.make_target(target).kind.name == "llvm"


def test_bad_target_raises():
    with pytest.raises(Exception):
        tvm_api.make_target({"kind": "no-such-kind"})


def test_cpu_target_registers_cpu_intrinsics_without_cuda():
    script = textwrap.dedent("""
        import sys
        from tcl_core import tvm_api
        tvm_api.make_target({"kind": "llvm"})
        from tvm.s_tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN
        assert tvm_api.tvm.s_tir.TensorIntrin.get(VNNI_DOT_16x4_INTRIN) is not None
        tvm_api.ms.TuneContext(target=tvm_api.make_target({"kind": "llvm"}))
        print("tvm.s_tir.tensor_intrin.cuda" in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("threads", sorted({1, os.cpu_count() or 1}))
def test_the_runners_worker_runs_candidates_on_the_threads_asked_for(threads):
    runner = tvm_api.make_runner(None, threads)
    assert runner.pool.submit(tvm_api.runtime_threads).result() == threads


def test_this_process_runs_tvm_on_every_core_by_default():
    # tvm_api sets TVM_NUM_THREADS before TVM starts; TVM's own default is half the cores on x86.
    assert tvm_api.runtime_threads() == int(os.environ["TVM_NUM_THREADS"]) == (os.cpu_count() or 1)


def _lowered_tir(model, **options) -> str:
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 1})
    return tvm_api.lower_for_tuning(tvm_api.from_onnx(model), target, **options).script()


def test_fast_math_replaces_libm_erf():
    assert "T.erf(" in _lowered_tir(gelu_mlp_model())
    assert "T.erf(" not in _lowered_tir(gelu_mlp_model(), fast_math=True)


def test_pack_weights_marks_the_constant_operands_layout_free():
    assert "layout_free_buffers" not in _lowered_tir(conv_relu6_model())
    assert "layout_free_buffers" in _lowered_tir(conv_relu6_model(), pack_weights=True)


def test_nhwc_keeps_each_clip_fused_with_its_convolution_and_transposes_only_at_the_ends():
    target = tvm_api.make_target({"kind": "llvm", "num-cores": 1})
    lowered = tvm_api.lower_for_tuning(tvm_api.from_onnx(conv_relu6_model()), target, conv_layout="NHWC")
    names = [task.task_name for task in tvm_api.extract_tasks(lowered, target)]
    convs = [name for name in names if "conv2d" in name]
    assert len(convs) == 2 and all("maximum" in name and "minimum" in name for name in convs), names
    # the input into NHWC and the output back to NCHW; nothing between the two convolutions
    assert sum("transpose" in name or "layout_transform" in name for name in names) == 2, names


def test_the_measure_callback_stops_every_idle_task_past_the_deadline_or_after_rounds_without_gain():
    """With fakes for MetaSchedule's scheduler: which tasks get terminated, and why."""
    import time
    from types import SimpleNamespace

    from tcl_core.tvm_api import _CountMeasured

    def scheduler():
        tasks = [SimpleNamespace(is_terminated=False, measure_candidates=None, task_weight=1.0) for _ in range(3)]
        tasks[2].measure_candidates = ["in flight"]  # comes back later; terminated then
        return SimpleNamespace(tasks_=tasks, terminate_task=lambda i: setattr(tasks[i], "is_terminated", True))

    def batch(*seconds):
        return [SimpleNamespace(error_msg=None, run_secs=[s]) for s in seconds]

    seen = []
    late = _CountMeasured(seen.append, deadline=time.monotonic() - 1)._inst  # the Python side of the FFI object
    late_scheduler = scheduler()
    late.apply(late_scheduler, 0, None, None, batch(1e-3, 2e-3))
    assert [s.trials for s in seen] == [2] and late.out_of_time and not late.converged
    assert [t.is_terminated for t in late_scheduler.tasks_] == [True, True, False]

    patient = _CountMeasured(seen.append, patience=2)._inst
    calm = scheduler()
    patient.apply(calm, 0, None, None, batch(1e-3))       # a first time: a gain
    patient.apply(calm, 1, None, None, batch(5e-3))       # task 1's first: a gain
    patient.apply(calm, 0, None, None, batch(0.995e-3))   # under 1% better: no gain
    assert not patient.converged and not any(t.is_terminated for t in calm.tasks_)
    patient.apply(calm, 1, None, None, [SimpleNamespace(error_msg="build failed", run_secs=[])])
    assert patient.converged and [t.is_terminated for t in calm.tasks_] == [True, True, False]


def test_the_measure_callback_reports_the_weighted_best_estimate_once_every_task_ran():
    from types import SimpleNamespace

    import pytest

    from tcl_core.tvm_api import TuningProgress, _CountMeasured

    tasks = [SimpleNamespace(is_terminated=False, measure_candidates=None, task_weight=w) for w in (2.0, 1.0)]
    two_tasks = SimpleNamespace(tasks_=tasks, terminate_task=lambda i: None)
    seen: list[TuningProgress] = []
    counter = _CountMeasured(seen.append)._inst
    counter.apply(two_tasks, 0, None, None, [SimpleNamespace(error_msg=None, run_secs=[s]) for s in (2e-3, 1e-3)])
    counter.apply(two_tasks, 1, None, None, [SimpleNamespace(error_msg="run failed", run_secs=None)])
    counter.apply(two_tasks, 1, None, None, [SimpleNamespace(error_msg=None, run_secs=[4e-3, 6e-3])])
    counter.apply(two_tasks, 0, None, None, [SimpleNamespace(error_msg=None, run_secs=[0.995e-3])])  # under 1%: counts here
    assert [p.trials for p in seen] == [2, 3, 4, 5]
    assert [p.best_estimate_ms for p in seen][:2] == [None, None]  # task 1 had no candidate that ran
    assert seen[2].best_estimate_ms == pytest.approx(2 * 1.0 + 5.0)
    assert seen[3].best_estimate_ms == pytest.approx(2 * 0.995 + 5.0)
