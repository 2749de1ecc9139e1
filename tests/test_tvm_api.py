"""The TVM adapter module: targets, and CPU-only tensor intrinsics (a fresh process each)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tcl_core import tvm_api


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
