"""Which student (and which cost model) a job gets: exact platform, nearest platform, fallbacks."""

import json

import pytest

from tcl_core import students


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    monkeypatch.setattr(students, "SHIPPED_ROOT", root)
    return root


def _store(root, platform, payload=b"weights", version=None):
    folder = root / platform
    folder.mkdir(parents=True)
    (folder / students.STUDENT_FILE).write_bytes(payload)
    if version is not None:
        (folder / students.CARD_FILE).write_text(json.dumps({"version": version}))
    return folder / students.STUDENT_FILE


def _student_bytes(tmp_path) -> bytes:
    """A real (tiny, untrained) student file's bytes: state students are loaded before use."""
    from tcl_core.student import Student, StudentConfig, save_student

    save_student(Student(StudentConfig(feature_dim=4, d_model=8, n_layers=1)), tmp_path / "tiny.pt")
    return (tmp_path / "tiny.pt").read_bytes()


def test_auto_takes_this_platforms_student_state_before_shipped(tmp_path, shipped):
    _store(shipped, "llvm-znver5-2c-aaaa", b"shipped")
    state_file = _store(tmp_path / "state" / "students", "llvm-znver5-2c-aaaa", _student_bytes(tmp_path), version=3)
    choice = students.choose_cost_model("auto", "llvm-znver5-2c-aaaa", state_dir=tmp_path / "state")
    assert choice.name == "tcl" and choice.student.path == state_file and not choice.student.shipped
    described = choice.student.describe()
    assert described["version"] == 3 and described["source"] == "state" and len(described["sha256"]) == 64


def test_an_unreadable_state_student_is_passed_over_with_the_reason(tmp_path, shipped):
    shipped_file = _store(shipped, "llvm-znver5-2c-aaaa", b"shipped")
    _store(tmp_path / "state" / "students", "llvm-znver5-2c-aaaa", b"half-written")
    _store(tmp_path / "state" / "students", "llvm-icelake-2c-dddd", b"\x00" * 64)
    choice = students.choose_cost_model("auto", "llvm-znver5-2c-aaaa", state_dir=tmp_path / "state")
    assert choice.name == "tcl" and choice.student.path == shipped_file and "unreadable" in choice.reason
    alone = students.choose_cost_model("auto", "llvm-icelake-2c-dddd", state_dir=tmp_path / "state")
    assert alone.name == "xgb" and alone.student is None and "unreadable" in alone.reason


def test_explicit_tcl_takes_the_nearest_platform_of_the_same_kind(tmp_path, shipped):
    _store(shipped, "cuda-sm_90-bbbb")
    _store(shipped, "llvm-skylake-8c-cccc")
    two_core = _store(shipped, "llvm-znver5-2c-aaaa")
    choice = students.choose_cost_model("tcl", "llvm-znver4-2c-dddd", state_dir=tmp_path)
    assert choice.name == "tcl" and choice.student.path == two_core  # same kind and core count
    assert "nearest" in choice.reason and "llvm-znver5-2c-aaaa" in choice.reason
    gpu = students.choose_cost_model("tcl", "cuda-sm_80-eeee", state_dir=tmp_path)
    assert gpu.student.platform == "cuda-sm_90-bbbb"


def test_the_nearest_student_shares_the_cpu_family_and_is_the_nearest_generation(tmp_path, shipped):
    for platform in ("llvm-rocketlake-2c-aaaa", "llvm-x86-64-2c-bbbb", "llvm-znver5-2c-cccc", "llvm-znver4-8c-dddd"):
        _store(shipped, platform)
    assert students.nearest_student("llvm-znver3-2c-eeee").platform == "llvm-znver5-2c-cccc"  # cores, then family
    _store(shipped, "llvm-znver4-2c-ffff")
    assert students.nearest_student("llvm-znver3-2c-eeee").platform == "llvm-znver4-2c-ffff"  # then generation
    assert students.nearest_student("llvm-icelake-2c-eeee").platform == "llvm-rocketlake-2c-aaaa"  # then name order
    assert students.nearest_student("llvm-x86-64-v3-2c-eeee").platform == "llvm-rocketlake-2c-aaaa"
    state = _store(tmp_path / "state" / "students", "llvm-znver4-2c-9999")
    assert students.nearest_student("llvm-znver3-2c-eeee", tmp_path / "state").path == state  # state before shipped
    assert students.nearest_student("cuda-sm_80-eeee") is None


