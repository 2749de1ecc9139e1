"""Typed options for one model's pipeline, shared by the CLI and the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# "auto" is resolved per job by tcl_core.students.choose_cost_model: the TCL student stored for the
# job's platform, else the nearest one of the same CPU family, else XGBoost. The rest are mapped in tcl_core.tuning.make_cost_model.
CostModelName = Literal["auto", "tcl", "xgb", "random"]

Stage = Literal["queued", "tuning", "building", "verifying", "done", "failed"]


class IntakeLimits(BaseModel):
    """What a dropped model may cost before anything is tuned (`[tuning.limits]`): refused beyond these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_mb: float = Field(2048, gt=0, description="model file plus its external data, MiB")
    max_input_mb: float = Field(1024, gt=0, description="any one input tensor at its resolved shape, MiB")


class RunnerOptions(BaseModel):
    """Where candidates are measured (the daemon's `[runner]` table): here, or on a TVM RPC tuning farm.

    With "rpc", builds still happen on this machine; each candidate is measured on a device the
    tracker hands out for `device_key` (the key the RPC servers registered with). Each device
    key is its own platform: its own tuning database and student.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["local", "rpc"] = "local"
    tracker_host: str = Field("127.0.0.1", description="the RPC tracker (python -m tvm.exec.rpc_tracker)")
    tracker_port: int = Field(9190, ge=1, le=65535)
    device_key: str | None = Field(None, pattern=r"^[A-Za-z0-9_.]+$", description="the servers' --key (rpc)")
    session_timeout_seconds: int = Field(30, ge=1, description="one measurement's RPC session, then it fails")
    parallelism: int = Field(1, ge=1, description="candidates measured at once, one device each")

    @model_validator(mode="after")
    def _rpc_needs_a_key(self) -> RunnerOptions:
        if self.kind == "rpc" and not self.device_key:
            raise ValueError("runner kind 'rpc' needs device_key (the key the RPC servers registered with)")
        return self

    def describe(self) -> dict[str, Any]:
        """What the manifest records: the runner, and for rpc the tracker and device key."""
        if self.kind == "local":
            return {"kind": "local"}
        return {"kind": "rpc", "tracker": f"{self.tracker_host}:{self.tracker_port}", "device_key": self.device_key}


def parse_duration(value: object) -> object:
    """"20m" / "1h" / "90s" / "1h30m" -> seconds; numbers pass through; anything else is left for pydantic to refuse."""
    if not isinstance(value, str):
        return value
    import re

    text = value.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|s)", text)
    if not parts or re.sub(r"\d+(?:\.\d+)?\s*[hms]", "", text).strip():
        raise ValueError(f"{value!r} is not a duration (write 20m, 1h, 90s or 1h30m)")
    return sum(float(number) * {"h": 3600, "m": 60, "s": 1}[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """Seconds as a person reads an ETA, in parse_duration's units: "45s", "7m", "1h30m"."""
    if seconds < 59.5:
        return f"{max(seconds, 0):.0f}s"
    minutes = round(seconds / 60)
    return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m".replace("h00m", "h")


