"""`tcl-tuned bundle` and the C++ loader: built with the system compiler, run with no Python around."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from deploy import verify
from deploy.artifact import Manifest
from deploy.bundle import LOADER_SOURCE, required_symbol_versions
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline
from tests.models import two_in_two_out_model

CLI = shutil.which("tcl-tuned", path=str(Path(sys.executable).parent)) or "tcl-tuned"
EXAMPLE = Path(__file__).parents[1] / "examples" / "cpp"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """A tuned two-input, two-output model, bundled, then moved elsewhere (rpath $ORIGIN must follow)."""
    root = tmp_path_factory.mktemp("bundle")
    model = root / "two.onnx"
    onnx.save(two_in_two_out_model(), str(model))
    manifest = run_pipeline(model, output_dir=root / "out", state_dir=root / "state",
                            options=TuningOptions(trials=8, cost_model="random", trials_per_iter=8,
                                                  population=64, timing_repeats=3))
    done = subprocess.run([CLI, "bundle", manifest.artifact_dir, "--out", str(root / "bundle")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    moved = shutil.move(root / "bundle", root / "elsewhere" / "served")
    rng = np.random.default_rng(1)
    inputs = [root / "x.npy", root / "s.npy"]
    np.save(inputs[0], rng.standard_normal((2, 16)).astype(np.float32))
    np.save(inputs[1], rng.standard_normal((2, 8)).astype(np.float32))
    return root, Path(moved), manifest, inputs


def _loader(folder: Path, *args: str, env: dict | None = None, cwd: Path = Path("/")) -> subprocess.CompletedProcess:
    return subprocess.run([str(folder / "tcl-run"), str(folder), *args], capture_output=True, text=True,
                          env=env if env is not None else {}, cwd=cwd, timeout=300)


def _onnxruntime_outputs(inputs: list[Path]) -> list[np.ndarray]:
    session = verify.onnxruntime_session(two_in_two_out_model().SerializeToString(), threads=1)
    return session.run(None, {"x": np.load(inputs[0]), "s": np.load(inputs[1])})


def test_the_bundle_runs_with_an_empty_environment_and_matches_onnxruntime(bundled):
    root, folder, manifest, inputs = bundled
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "libtvm_ffi.so", "libtvm_runtime.so", "manifest.json", "model.so", "tcl-run"]
    out = root / "outputs"
    out.mkdir()
    done = _loader(folder, "--inputs", *map(str, inputs), "--outputs", str(out), "--repeat", "3", cwd=root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["outputs"] == 2 and report["median_ms"] > 0
    assert report["threads"] == manifest.threads  # the loader starts TVM on the threads it was tuned on
    for index, expected in enumerate(_onnxruntime_outputs(inputs)):
        got = np.load(out / f"output_{index}.npy")
        np.testing.assert_allclose(got, expected, atol=manifest.verification.atol, rtol=manifest.verification.rtol)


def test_the_bundle_loads_nothing_from_the_python_installation(bundled):
    _, folder, _, _ = bundled
    done = _loader(folder, "--repeat", "1", env={"LD_DEBUG": "libs"})
    assert done.returncode == 0, done.stderr
    loaded = set(re.findall(r"calling init: (\S+)", done.stderr))
    assert {Path(p).name for p in loaded} >= {"libtvm_runtime.so", "libtvm_ffi.so"}
    python_places = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    assert not [p for p in loaded if any(p.startswith(place) for place in python_places)], loaded
    tvm_libraries = [p for p in loaded if Path(p).name.startswith("libtvm")]
    assert all(Path(p).parent.resolve() == folder.resolve() for p in tvm_libraries), tvm_libraries
    ldd = subprocess.run(["ldd", str(folder / "tcl-run")], capture_output=True, text=True, env={}, check=True).stdout
    assert "not found" not in ldd and "site-packages" not in ldd


def test_the_readme_states_what_the_machine_needs(bundled):
    _, folder, manifest, _ = bundled
    readme = (folder / "README.md").read_text()
    needs = required_symbol_versions([folder / "tcl-run", folder / "libtvm_runtime.so"])
    assert f"glibc >= {needs['GLIBC']}" in readme and f"TVM_NUM_THREADS" in readme
    assert "x float32[2, 16]" in readme.replace("`", "") and "C++17" in readme


def test_bad_inputs_and_folders_end_in_one_line(bundled, tmp_path):
    root, folder, _, inputs = bundled
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((3, 16), np.float32))
    for args, reason in [(["--inputs", str(wrong), str(inputs[1])], "wants float32[2x16], the file holds float32[3x16]"),
                         (["--inputs", str(inputs[0])], "takes 2 inputs, 1 files given"),
                         (["--inputs", str(tmp_path / "missing.npy"), str(inputs[1])], "cannot read")]:
        done = _loader(folder, *args)
        assert done.returncode == 1 and reason in done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for artifact, out, reason in [(tmp_path, tmp_path / "b1", "no manifest.json"),
                                  (folder, root, "exists and is not an empty folder")]:
        done = subprocess.run([CLI, "bundle", str(artifact), "--out", str(out)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 1 and reason in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "b1").exists()


def test_the_example_builds_against_the_installed_wheels_and_agrees_with_the_bundle(bundled, tmp_path):
    root, folder, manifest, inputs = bundled
    shutil.copy(EXAMPLE / "Makefile", tmp_path / "Makefile")
    shutil.copy(LOADER_SOURCE, tmp_path / "tcl_run.cc")  # examples/cpp/tcl_run.cc links to it
    assert (EXAMPLE / "tcl_run.cc").resolve() == LOADER_SOURCE.resolve()
    built = subprocess.run(["make", "-C", str(tmp_path), f"PYTHON={sys.executable}"], capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr
    out = tmp_path / "outputs"
    out.mkdir()
    # the example's rpath points into the wheels: it runs on the artifact folder as tune wrote it
    done = subprocess.run([str(tmp_path / "tcl-run"), manifest.artifact_dir, "--inputs", *map(str, inputs),
                           "--outputs", str(out)], capture_output=True, text=True, env={}, timeout=300)
    assert done.returncode == 0, done.stderr
    for index, expected in enumerate(_onnxruntime_outputs(inputs)):
        np.testing.assert_allclose(np.load(out / f"output_{index}.npy"), expected,
                                   atol=manifest.verification.atol, rtol=manifest.verification.rtol)
    assert os.access(tmp_path / "tcl-run", os.X_OK)
