"""Typed options for one model's pipeline, shared by the CLI and the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# "auto" is resolved per job by tcl_core.students.choose_cost_model: the TCL student when one is
# stored for the job's platform, else XGBoost. The rest are mapped in tcl_core.tvm_api.make_cost_model.
CostModelName = Literal["auto", "tcl", "xgb", "random"]

Stage = Literal["queued", "tuning", "building", "verifying", "done", "failed"]


class IntakeLimits(BaseModel):
    """What a dropped model may cost before anything is tuned (`[tuning.limits]`): refused beyond these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_mb: float = Field(2048, gt=0, description="model file plus its external data, MiB")
    max_input_mb: float = Field(1024, gt=0, description="any one input tensor at its resolved shape, MiB")


class TuningOptions(BaseModel):
    """How one model is tuned, built and verified (the `[tuning]` table of the daemon config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int = Field(64, ge=0, description="measured candidates over all tasks; 0 builds untuned")
    target: dict[str, Any] | None = Field(None, description="TVM target dict; None means this host's CPU")
    cost_model: CostModelName = "auto"
    student: Path | None = Field(None, description="student file for \"tcl\"; None: the platform's stored one")
    trials_per_iter: int = Field(16, ge=1, description="candidates measured per search round")
    population: int = Field(512, ge=8, description="evolutionary-search population per round")
    rdu_fraction: float = Field(0.0, ge=0, le=1, description=(
        "share of each measured batch the RDU sampler picks among the search's proposals (\"tcl\" only)"))
    atol: float = Field(1e-4, ge=0, description="absolute tolerance against onnxruntime")
    rtol: float = Field(1e-3, ge=0, description="relative tolerance against onnxruntime")
    timing_repeats: int = Field(30, ge=1, description="timed runs per engine; the median is reported")
    seed: int = 0
    limits: IntakeLimits = Field(default_factory=IntakeLimits)


class Progress(BaseModel):
    """One progress report from a running pipeline."""

    model_config = ConfigDict(frozen=True)

    stage: Stage
    trials_done: int = 0
    trials_total: int = 0
