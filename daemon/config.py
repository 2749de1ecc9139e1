"""The daemon's one configuration object: a TOML file, overridden by TCL_TUNED_* environment variables.

Precedence, first wins: TCL_TUNED_* environment, the TOML file, the defaults below. Nested keys of
the `[tuning]` table use `__`: `TCL_TUNED_TUNING__TRIALS=8`; `TCL_TUNED_TUNING__TARGET` takes JSON.
The object is loaded and validated once, at start-up (`load_config`), then passed down.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from deploy.options import RunnerOptions, TuningOptions
from tcl_core.continual import RoundSettings

ENV_PREFIX = "TCL_TUNED_"
DEFAULT_STATE_DIR = Path("/var/lib/tcl-tuned")  # systemd's StateDirectory=tcl-tuned


class ConfigError(Exception):
    """The configuration cannot be used; str(err) is a message for a person, not a traceback."""


class DistillSettings(BaseModel):
    """The `[distill]` table: when the daemon distils a new student from its own measurements."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="run rounds automatically when idle")
    min_new_records: int = Field(256, ge=1, description="new measurements of a platform that start a round")
    steps: int = Field(300, ge=1, description="training steps per round")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate")
    alpha: float = Field(0.1, ge=0, description="weight of the distillation term (0: plain fine-tuning)")
    tolerance: float = Field(0.0, ge=0, description="promote if validation top-1 >= incumbent's - tolerance")
    daily_at: dt.time | None = Field(
        None, description='local time "HH:MM": each day once the clock passes it, every platform with any new '
                          "measurements gets a round at the next idle moment, min_new_records or not")

    @field_validator("daily_at", mode="before")
    @classmethod
    def _hh_mm(cls, value: object) -> object:
        """Parse "HH:MM" here, once; a TOML local time (`daily_at = 03:00`) arrives as a time already."""
        if isinstance(value, str):
            hours, sep, minutes = value.partition(":")
            if not (sep and hours.isdigit() and minutes.isdigit() and len(minutes) == 2
                    and int(hours) < 24 and int(minutes) < 60):
                raise ValueError(f'daily_at must be a 24-hour local time "HH:MM", got {value!r}')
            return dt.time(int(hours), int(minutes))
        return value

    def round_settings(self, *, steps: int | None = None) -> RoundSettings:
        """What one round (tcl_core.continual.run_round) trains with; `steps` overrides the table's."""
        return RoundSettings(steps=steps or self.steps, lr=self.lr, alpha=self.alpha, tolerance=self.tolerance)


class DaemonConfig(BaseSettings):
    """Where the daemon reads, writes and keeps state, how it tunes, and its timing knobs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    watch_dir: Path = Field(Path("/srv/tcl-tuned/watch"), description="models are dropped here (read only)")
    output_dir: Path = Field(Path("/srv/tcl-tuned/out"), description="artifacts land in <stem>-<sha8>/ here")
    state_dir: Path = Field(DEFAULT_STATE_DIR, description="job queue and tuning database")
    status_file: Path = Field(..., description="JSON status file; defaults to <state_dir>/status.json")
    tuning: TuningOptions = Field(default_factory=TuningOptions, description="the [tuning] table")
    distill: DistillSettings = Field(default_factory=DistillSettings, description="the [distill] table")
    runner: RunnerOptions = Field(default_factory=RunnerOptions, description="the [runner] table: where to measure")

    settle_seconds: float = Field(2.0, gt=0, description="size+mtime unchanged this long = complete (scan, polling)")
    heartbeat_seconds: float = Field(10.0, gt=0, description="status file rewritten at least this often")
    force_polling: bool = Field(False, description="use the polling observer even where inotify works")
    poll_interval_seconds: float = Field(1.0, gt=0, description="how often the polling observer looks")
    tick_seconds: float = Field(0.2, gt=0, description="pause between main-loop steps")
    stop_grace_seconds: float = Field(5.0, ge=0, description="SIGTERM to a running job, then SIGKILL after this")
    job_timeout_seconds: float = Field(43200.0, ge=0, description="a job running longer is stopped and failed; 0: no limit")

    @field_validator("watch_dir", "output_dir", "state_dir", "status_file")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        # Relative paths are read against the working directory once, here, so the worker child
        # and the status file see the same absolute folders whatever happens to the cwd later.
        return path.absolute()

    @model_validator(mode="after")
    def _runner_is_top_level(self) -> DaemonConfig:
        # TuningOptions carries the runner to the pipeline; in the daemon's file it is [runner].
        if self.tuning.runner != RunnerOptions():
            raise ValueError("put the runner in the top-level [runner] table, not [tuning.runner]")
        return self

    @model_validator(mode="before")
    @classmethod
    def _status_file_defaults_into_state_dir(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("status_file") is None:
            state_dir = data.get("state_dir", DEFAULT_STATE_DIR)
            data = {**data, "status_file": Path(state_dir) / "status.json"}
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit arguments, then TCL_TUNED_* env, then the TOML file named by `toml_file` (see load_config)."""
        # No .env or secrets dir: a daemon's config should come from one file a person can read.
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def load_config(path: Path) -> DaemonConfig:
    """Read `path` (TOML), apply TCL_TUNED_* overrides, validate; raise ConfigError with a readable reason."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist or is not a file")
    try:
        tomllib.loads(path.read_text())  # parse once here so a syntax error names the file and line
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"config file {path} cannot be read as TOML: {err}") from None

    # The TOML path is only known at run time, so bind it in a throw-away subclass ...
    bound = type("DaemonConfigFromFile", (DaemonConfig,), {"model_config": SettingsConfigDict(toml_file=path)})
    try:
        loaded = bound()
    except ValidationError as err:
        raise ConfigError(_describe(err, path)) from None
    # ... and hand back a plain DaemonConfig, so the value compares and pickles like any other.
    return DaemonConfig.model_validate(loaded.model_dump())


def _describe(err: ValidationError, path: Path) -> str:
    lines = [f"invalid config (from {path} and {ENV_PREFIX}* environment variables):"]
    for problem in err.errors():
        key = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        env_name = ENV_PREFIX + "__".join(str(part) for part in problem["loc"]).upper()
        got = f" (got {problem['input']!r})" if problem["type"] != "missing" else ""
        lines.append(f"  {key}: {problem['msg']}{got}  [env: {env_name}]")
    return "\n".join(lines)
