"""Progress a person can read while a model is tuned: the best estimate so far, trials per minute, an ETA."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from deploy.options import Progress, Stage, format_duration

if TYPE_CHECKING:
    from tcl_core.tvm_api import TuningProgress


class TuningMeter:
    """Turns the search's report after each measured batch into a `Progress`; its clock starts with the meter.

    `reused_ms`: the share of the estimate from the tasks the database already had, which are not
    searched again (deploy.tune.estimate_ms over them; 0 when there are none). When one of them
    has no record that ran, it is None and so is every estimate: the model's cannot be known.
    """

    def __init__(self, *, trials_total: int, time_budget: float | None, reused_ms: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.trials_total = trials_total
        self.time_budget = time_budget
        self.reused_ms = reused_ms
        self._clock = clock
        self._started = clock()
        self.last: Progress | None = None

    def report(self, measured: TuningProgress) -> Progress:
        """Trials per minute since the start; ETA: the sooner of the trials left at that rate and the time budget left.

        The ETA is an upper bound: the search also stops once it converges (`patience_rounds`).
        """
        elapsed = max(self._clock() - self._started, 1e-6)
        rate = measured.trials * 60 / elapsed
        total = self.trials_total + measured.extra_trials  # warm-start trials come on top of the budget
        left = [] if rate <= 0 else [max(total - measured.trials, 0) * 60 / rate]
        if self.time_budget is not None:
            left.append(max(self.time_budget - elapsed, 0.0))
        estimate = (None if measured.best_estimate_ms is None or self.reused_ms is None
                    else float(f"{measured.best_estimate_ms + self.reused_ms:.4g}"))
        self.last = Progress(stage="tuning", trials_done=measured.trials, trials_total=total,
                             best_estimate_ms=estimate, trials_per_minute=round(rate, 1),
                             eta_seconds=round(min(left)) if left else None)
        return self.last

    def after(self, stage: Stage, trials_done: int) -> Progress:
        """A report for a stage after the search: its last estimate and rate stay, the ETA goes."""
        last = self.last
        return Progress(stage=stage, trials_done=trials_done, trials_total=last.trials_total if last else self.trials_total,
                        best_estimate_ms=last.best_estimate_ms if last else None,
                        trials_per_minute=last.trials_per_minute if last else None)


def progress_line(progress: Progress) -> str:
    """One line for the log: "96/528 trials, best estimate 6.11 ms, 32.9 trials/min, ETA 13m"; unknown parts left out."""
    parts = [f"{progress.trials_done}/{progress.trials_total} trials"]
    if progress.best_estimate_ms is not None:
        parts.append(f"best estimate {progress.best_estimate_ms:.3g} ms")
    if progress.trials_per_minute is not None:
        parts.append(f"{progress.trials_per_minute:.1f} trials/min")
    if progress.eta_seconds is not None:
        parts.append(f"ETA {format_duration(progress.eta_seconds)}")
    return ", ".join(parts)
