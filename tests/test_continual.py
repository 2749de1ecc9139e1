"""One distillation round on a database measured here, and the daemon's feedback loop around it.

Real MetaSchedule measurements, real students, real child processes; budgets are tiny.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from daemon.config import DistillSettings
from daemon.platforms import summarise
from daemon.status import read_status
from deploy.layout import database_dir
from deploy.options import TuningOptions
from tcl_core.continual import RoundSettings, history, run_round, versions_dir
from tcl_core.students import choose_cost_model, find_student
from tcl_core.zoo import export_onnx
from tests.models import tiny_mlp_onnx
from tests.waiting import step_until
from tests.zoo_models import TWO_TASKS

PLATFORM = "llvm-testcpu-1c-00000000"  # same kind and core count as nothing shipped: the teacher is the nearest
QUICK = RoundSettings(steps=20)


def _state(tmp_path: Path, measured: Path) -> Path:
    state = tmp_path / "state"
    shutil.copytree(measured, database_dir(state, PLATFORM))
    return state


def test_round_promotes_a_version_that_auto_then_uses(tmp_path, measured):
    state = _state(tmp_path, measured)
    assert choose_cost_model("auto", PLATFORM, state_dir=state).name == "xgb"
    result = run_round(PLATFORM, database_dir(state, PLATFORM), state, RoundSettings(steps=20, tolerance=1.0),
                       log=lambda _: None)
    assert result.decision == "promoted", result.reason
    assert result.version == 1 and result.teacher["source"] == "shipped"  # the nearest platform's student taught
    assert result.train_tasks >= 1 and result.validation_tasks >= 1
    assert 0 < result.candidate_top1 <= 1 and 0 < result.incumbent_top1 <= 1
    student = find_student(PLATFORM, state)
    assert student is not None and not student.shipped and student.describe()["version"] == 1
    assert (state / "students" / PLATFORM).is_symlink()
    choice = choose_cost_model("auto", PLATFORM, state_dir=state)
    assert choice.name == "tcl" and choice.student.path.resolve() == (versions_dir(state, PLATFORM) / "v1" / "student.pt")
    again = run_round(PLATFORM, database_dir(state, PLATFORM), state, RoundSettings(steps=20, tolerance=1.0),
                      log=lambda _: None)
    assert again.version == 2 and again.teacher["version"] == 1 and again.teacher["source"] == "state"
    assert [r["version"] for r in history(state, PLATFORM)] == [1, 2]
    entry = summarise(state, PLATFORM)
    assert entry.student_version == 2 and entry.records_since_round == 0 and entry.last_round.decision == "promoted"
    assert entry.records == sum(1 for _ in (measured / "database_tuning_record.json").open())


def test_a_worse_candidate_is_rejected_with_its_reason_and_nothing_moves(tmp_path, measured):
    state = _state(tmp_path, measured)
    run_round(PLATFORM, database_dir(state, PLATFORM), state, RoundSettings(steps=20, tolerance=1.0), log=lambda _: None)
    before = find_student(PLATFORM, state)
    # a bar no candidate can pass: top-1 must beat the incumbent's by 2
    result = run_round(PLATFORM, database_dir(state, PLATFORM), state, RoundSettings(steps=20, tolerance=-2.0),
                       log=lambda _: None)
    assert result.decision == "rejected" and "< incumbent's" in result.reason
    assert (versions_dir(state, PLATFORM) / "v2" / "student.pt").is_file()  # kept for inspection
    after = find_student(PLATFORM, state)
    assert after.sha256 == before.sha256 and after.describe()["version"] == 1
    assert history(state, PLATFORM)[-1]["decision"] == "rejected"


def test_too_little_data_is_skipped_with_a_reason(tmp_path, measured):
    state = tmp_path / "state"
    database = database_dir(state, PLATFORM)
    database.mkdir(parents=True)
    shutil.copy(measured / "database_workload.json", database)
    first = (measured / "database_tuning_record.json").read_text().splitlines()[0]
    (database / "database_tuning_record.json").write_text(first + "\n")
    result = run_round(PLATFORM, database, state, QUICK, log=lambda _: None)
    assert result.decision == "skipped" and "a round needs 2" in result.reason
    assert find_student(PLATFORM, state) is None


def test_cli_distill_runs_a_round(tmp_path, measured):
    import subprocess
    import sys

    state = _state(tmp_path, measured)
    cli = Path(sys.executable).parent / "tcl-tuned"
    done = subprocess.run([str(cli), "distill", "--platform", PLATFORM, "--state-dir", str(state), "--steps", "10"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["decision"] in ("promoted", "rejected")
    listed = subprocess.run([str(cli), "platforms", "--state-dir", str(state), "--json"],
                            capture_output=True, text=True, timeout=60)
    names = {entry["name"]: entry for entry in json.loads(listed.stdout)}
    assert names[PLATFORM]["last_round"]["decision"] in ("promoted", "rejected")
    assert any(entry["student_source"] == "shipped" for entry in names.values())
    missing = subprocess.run([str(cli), "distill", "--platform", "nowhere", "--state-dir", str(state)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no tuning database" in missing.stderr


def test_daemon_distils_after_a_job_and_the_next_job_uses_the_new_student(daemon_factory, tmp_path):
    tuning = TuningOptions(trials=12, trials_per_iter=4, population=16, timing_repeats=3,
                           target={"kind": "llvm", "num-cores": 1})
    daemon = daemon_factory(pipeline_fn=None, tuning=tuning,
                            distill=DistillSettings(min_new_records=4, steps=20, tolerance=1.0))
    watch, status_file = daemon.config.watch_dir, daemon.config.status_file
    export_onnx(TWO_TASKS, tmp_path / "first.onnx")  # two tasks: a round needs two to rank and validate on
    os.rename(tmp_path / "first.onnx", watch / "first.onnx")
    seen_distilling = []

    def round_done() -> bool:
        status = read_status(status_file)  # the daemon answers throughout: the file always parses
        seen_distilling.append(any(p.distilling for p in status.platforms))
        return any(p.last_round is not None for p in status.platforms)

    step_until(daemon, round_done, timeout=240, what="a distillation round after the first job")
    platform = read_status(status_file).platforms[0]
    assert platform.last_round.decision == "promoted", platform.last_round.reason
    assert platform.student_version == 1 and platform.student_source == "state" and any(seen_distilling)
    os.rename(tiny_mlp_onnx(tmp_path / "second.onnx"), watch / "second.onnx")
    step_until(daemon, lambda: {m.name: m.state for m in read_status(status_file).models}.get("second")
               in ("done", "failed"), timeout=240, what="the second job")
    second = next(m for m in read_status(status_file).models if m.name == "second")
    assert second.state == "done", second.error
    manifest = json.loads((Path(second.artifact_dir) / "manifest.json").read_text())
    assert manifest["cost_model"] == "tcl" and manifest["student"]["source"] == "state"
    assert manifest["student"]["version"] == 1 and manifest["platform"] == platform.name


def test_sigkill_of_the_daemon_during_a_round_leaves_no_half_version_and_a_restart_redoes_it(tmp_path, measured):
    import signal
    import subprocess
    import sys

    import psutil

    from tests.waiting import wait_gone, wait_until

    state = _state(tmp_path, measured)
    config = tmp_path / "config.toml"
    config.write_text(f'watch_dir = "{tmp_path / "watch"}"\noutput_dir = "{tmp_path / "out"}"\n'
                      f'state_dir = "{state}"\nsettle_seconds = 0.3\ntick_seconds = 0.05\n'
                      "[distill]\nmin_new_records = 4\nsteps = 40\ntolerance = 1.0\n")
    command = [sys.executable, "-m", "tests.daemon_entry", str(config)]
    repo = Path(__file__).resolve().parents[1]

    def platform_entry():
        status_file = state / "status.json"
        if not status_file.exists():
            return None
        return next((p for p in read_status(status_file).platforms if p.name == PLATFORM), None)

    killed = subprocess.Popen(command, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (entry := platform_entry()) is not None and entry.distilling, timeout=60,
                   what="a round under way")
        round_pids = [child.pid for child in psutil.Process(killed.pid).children()
                      if "spawn_main" in " ".join(child.cmdline())]  # not multiprocessing's resource tracker
        assert len(round_pids) == 1
    finally:
        killed.kill()  # SIGKILL, mid-round
    killed.wait(timeout=30)
    wait_gone(round_pids, timeout=10)  # the round went with the daemon
    assert history(state, PLATFORM) == []  # the killed round decided nothing
    assert not (state / "students" / PLATFORM).exists()  # and promoted nothing

    restarted = subprocess.Popen(command, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        entry = wait_until(lambda: (e := platform_entry()) is not None and e.last_round is not None and e,
                           timeout=240, what="the round redone after the restart")
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)
    finally:
        restarted.kill()
    assert entry.last_round.decision == "promoted", entry.last_round.reason
    assert [row["decision"] for row in history(state, PLATFORM)] == ["promoted"]
    folders = sorted(path.name for path in versions_dir(state, PLATFORM).iterdir())
    assert folders == ["history.jsonl", "v1"]  # no half-made version left beside the promoted one
    assert (versions_dir(state, PLATFORM) / "v1" / "student.pt").stat().st_size > 0


def test_daily_at_waives_min_new_records_once_the_local_clock_passes_it(tmp_path, measured, daemon_config):
    """Below the threshold nothing runs until daily_at; then a round for the new data, then nothing more."""
    from datetime import datetime, timedelta

    from daemon.main import Daemon
    from daemon.worker import Worker
    from tests import child_targets

    state = _state(tmp_path, measured)
    before = datetime(2026, 12, 3, 2, 58)  # local time, as daily_at is
    clock = [before.timestamp()]
    config = daemon_config(state_dir=state, status_file=state / "status.json",
                           distill=DistillSettings(min_new_records=10**6, daily_at="03:00", steps=20, tolerance=1.0))
    daemon = Daemon(config, worker=Worker(pipeline_fn=child_targets.fake_pipeline), clock=lambda: clock[0])
    daemon.start()
    try:
        for minutes in (0, 1, 1.9):  # 02:58 to 02:59:54: not yet
            clock[0] = (before + timedelta(minutes=minutes)).timestamp()
            daemon.step()
            assert daemon.distiller.running_platform is None
        clock[0] = (before + timedelta(minutes=2, seconds=1)).timestamp()  # 03:00:01
        daemon.step()
        assert daemon.distiller.running_platform == PLATFORM
        step_until(daemon, lambda: daemon.distiller.running_platform is None, timeout=240, what="the scheduled round")
        entry = summarise(state, PLATFORM)
        assert entry.last_round is not None and entry.last_round.decision == "promoted", entry.last_round
        assert entry.records_since_round == 0
        for hours in (1, 2, 20):  # the same day: nothing new to learn from, so no second round
            clock[0] = (before + timedelta(hours=hours)).timestamp()
            daemon.step()
            assert daemon.distiller.running_platform is None
        assert [row["decision"] for row in history(state, PLATFORM)] == ["promoted"]
    finally:
        daemon.shutdown()
