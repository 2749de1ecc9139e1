"""Where a platform's student lives, and which cost model a job gets: the `"auto"` rule.

A student is stored as `<root>/<platform>/student.pt` with its model card `student.json` (and `student.md`) beside it.
Two roots are searched, first hit wins: the daemon's own `state_dir/students` (where continual
distillation promotes new versions, as symlinks into `state_dir/student_versions/`) and the students shipped in this package
(`tcl_core/students/`). Nothing here imports torch; resolving a job's cost model costs a stat
and a hash.

`"auto"` (the default) means the TCL student of the job's platform when there is one, else the
student of the nearest platform in the same CPU family (a znver3 machine takes znver4's), else
TVM's XGBoost. Measured side by side on a znver3 machine, which has no student of its own
(docs/cost_model.md, "A platform with no student"): znver4's student found faster kernels than XGBoost in
three pairs and level ones (within 1%) in the fourth, rocketlake's (another family) lost the ViT block, badly at 64 trials. The family
rule is that evidence, not more: across families "auto" stays with XGBoost. A foreign student
is also the teacher the daemon distils the platform's own student from, once that platform has
measurements (tcl_core/continual.py).
An explicit `"tcl"` takes the nearest platform's student (same target kind, then same core
count, then same CPU family and nearest generation: `nearest_student`), then any stored one,
then an untrained one.
The manifest records which student was used and why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

SHIPPED_ROOT = Path(__file__).parent / "students"
STUDENT_FILE = "student.pt"
CARD_FILE = "student.json"  # the model card train_and_report writes beside the weights


@dataclass(frozen=True)
class StudentRef:
    """One stored student: its file, the platform it was trained on, and a content hash."""

    path: Path
    platform: str
    sha256: str
    shipped: bool  # True: from the package, False: from the daemon's state

    def describe(self) -> dict:
        """What a manifest records about the student a job used."""
        card = self.path.parent / CARD_FILE
        version = None
        if card.is_file():
            try:
                version = json.loads(card.read_text()).get("version")
            except (json.JSONDecodeError, AttributeError):
                version = None
        return {"platform": self.platform, "sha256": self.sha256, "version": version,
                "source": "shipped" if self.shipped else "state", "path": str(self.path)}


@dataclass(frozen=True)
class CostModelChoice:
    """The cost model a job runs with, and why."""

    name: str                 # "tcl", "xgb" or "random": what tcl_core.tuning.make_cost_model gets
    student: StudentRef | None
    reason: str


def student_roots(state_dir: Path | None) -> list[tuple[Path, bool]]:
    """(root, shipped) in search order."""
    roots = [(Path(state_dir) / "students", False)] if state_dir is not None else []
    return roots + [(SHIPPED_ROOT, True)]


def find_student(platform: str, state_dir: Path | None = None) -> StudentRef | None:
    """The student for exactly this platform, or None."""
    for root, shipped in student_roots(state_dir):
        path = root / platform / STUDENT_FILE
        if path.is_file():
            return _ref(path, platform, shipped)
    return None


def _stored(state_dir: Path | None) -> list[tuple[Path, bool]]:
    """(student file, shipped) of every stored student, state before shipped, by platform name."""
    return [(path, shipped) for root, shipped in student_roots(state_dir)
            for path in sorted(root.glob(f"*/{STUDENT_FILE}"))]


def nearest_student(platform: str, state_dir: Path | None = None, *, same_family_only: bool = False) -> StudentRef | None:
    """A student of another platform with the same target kind: same core count first, then the same
    CPU family (`znver3` -> `znver4` before `rocketlake`), nearest generation first, then name order.
    `same_family_only`: only students of the same CPU family (what "auto" takes).

    Platform names read `<kind>-<cpu>-<cores>c-<hash>` (tcl_core.platform.platform_name). The
    family matters: on a znver3 machine the znver4 student guided the ViT block's first 64 trials
    to faster kernels than XGBoost's on both seeds measured, the rocketlake student (first in name
    order) to slower ones (docs/cost_model.md, "A platform with no student").
    """
    kind, cpu, cores = _platform_parts(platform)
    family, generation = _cpu_family(cpu)

    def distance(other: str) -> tuple[bool, bool, float]:
        _, other_cpu, other_cores = _platform_parts(other)
        other_family, other_generation = _cpu_family(other_cpu)
        same_family = other_family == family
        gap = (abs(other_generation - generation)
               if same_family and None not in (generation, other_generation) else float("inf"))
        return other_cores != cores, not same_family, gap

    ranked = [(distance(path.parent.name), path, shipped) for path, shipped in _stored(state_dir)
              if path.parent.name != platform and _platform_parts(path.parent.name)[0] == kind]
    if same_family_only:
        ranked = [(key, path, shipped) for key, path, shipped in ranked if not key[1]]  # key[1]: another family
    if not ranked:
        return None
    _, path, shipped = min(ranked, key=lambda entry: entry[0])  # min keeps the first of equals: state before shipped, name order
    return _ref(path, path.parent.name, shipped)


def any_student(state_dir: Path | None = None) -> StudentRef | None:
    """Some stored student (state before shipped): the last resort for an explicit "tcl"."""
    stored = _stored(state_dir)
    if not stored:
        return None
    path, shipped = stored[0]
    return _ref(path, path.parent.name, shipped)


def _platform_parts(platform: str) -> tuple[str, str, str | None]:
    """(kind, cpu, cores) of `<kind>-<cpu>-<cores>c-<hash>`; cpu may itself hold dashes (`x86-64`)."""
    parts = platform.split("-")
    at = next((i for i, part in enumerate(parts[1:], 1) if part.endswith("c") and part[:-1].isdigit()), None)
    if at is None:
        return parts[0], "-".join(parts[1:-1]), None
    return parts[0], "-".join(parts[1:at]), parts[at]


def _cpu_family(cpu: str) -> tuple[str, int | None]:
    """`znver3` -> ("znver", 3); `rocketlake` -> ("rocketlake", None)."""
    family = cpu.rstrip("0123456789")
    return family, int(cpu[len(family):]) if len(family) < len(cpu) else None


def choose_cost_model(requested: str, platform: str, *, state_dir: Path | None = None,
                      student_path: Path | None = None) -> CostModelChoice:
    """Resolve "auto" / "tcl" / "xgb" / "random" (and an explicit student file) for one job."""
    if student_path is not None:
        if requested not in ("auto", "tcl"):
            raise ValueError(f"a student file was given but the cost model is {requested!r}")
        path = Path(student_path)
        if not path.is_file():
            raise FileNotFoundError(f"student file {path} does not exist")
        return CostModelChoice("tcl", _ref(path, "given", shipped=False), f"student file {path}")
    if requested in ("xgb", "random"):
        return CostModelChoice(requested, None, "as configured")
    student = find_student(platform, state_dir)
    passed_over = ""
    if student is not None and not student.shipped and (problem := _unreadable(student.path)):
        # Only the daemon writes state students (and promotes them atomically), so this is a disk
        # fault or a hand edit: fall back to the shipped student, or as if there were none.
        passed_over = f" (the state student {student.path} is unreadable: {problem})"
        student = find_student(platform, None)
    if student is not None:
        return CostModelChoice("tcl", student, f"student trained on this platform ({platform}){passed_over}")
    if requested == "auto":
        kin = nearest_student(platform, state_dir, same_family_only=True)
        if kin is not None:
            return CostModelChoice("tcl", kin, f"no student for {platform} yet; the nearest of its CPU family's: "
                                               f"{kin.platform}{passed_over}")
        return CostModelChoice("xgb", None, f"no student trained on platform {platform} "
                                            f"or on one of its CPU family yet{passed_over}")
    near = nearest_student(platform, state_dir)
    if near is not None:
        return CostModelChoice("tcl", near, f"no student for {platform}; nearest platform's: {near.platform}")
    fallback = any_student(state_dir)
    if fallback is None:
        return CostModelChoice("tcl", None, "no student stored anywhere: an untrained one learns in the job")
    return CostModelChoice("tcl", fallback, f"no student for {platform}; using {fallback.platform}'s")


def _unreadable(path: Path) -> str | None:
    """Why the student file at `path` cannot be loaded, or None. Imports torch (the tuning child only)."""
    from tcl_core.student import load_student

    try:
        load_student(path)
    except Exception as err:  # a truncated zip, a foreign file, a config that no longer fits
        return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
    return None


def _ref(path: Path, platform: str, shipped: bool) -> StudentRef:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return StudentRef(path=path, platform=platform, sha256=digest, shipped=shipped)