def test_auto_falls_back_to_xgb_without_a_student_of_this_platform_or_its_cpu_family(tmp_path, shipped):
    _store(shipped, "llvm-rocketlake-2c-aaaa")  # another family's student is not enough for "auto"
    choice = students.choose_cost_model("auto", "llvm-znver3-2c-dddd", state_dir=tmp_path)
    assert choice.name == "xgb" and choice.student is None and "llvm-znver3-2c-dddd" in choice.reason


def test_auto_takes_the_nearest_student_of_the_same_cpu_family(tmp_path, shipped):
    _store(shipped, "llvm-rocketlake-2c-aaaa")
    _store(shipped, "llvm-znver5-2c-bbbb")
    kin = _store(shipped, "llvm-znver4-8c-cccc")  # another core count, but the nearest generation of the family
    choice = students.choose_cost_model("auto", "llvm-znver3-2c-dddd", state_dir=tmp_path)
    assert choice.name == "tcl" and choice.student.path.parent.name == "llvm-znver5-2c-bbbb"  # same cores first
    (shipped / "llvm-znver5-2c-bbbb" / students.STUDENT_FILE).unlink()
    choice = students.choose_cost_model("auto", "llvm-znver3-2c-dddd", state_dir=tmp_path)
    assert choice.student.path == kin and "CPU family" in choice.reason and "llvm-znver4-8c-cccc" in choice.reason
    near = students.choose_cost_model("tcl", "llvm-znver3-2c-dddd", state_dir=tmp_path)
    assert near.student.platform == "llvm-rocketlake-2c-aaaa"  # an explicit "tcl" takes the same core count first


def test_explicit_tcl_uses_any_student_then_an_untrained_one(tmp_path, shipped):
    _store(shipped, "cuda-sm_90-bbbb")
    assert students.choose_cost_model("tcl", "llvm-x86-64-1c-ffff").student.platform == "cuda-sm_90-bbbb"
    (shipped / "cuda-sm_90-bbbb" / students.STUDENT_FILE).unlink()
    untrained = students.choose_cost_model("tcl", "llvm-x86-64-1c-ffff")
    assert untrained.name == "tcl" and untrained.student is None and "untrained" in untrained.reason


def test_xgb_and_random_ignore_students(shipped):
    _store(shipped, "llvm-znver5-2c-aaaa")
    for name in ("xgb", "random"):
        choice = students.choose_cost_model(name, "llvm-znver5-2c-aaaa")
        assert choice.name == name and choice.student is None


def test_an_explicit_student_file_wins_and_is_checked(tmp_path, shipped):
    given = tmp_path / "mine.pt"
    given.write_bytes(b"x")
    choice = students.choose_cost_model("auto", "llvm-znver5-2c-aaaa", student_path=given)
    assert choice.name == "tcl" and choice.student.path == given
    with pytest.raises(FileNotFoundError, match="does not exist"):
        students.choose_cost_model("tcl", "p", student_path=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="xgb"):
        students.choose_cost_model("xgb", "p", student_path=given)


def test_the_shipped_student_loads_and_still_ranks_its_held_out_data():
    """Guards the committed weights against drift in the features or the architecture."""
    from pathlib import Path

    from tcl_core.evaluate import evaluate
    from tcl_core.features import TRACE_FEATURE_DIM
    from tcl_core.records import card_weights, load_task_records
    from tcl_core.student import load_student

    shipped = sorted(students.SHIPPED_ROOT.glob(f"*/{students.STUDENT_FILE}"))
    assert shipped, "no default student ships"
    for path in shipped:
        card = json.loads((path.parent / students.CARD_FILE).read_text())
        assert card["platform"] == path.parent.name and card["version"] >= 1
        assert path.stat().st_size < 10 * 1024 * 1024
        student = load_student(path)
        assert student.config.feature_dim == TRACE_FEATURE_DIM
        held_out = Path(__file__).resolve().parents[1] / "data" / card["platform"] / "vit_block"
        tasks = load_task_records(held_out, weights=card_weights(held_out))
        report = evaluate(student, tasks)
        # a student whose weights no longer fit the features ranks like random (pairwise 0.5); the
        # x86-64 held-out block has little spread (random top-1 0.62), hence a relative margin
        assert report["top1"] > report["random_top1"] + 0.1 * (1 - report["random_top1"]), report
        assert report["pairwise_accuracy"] > 0.55, report
