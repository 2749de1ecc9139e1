"""Config: TOML file, TCL_TUNED_* overrides (env > TOML > defaults), and readable errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import ConfigError, DaemonConfig, load_config

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _no_inherited_overrides(monkeypatch):
    # A developer's shell may export TCL_TUNED_*; these tests set exactly what they mean.
    import os

    for name in list(os.environ):
        if name.upper().startswith("TCL_TUNED_"):
            monkeypatch.delenv(name)


def test_toml_values_and_defaults(tmp_path):
    path = _write(tmp_path, f"""
watch_dir = "{tmp_path}/w"
output_dir = "{tmp_path}/o"
state_dir = "{tmp_path}/s"
settle_seconds = 0.5

[tuning]
trials = 8
cost_model = "random"
target = {{ kind = "llvm", num-cores = 2 }}
""")
    cfg = load_config(path)
    assert type(cfg) is DaemonConfig
    assert cfg.watch_dir == tmp_path / "w" and cfg.output_dir == tmp_path / "o"
    assert cfg.status_file == tmp_path / "s" / "status.json"  # defaults into state_dir
    assert cfg.settle_seconds == 0.5 and cfg.heartbeat_seconds == 10.0
    assert cfg.tuning.trials == 8 and cfg.tuning.cost_model == "random"
    assert cfg.tuning.target == {"kind": "llvm", "num-cores": 2}
    assert cfg.tuning.atol == 1e-4  # untouched TuningOptions default


def test_env_overrides_toml_which_overrides_defaults(tmp_path, monkeypatch):
    path = _write(tmp_path, f"""
watch_dir = "{tmp_path}/w"
heartbeat_seconds = 3
[tuning]
trials = 8
cost_model = "random"
""")
    monkeypatch.setenv("TCL_TUNED_WATCH_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("TCL_TUNED_TUNING__TRIALS", "2")
    monkeypatch.setenv("TCL_TUNED_TUNING__TARGET", '{"kind": "llvm", "mcpu": "skylake"}')
    monkeypatch.setenv("TCL_TUNED_STATUS_FILE", str(tmp_path / "st.json"))
    cfg = load_config(path)
    assert cfg.watch_dir == tmp_path / "from-env"  # env beats TOML
    assert cfg.tuning.trials == 2  # nested env beats the TOML table ...
    assert cfg.tuning.cost_model == "random"  # ... and leaves the table's other keys alone
    assert cfg.tuning.target == {"kind": "llvm", "mcpu": "skylake"}  # JSON from env
    assert cfg.heartbeat_seconds == 3  # TOML beats default
    assert cfg.status_file == tmp_path / "st.json"
    assert cfg.output_dir == Path("/srv/tcl-tuned/out")  # default


def test_bad_value_names_key_and_env_var(tmp_path, monkeypatch):
    path = _write(tmp_path, "[tuning]\ntrials = -1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert "tuning.trials" in message and "greater than or equal to 0" in message
    assert "TCL_TUNED_TUNING__TRIALS" in message

    monkeypatch.setenv("TCL_TUNED_SETTLE_SECONDS", "soon")
    with pytest.raises(ConfigError, match="settle_seconds"):
        load_config(_write(tmp_path, ""))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("watch_dri = '/x'\n", "watch_dri: Extra inputs are not permitted"),
        ("[tuning]\ncost_model = 'best'\n", "tuning.cost_model"),
        ("watch_dir = \n", "cannot be read as TOML"),
        ("[distill]\ndaily_at = '25:00'\n", "distill.daily_at"),
        ("[distill]\ndaily_at = '3:0'\n", "HH:MM"),
    ],
)
def test_typos_and_syntax_errors_are_config_errors(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(_write(tmp_path, text))


def test_relative_paths_become_absolute_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(_write(tmp_path, 'watch_dir = "var/watch"\nstate_dir = "var/state"\n'))
    assert cfg.watch_dir == tmp_path / "var" / "watch"
    assert cfg.status_file == tmp_path / "var" / "state" / "status.json"


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_daemon_command_reports_bad_config_without_traceback(tmp_path):
    path = _write(tmp_path, "[tuning]\ntrials = 'many'\n")
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "daemon", "--config", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "tuning.trials" in result.stderr and "TCL_TUNED_TUNING__TRIALS" in result.stderr
    assert "Traceback" not in result.stderr


def test_example_config_in_systemd_folder_loads():
    cfg = load_config(REPO / "systemd" / "config.toml")
    assert cfg.watch_dir == Path("/srv/tcl-tuned/watch")
    assert cfg.state_dir == Path("/var/lib/tcl-tuned")


def test_daily_at_is_a_local_time_of_day(tmp_path):
    from datetime import time

    assert load_config(_write(tmp_path, "[distill]\ndaily_at = '03:30'\n")).distill.daily_at == time(3, 30)
    assert load_config(_write(tmp_path, "[distill]\ndaily_at = 03:30:00\n")).distill.daily_at == time(3, 30)  # a TOML time
    assert load_config(_write(tmp_path, "")).distill.daily_at is None
