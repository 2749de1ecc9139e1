"""Progress while tuning: the rate, the ETA and the estimate a person reads, on a clock the test moves."""

from __future__ import annotations

from deploy.options import format_duration, parse_duration
from deploy.progress import TuningMeter, progress_line
from tcl_core.tvm_api import TuningProgress


def _meter(clock: list[float], **overrides) -> TuningMeter:
    values = dict(trials_total=528, time_budget=1800.0, reused_ms=0.5)
    values.update(overrides)
    return TuningMeter(**values, clock=lambda: clock[0])


def test_rate_and_eta_from_the_trials_left_and_the_estimate_with_the_reused_tasks():
    clock = [100.0]
    meter = _meter(clock)
    clock[0] += 180  # 3 minutes of tuning
    progress = meter.report(TuningProgress(trials=96, best_estimate_ms=5.6))
    assert (progress.stage, progress.trials_done, progress.trials_total) == ("tuning", 96, 528)
    assert progress.trials_per_minute == 32.0 and progress.eta_seconds == 810  # (528 - 96) / 32 minutes
    assert progress.best_estimate_ms == 6.1  # the searched tasks' 5.6 plus the reused ones' 0.5
    assert progress_line(progress) == "96/528 trials, best estimate 6.1 ms, 32.0 trials/min, ETA 14m"


def test_the_time_budget_bounds_the_eta_and_no_estimate_until_every_task_ran():
    clock = [0.0]
    meter = _meter(clock, time_budget=600.0)
    clock[0] = 540.0
    progress = meter.report(TuningProgress(trials=16, best_estimate_ms=None))
    assert progress.eta_seconds == 60 and progress.best_estimate_ms is None  # the budget ends before the trials
    assert progress_line(progress) == "16/528 trials, 1.8 trials/min, ETA 1m"
    clock[0] = 700.0  # past the budget: the batch that crossed it finishes
    assert meter.report(TuningProgress(trials=20, best_estimate_ms=1.0)).eta_seconds == 0


def test_a_reused_task_without_a_working_record_leaves_the_estimate_unknown_and_later_stages_keep_the_rate():
    clock = [0.0]
    meter = _meter(clock, reused_ms=None, time_budget=None)
    assert meter.after("building", 0).trials_per_minute is None  # nothing was measured
    clock[0] = 60.0
    progress = meter.report(TuningProgress(trials=528, best_estimate_ms=2.0))
    assert progress.best_estimate_ms is None and progress.eta_seconds == 0
    building = meter.after("building", 530)
    assert (building.stage, building.trials_done, building.trials_per_minute, building.eta_seconds) == (
        "building", 530, 528.0, None)


def test_warm_start_trials_count_on_top_of_the_planned_total():
    clock = [0.0]
    meter = _meter(clock, trials_total=64, time_budget=None)
    clock[0] = 60.0
    warm = meter.report(TuningProgress(trials=12, best_estimate_ms=None, extra_trials=12))
    assert (warm.trials_done, warm.trials_total, warm.eta_seconds) == (12, 76, 320)  # 64 left at 12/min
    clock[0] = 120.0
    last = meter.report(TuningProgress(trials=76, best_estimate_ms=1.0, extra_trials=12))
    assert (last.trials_done, last.trials_total, last.eta_seconds) == (76, 76, 0)
    assert meter.after("building", 76).trials_total == 76


def test_durations_read_back():
    assert [format_duration(s) for s in (0, 12.4, 59.6, 420, 3600, 5400, 7260)] == [
        "0s", "12s", "1m", "7m", "1h", "1h30m", "2h01m"]
    assert parse_duration(format_duration(5400)) == 5400
