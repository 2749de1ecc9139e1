"""The atomic emit: a reader sees no artifact or a whole one, and stale staging folders go away."""

from __future__ import annotations

import stat
import subprocess
import sys

from deploy.artifact import Latency, Manifest, TensorInfo, Verification, emit, staging_dir_for


def _manifest(output_dir, note: str) -> Manifest:
    return Manifest(
        name="m", sha256="ab" * 32, source=note, artifact_dir=str(output_dir / "m-abababab"),
        inputs=[TensorInfo(name="x", shape=[1], dtype="float32")], outputs=[], target={"kind": "llvm"},
        platform="p", tvm_version="0", cost_model="xgb", trials=0, trials_measured=0, tasks=1, tasks_reused=0,
        tuning_seconds=0.0, verification=Verification(max_abs_err=0, max_rel_err=0, atol=0, rtol=0, passed=True),
        latency_ms=Latency(tvm=1, untuned=2, onnxruntime=3), created_at="now",
    )


def test_emit_renames_a_complete_folder_into_place_and_replaces_an_old_one(tmp_path):
    for note in ("first", "second"):
        staging = staging_dir_for(tmp_path)
        (staging / "model.so").write_bytes(note.encode())
        final = emit(staging, tmp_path, _manifest(tmp_path, note))
    assert final == tmp_path / "m-abababab"
    assert (final / "model.so").read_bytes() == b"second"
    assert Manifest.model_validate_json((final / "manifest.json").read_text()).source == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["m-abababab"]
    assert stat.S_IMODE(final.stat().st_mode) == 0o750  # the daemon's group reads artifacts, others do not
    assert {stat.S_IMODE(p.stat().st_mode) for p in final.iterdir()} == {0o640}


def test_staging_folders_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".staging-{dead.stdout.strip()}-abc"
    stale.mkdir()
    (stale / "model.so").write_bytes(b"half")
    replaced = tmp_path / f".tiny-0123abcd.old-{dead.stdout.strip()}"  # killed between emit's two renames
    replaced.mkdir()
    mine = staging_dir_for(tmp_path)
    assert not stale.exists() and not replaced.exists() and mine.exists()
    again = staging_dir_for(tmp_path)  # our own (live) staging folder is left alone
    assert mine.exists() and again.exists()