class TuningOptions(BaseModel):
    """How one model is tuned, built and verified (the `[tuning]` table of the daemon config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("time_budget", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value)

    trials: int | None = Field(None, ge=0, description=(
        "measured candidates over all tasks; 0 builds untuned; None (the default): `rounds_per_task` "
        "search rounds for every task to tune, so no task is left on TVM's default schedule"))
    rounds_per_task: int = Field(2, ge=1, description="with trials unset: search rounds of trials_per_iter per task")
    target: dict[str, Any] | None = Field(None, description="TVM target dict; None means this host's CPU")
    cost_model: CostModelName = "auto"
    student: Path | None = Field(None, description="student file for \"tcl\"; None: the platform's stored one")
    trials_per_iter: int = Field(16, ge=1, description="candidates measured per search round")
    population: int = Field(256, ge=8, description=(
        "evolutionary-search population per round; the search is half of a run's time, and 512 (TVM's "
        "default) measured 20 trials a minute against 33 at 256 with no better result (docs/performance.md, item 12)"))
    rdu_fraction: float = Field(0.0, ge=0, le=1, description=(
        "share of each measured batch the RDU sampler picks among the search's proposals (\"tcl\" only)"))
    explore: float | None = Field(None, ge=0, le=1, description=(
        "share of each measured batch drawn at random from the design space instead of the cost model's "
        "best picks (MetaSchedule's eps-greedy, rounded down); None: 0.25 with \"tcl\", TVM's 0.05 otherwise"))
    fast_math: bool = Field(True, description=(
        "TVM's polynomial erf / exp / tanh / softmax (vectorisable) in place of libm's scalar calls; "
        "verified against onnxruntime like everything else"))
    pack_weights: bool = Field(True, description=(
        "tune a packed layout for constant weights and fold the packing into the library at build time"))
    conv_layout: Literal["NCHW", "NHWC"] = Field("NHWC", description=(
        "layout 2-D convolutions are tuned and built in; NHWC measured 1.6-1.8x faster on MobileNetV2 "
        "and the ViT block (README, 'What makes the library fast')"))
    time_budget: float | None = Field(1800.0, gt=0, description=(
        "seconds of tuning at most, on top of `trials` (\"20m\", \"1h\", \"90s\" or a number of seconds; "
        "default 30 minutes); the search stops after the batch that crosses it"))
    patience_rounds: int | None = Field(3, ge=1, description=(
        "stop once this many rounds per task in a row improved no task's best time by 1% (further search "
        "is unlikely to pay); None: search until the trials or the time budget run out"))
    warm_start: int = Field(4, ge=0, description=(
        "with \"tcl\": a task with no record of its own first measures this many schedules of the most similar "
        "workloads already tuned on this platform (same anchor operator, nearest shapes), replayed onto it and "
        "ranked by the student; the search then starts from them. On top of `trials`, within `time_budget`. "
        "0 turns it off (MetaSchedule reuses exact matches only)"))
    flush_caches: bool = Field(False, description=(
        "time candidates run by run with their weights flushed from the CPU caches, as in a run of the "
        "whole model, instead of back to back with everything hot (MetaSchedule's default)"))
    threads: int | None = Field(None, ge=1, description=(
        "TVM threads for measuring candidates, verifying and timing (onnxruntime gets as many); "
        "None: the target's num-cores"))
    atol: float = Field(1e-4, ge=0, description="absolute tolerance against onnxruntime")
    rtol: float = Field(1e-3, ge=0, description="relative tolerance against onnxruntime")
    timing_repeats: int = Field(30, ge=1, description="timed runs per engine; the median is reported")
    seed: int = 0
    limits: IntakeLimits = Field(default_factory=IntakeLimits)
    runner: RunnerOptions = Field(default_factory=RunnerOptions, description="the daemon's [runner] table")

    @property
    def lowering(self) -> dict[str, Any]:
        """The options that change the tuned workloads (tcl_core.tvm_api.lower_for_tuning's keywords)."""
        return {"fast_math": self.fast_math, "pack_weights": self.pack_weights, "conv_layout": self.conv_layout}


class Progress(BaseModel):
    """One progress report from a running pipeline."""

    model_config = ConfigDict(frozen=True)

    stage: Stage
    trials_done: int = 0
    trials_total: int = 0
    warning: str | None = None  # set once, when the tasks are known: the budget cannot reach them all
    # From the first measured batch on (deploy.progress): the tuner's estimate of one run of the model
    # (weight x best time per task, in ms; None until every task has a measured candidate), measured
    # trials per minute of tuning, and seconds until the trials or the time budget run out.
    best_estimate_ms: float | None = None
    trials_per_minute: float | None = None
    eta_seconds: float | None = None  # tuning only; None once it ends
