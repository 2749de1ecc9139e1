"""The `tcl-tuned` console script: tune, bundle, daemon, status, platforms, distill, collect, cost-model, example."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import NoReturn, Optional

import rich.progress
import typer
from pydantic import ValidationError
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tcl-tuned"


@app.command()
def tune(
    model: Path = typer.Argument(..., exists=True, dir_okay=False, help="the ONNX file"),
    out: Path = typer.Option(..., "--out", help="output folder; the artifact lands in OUT/<stem>-<sha8>/"),
    trials: Optional[int] = typer.Option(None, "--trials", min=0, help="measured candidates over all tasks (0: untuned)"),
    target: Optional[str] = typer.Option(None, "--target", help='TVM target as JSON, e.g. \'{"kind": "llvm", "num-cores": 2}\''),
    cost_model: Optional[str] = typer.Option(None, "--cost-model", help="auto (default: the TCL student of this platform, else of its CPU family, else xgb), tcl, xgb or random"),
    student: Optional[Path] = typer.Option(None, "--student", dir_okay=False, help="student file for tcl (default: the platform's stored one)"),
    state_dir: Path = typer.Option(_default_state_dir(), "--state-dir", help="where tuning databases live"),
    tracker: Optional[str] = typer.Option(None, "--tracker", help="measure on a tuning farm: the RPC tracker's HOST:PORT"),
    device_key: Optional[str] = typer.Option(None, "--device-key", help="with --tracker: the servers' --key"),
    fast_math: Optional[bool] = typer.Option(None, "--fast-math/--no-fast-math", help="polynomial erf/exp/tanh/softmax (default on)"),
    pack_weights: Optional[bool] = typer.Option(None, "--pack-weights/--no-pack-weights", help="tune and pre-pack weight layouts (default on)"),
    conv_layout: Optional[str] = typer.Option(None, "--conv-layout", help="NHWC (default) or NCHW for 2-D convolutions"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="TVM and onnxruntime threads (default: the target's num-cores)"),
    flush_caches: Optional[bool] = typer.Option(None, "--flush-caches/--no-flush-caches", help="time candidates with their weights flushed from the CPU caches"),
    time_budget: Optional[str] = typer.Option(None, "--time-budget", help="tune for at most this long (20m, 1h, 90s), on top of --trials"),
) -> None:
    """Tune one model without the daemon; exit code 0 only when the artifact verified."""
    from deploy.errors import PipelineError
    from deploy.options import TuningOptions

    overrides: dict = {"trials": trials, "cost_model": cost_model, "student": student, "fast_math": fast_math,
                       "pack_weights": pack_weights, "conv_layout": conv_layout, "threads": threads,
                       "flush_caches": flush_caches, "time_budget": time_budget}
    if tracker is not None or device_key is not None:
        address = _host_port(tracker or "")
        if address is None or device_key is None:
            _fail("a tuning farm needs --tracker HOST:PORT and --device-key KEY")
        overrides["runner"] = {"kind": "rpc", "tracker_host": address[0], "tracker_port": address[1],
                               "device_key": device_key}
    if target is not None:
        try:
            overrides["target"] = json.loads(target)
        except json.JSONDecodeError as err:
            _fail(f"--target is not valid JSON: {err}")
    try:
        options = TuningOptions(**{key: value for key, value in overrides.items() if value is not None})
    except ValidationError as err:
        _fail("; ".join(f"--{'-'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))

    from deploy.pipeline import run_pipeline  # imports TVM (seconds): only once arguments are valid

    with _progress_reporter(model.name) as report:
        try:
            manifest = run_pipeline(model, output_dir=out, state_dir=state_dir, options=options, on_progress=report)
        except PipelineError as err:
            _fail(str(err))
    latency = manifest.latency_ms
    typer.echo(
        f"verified: {manifest.artifact_dir}/model.so  "
        f"(tvm {latency.tvm:.4f} ms, untuned {latency.untuned:.4f} ms, "
        + (f"onnxruntime {latency.onnxruntime:.4f} ms on {manifest.threads} threads each; "
           if latency.onnxruntime is not None else f"on {manifest.threads} threads, checked against {manifest.reference}; ")
        + f"max_abs_err {manifest.verification.max_abs_err:.2g}; {manifest.trials_measured} trials in {manifest.tuning_seconds:.0f} s with {manifest.cost_model}: {manifest.cost_model_reason})"
    )
    for warning in manifest.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if manifest.advice:
        typer.echo(f"advice: {manifest.advice}")
    typer.echo(f"deploy with TVM_NUM_THREADS={manifest.threads} in the serving process's environment "
               "(TVM reads it once, at start; without it TVM runs half the cores on x86)")


@contextlib.contextmanager
def _progress_reporter(label: str):
    """A rich progress bar on a terminal; one plain line per stage change elsewhere (logs, CI)."""
    from deploy.options import format_duration

    console = Console(stderr=True)
    if not console.is_terminal:
        last = [None]

        def report_plain(progress) -> None:
            if progress.warning:
                console.print(f"{label}: warning: {progress.warning}", highlight=False)
            if progress.stage != last[0]:
                console.print(f"{label}: {progress.stage}", highlight=False)
                last[0] = progress.stage

        yield report_plain
        return
    with rich.progress.Progress(
        rich.progress.TextColumn("{task.description}"), rich.progress.BarColumn(),
        rich.progress.MofNCompleteColumn(), rich.progress.TimeElapsedColumn(), console=console,
    ) as bar:
        task = bar.add_task(label, total=None)

        def report(progress) -> None:
            if progress.warning:
                bar.console.print(f"{label}: warning: {progress.warning}", style="yellow", highlight=False)
            known = [] if progress.best_estimate_ms is None else [f"best estimate {progress.best_estimate_ms:.3g} ms"]
            if progress.stage == "tuning" and progress.eta_seconds is not None:
                known.append(f"ETA {format_duration(progress.eta_seconds)}")
            bar.update(task, description=", ".join([f"{label}: {progress.stage}", *known]),
                       completed=progress.trials_done, total=progress.trials_total or None)

        yield report


def _host_port(text: str) -> tuple[str, int] | None:
    """`HOST:PORT` -> (host, port); None when either part is missing or the port is not a number."""
    host, _, port = text.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@app.command()
def bundle(
    artifact_dir: Path = typer.Argument(..., help="an artifact folder (model.so + manifest.json)"),
    out: Path = typer.Option(..., "--out", help="the folder to write (must not exist, or be empty)"),
) -> None:
    """Write a folder that serves the artifact without Python: the library, TVM's runtime, a C++ loader."""
    from deploy.bundle import BundleError
    from deploy.bundle import bundle as write_bundle

    try:
        folder = write_bundle(artifact_dir, out)
    except BundleError as err:
        _fail(str(err))
    typer.echo(f"{folder}: run `{folder}/tcl-run {folder} --inputs ...` (see {folder}/README.md)")


@app.command()
def example(
    name: str = typer.Argument("tiny_cnn", help="tiny_cnn or mlp"),
    out: Path = typer.Option(..., "--out", help="path of the .onnx file to write"),
) -> None:
    """Write one of the built-in example models (no download needed)."""
    from deploy.examples import write_example

    try:
        write_example(name, out)
    except KeyError as err:
        _fail(str(err.args[0]))
    typer.echo(str(out))


@app.command()
def collect(
    out: Path = typer.Option(Path("data"), "--out", help="dataset root; records go to OUT/<platform>/<model>/"),
    models: Optional[list[str]] = typer.Option(None, "--model", help="zoo model (repeatable; default: all); "
                                               "with --bootstrap-from, a model folder of the source"),
    trials_per_task: int = typer.Option(32, "--trials-per-task", min=2, help="candidates measured per task"),
    target: Optional[str] = typer.Option(None, "--target", help="TVM target as JSON (default: this host's CPU)"),
    bootstrap_from: Optional[Path] = typer.Option(
        None, "--bootstrap-from", help="another platform's collected folder: measure here only the RDU picks "
        "among its candidates (--fraction of each task's) instead of searching afresh"),
    fraction: float = typer.Option(0.1, "--fraction", min=0.0, max=1.0, help="with --bootstrap-from"),
    student: Optional[Path] = typer.Option(None, "--student", help="with --bootstrap-from: the student that "
                                           "embeds candidates for RDU (default: the one nearest this platform)"),
) -> None:
    """Measure candidate programs of the model zoo on this platform (resumable) for the cost model.

    The tasks are lowered as jobs tune them (fast math, packed weights, the default convolution
    layout), so the student learns the forms it will rank.
    """
    from tcl_core.zoo import ZOO

    try:
        target_dict = json.loads(target) if target else None
    except json.JSONDecodeError as err:
        _fail(f"--target is not valid JSON: {err}")
    if bootstrap_from is not None:
        _bootstrap(bootstrap_from, out, fraction, student, target_dict, models)
        return

    chosen = models or sorted(ZOO, key=lambda name: (ZOO[name].split != "train", name))
    unknown = [name for name in chosen if name not in ZOO]
    if unknown:
        _fail(f"unknown zoo model(s) {unknown}; choose from {sorted(ZOO)}")
    from deploy.options import TuningOptions
    from tcl_core.collect import collect as run_collect

    try:
        # candidates in the forms jobs tune, so the student learns those
        root = run_collect(out, models=[ZOO[name] for name in chosen], trials_per_task=trials_per_task,
                           target=target_dict, log=lambda line: typer.echo(line, err=True),
                           lowering=TuningOptions().lowering)
    except ValueError as err:
        _fail(str(err))
    typer.echo(str(root / "card.md"))


def _shown(path: Path) -> str:
    """`path` relative to the working directory when under it (cards stay true on another checkout)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _bootstrap(source: Path, out: Path, fraction: float, student_path: Optional[Path],
               target_dict: Optional[dict], models: Optional[list[str]]) -> None:
    """`collect --bootstrap-from`: see tcl_core.bootstrap; `--model` names the source's model folders."""
    if not source.is_dir():
        _fail(f"--bootstrap-from {source}: not a folder")
    from tcl_core import tvm_api
    from tcl_core.bootstrap import bootstrap
    from tcl_core.platform import platform_name
    from tcl_core.student import load_student
    from tcl_core.students import nearest_student

    if student_path is None:
        ref = nearest_student(platform_name(target_dict or tvm_api.host_target_dict(), tvm_api.TVM_VERSION))
        student_path = None if ref is None else ref.path
    try:
        student = load_student(student_path) if student_path is not None else None
        root = bootstrap(source, out, fraction=fraction, student=student,
                         student_name=_shown(student_path) if student_path else "raw features", target=target_dict,
                         models=models, log=lambda line: typer.echo(line, err=True))
    except (OSError, ValueError) as err:
        _fail(str(err))
    typer.echo(str(root / "card.md"))


cost_model_app = typer.Typer(add_completion=False, no_args_is_help=True,
                             help="Check the learned cost model against measured tuning databases.")
app.add_typer(cost_model_app, name="cost-model")

_DATABASE_HELP = "MetaSchedule JSON database folder (database_workload.json + database_tuning_record.json)"
_MODEL_HELP = ("student weights (tcl_core.student.save_student); default: this platform's student, "
               "as `--cost-model auto` picks it")
_UNTRAINED_HELP = "score with an untrained, seeded student (the baseline a trained one must beat)"


def _load_scored_database(database: Path, model_path: Optional[Path], untrained: bool):
    """(model, tasks, model name, why that model) for a cost-model command, or exit 1 with `error: ...`."""
    if not database.is_dir():
        _fail(f"no database folder at {database}")
    if model_path is not None and untrained:
        _fail("give --model or --untrained, not both")
    if model_path is not None and not model_path.is_file():
        _fail(f"no model file at {model_path}")
    from tcl_core import tvm_api  # imports TVM and torch: only once arguments are valid
    from tcl_core.evaluate import UNTRAINED, open_student
    from tcl_core.platform import platform_name
    from tcl_core.records import RecordsError, card_weights, load_task_records
    from tcl_core.students import choose_cost_model

    reason = "--model" if model_path is not None else "--untrained"
    if model_path is None and not untrained:
        platform = platform_name(tvm_api.host_target_dict(), tvm_api.TVM_VERSION)
        choice = choose_cost_model("auto", platform, state_dir=_default_state_dir())
        reason = choice.reason if choice.student else f"untrained: {choice.reason}"
        model_path = Path(choice.student.path) if choice.student else None

    try:
        tasks = load_task_records(database, weights=card_weights(database))
    except RecordsError as err:
        _fail(str(err))
    if not tasks:
        _fail(f"{database} holds no tuning records")
    try:
        model = open_student(model_path)
    except (ValueError, RuntimeError, OSError, KeyError, TypeError) as err:
        _fail(f"{model_path}: cannot load the student: {err}")
    return model, tasks, str(model_path) if model_path is not None else UNTRAINED, reason


@cost_model_app.command("eval")
def cost_model_eval(
    database: Path = typer.Option(..., "--database", help=_DATABASE_HELP),
    model_path: Optional[Path] = typer.Option(None, "--model", help=_MODEL_HELP),
    untrained: bool = typer.Option(False, "--untrained", help=_UNTRAINED_HELP),
) -> None:
    """Print, as JSON, how well the student ranks each task's measured candidates.

    top1/top5: TenSet's top-k score (best true throughput among the k best-scored candidates over
    the task's best), averaged over tasks weighted by how often each occurs in the model (from
    the collect card beside the folder, else 1); random_top1/5: the same for a random ranking;
    pairwise_accuracy: share of differently-labelled pairs put in the right order.
    """
    import math

    model, tasks, name, reason = _load_scored_database(database, model_path, untrained)
    from tcl_core.evaluate import evaluate

    try:
        summary = evaluate(model, tasks)
    except ValueError as err:
        _fail(str(err))
    report = {
        "tasks": len(tasks),
        "records": sum(t.size for t in tasks),
        "failed": int(sum(t.failed.sum() for t in tasks)),
        **{key: None if math.isnan(value) else round(value, 6) for key, value in summary.items()},
        "model": name,
        "model_reason": reason,
    }
    typer.echo(json.dumps(report))


@cost_model_app.command("predict")
def cost_model_predict(
    database: Path = typer.Option(..., "--database", help=_DATABASE_HELP),
    out: Path = typer.Option(..., "--out", help="JSON-lines file to write (replaced atomically)"),
    model_path: Optional[Path] = typer.Option(None, "--model", help=_MODEL_HELP),
    untrained: bool = typer.Option(False, "--untrained", help=_UNTRAINED_HELP),
) -> None:
    """Score every record; write JSON lines {"task", "record", "workload", "score"}, one per record.

    task: the workload's line index in database_workload.json; record: the record's index among
    that task's lines in database_tuning_record.json (file order); workload: its structural hash;
    score: the student's output, higher = predicted faster (only the order within a task means
    anything).
    """
    if out.is_dir():
        _fail(f"--out {out} is a folder; give a file path")
    model, tasks, name, reason = _load_scored_database(database, model_path, untrained)
    from tcl_core.evaluate import score_tasks

    try:
        scores = score_tasks(model, tasks)
    except ValueError as err:
        _fail(str(err))
    partial = out.with_name(out.name + ".partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("w") as handle:
            for task, task_scores in zip(tasks, scores):
                for index, score in enumerate(task_scores.tolist()):
                    handle.write(json.dumps({"task": task.task_index, "record": index,
                                             "workload": task.workload_hash, "score": score}) + "\n")
        partial.replace(out)  # readers never see a half-written file
    except OSError as err:
        _fail(f"cannot write {out}: {err}")
    typer.echo(f"{sum(t.size for t in tasks)} scores -> {out} (model: {name}; {reason})", err=True)


@cost_model_app.command("train")
def cost_model_train(
    data: Path = typer.Option(..., "--data", help="a collected platform folder: data/<platform>/ (with card.json)"),
    out: Path = typer.Option(..., "--out", help="student file to write; its model card goes beside it as .json and .md"),
    steps: int = typer.Option(2000, "--steps", min=1, help="Adam steps, one task group each"),
    lr: float = typer.Option(1e-3, "--lr"),
    schedule: str = typer.Option("constant", "--schedule",
                                 help="learning rate: constant, or cosine (warm-up, then anneal to 0); not with --teacher"),
    gain_scale: Optional[float] = typer.Option(
        None, "--gain-scale", min=0.1,
        help="LambdaRank gains 2^(scale * label) - 1 (default 4; 1 is TLP's); not with --teacher"),
    seed: int = typer.Option(0, "--seed"),
    d_model: int = typer.Option(64, "--d-model", min=4, help="width of the residual stream"),
    d_state: int = typer.Option(16, "--d-state", min=1, help="SSM state size per channel"),
    layers: int = typer.Option(2, "--layers", min=1, help="Mamba layers"),
    version: int = typer.Option(1, "--version", min=1, help="student version, recorded in its card"),
    train_model: Optional[list[str]] = typer.Option(
        None, "--train-model", help="train on this model folder of the train split only (repeatable; default: all)"),
    also_eval: Optional[list[Path]] = typer.Option(None, "--also-eval", help="more databases to score it on (repeatable)"),
    teacher: Optional[Path] = typer.Option(None, "--teacher", exists=True, dir_okay=False,
                                           help="start from this student and distil towards it (a new platform)"),
    fraction: float = typer.Option(1.0, "--fraction", min=0.01, max=1.0,
                                   help="label only this share of each task's candidates, picked by the RDU sampler"),
    alpha: float = typer.Option(0.1, "--alpha", min=0.0, help="weight of the distillation term (with --teacher)"),
) -> None:
    """Train a student on the card's train split; evaluate it on train and held-out (eval) splits.

    With --teacher / --fraction: bootstrap a new platform from a few measurements (RDU + distillation).
    """
    if not (data / "card.json").is_file():
        _fail(f"{data} has no card.json (run `tcl-tuned collect` first)")
    from tcl_core.student import SCHEDULES

    if schedule not in SCHEDULES:
        _fail(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if schedule != "constant" and (teacher is not None or fraction < 1.0):
        _fail("--schedule cosine is for training from scratch; distillation (--teacher/--fraction) keeps a constant rate")
    if gain_scale is not None and (teacher is not None or fraction < 1.0):
        _fail("--gain-scale is for training from scratch; distillation (--teacher/--fraction) keeps the default")
    from tcl_core.records import RecordsError
    from tcl_core.train import train_and_report

    try:
        from tcl_core.features import TRACE_FEATURE_DIM
        from tcl_core.student import GAIN_SCALE, StudentConfig

        config = StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=d_model, d_state=d_state, n_layers=layers)
        train_and_report(data, out, steps=steps, lr=lr, seed=seed, config=config, version=version,
                         also_eval=tuple(also_eval or ()), teacher=teacher, fraction=fraction, alpha=alpha,
                         schedule=schedule, gain_scale=GAIN_SCALE if gain_scale is None else gain_scale,
                         train_models=tuple(train_model or ()), log=lambda line: typer.echo(line, err=True))
    except RecordsError as err:  # also a --train-model not in the train split
        _fail(str(err))
    typer.echo(str(out))


# --- daemon and status commands go below this line ---
# Imports stay inside the commands: `tcl-tuned tune` should not pay for the daemon's modules.

DEFAULT_CONFIG = Path("/etc/tcl-tuned/config.toml")


@app.command("daemon")
def daemon_command(
    config: Path = typer.Option(..., "--config", dir_okay=False, help="TOML config (see systemd/config.toml)"),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR"),
) -> None:
    """Watch a folder and tune every model dropped into it, in the foreground until SIGTERM/SIGINT."""
    import logging
    import sys

    from daemon.config import ConfigError, load_config
    from daemon.main import Daemon, StartupError

    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        typer.echo(f"tcl-tuned: --log-level {log_level!r}: use DEBUG, INFO, WARNING or ERROR", err=True)
        raise typer.Exit(2)
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        cfg = load_config(config)
    except ConfigError as err:
        typer.echo(f"tcl-tuned: {err}", err=True)
        raise typer.Exit(2) from None  # 2: systemd's RestartPreventExitStatus, a restart won't fix it
    try:
        code = Daemon(cfg).run()
    except StartupError as err:
        typer.echo(f"tcl-tuned: cannot start: {err}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command("status")
def status_command(
    config: Path | None = typer.Option(None, "--config", dir_okay=False, help=f"config naming the status file (default {DEFAULT_CONFIG})"),
    status_file: Path | None = typer.Option(None, "--status-file", dir_okay=False, help="read this status file directly"),
    as_json: bool = typer.Option(False, "--json", help="print the status file itself"),
) -> None:
    """Show what the daemon is doing: one row per model, from the status file."""
    from pydantic import ValidationError
    from rich.console import Console

    from daemon.config import ConfigError, load_config
    from daemon.status import read_status
    from daemon.status_table import render_status

    if config is not None and status_file is not None:
        typer.echo("tcl-tuned: give --config or --status-file, not both", err=True)
        raise typer.Exit(2)
    if status_file is None:
        try:
            cfg = load_config(config or DEFAULT_CONFIG)
        except ConfigError as err:
            typer.echo(f"tcl-tuned: {err}", err=True)
            raise typer.Exit(2) from None
        status_file, stale_after = cfg.status_file, 3 * cfg.heartbeat_seconds
    else:
        stale_after = 30.0
    if not status_file.is_file():
        typer.echo(f"tcl-tuned: no status file at {status_file} (has the daemon ever started?)", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(status_file.read_text(), nl=False)
        return
    try:
        status = read_status(status_file)
    except ValidationError as err:
        typer.echo(f"tcl-tuned: {status_file} is not a status file: {err.errors()[0]['msg']}", err=True)
        raise typer.Exit(1) from None
    Console().print(render_status(status, stale_after_seconds=stale_after))


def _state_from(config: Path | None, state_dir: Path | None):
    """(state dir, the config it came from or None).

    --state-dir (no config), else --config, else /etc/tcl-tuned/config.toml if present, else
    `tune`'s default state dir (no config).
    """
    from daemon.config import ConfigError, load_config

    if config is not None and state_dir is not None:
        _fail("give --config or --state-dir, not both")
    if state_dir is not None:
        return state_dir, None
    if config is None and not DEFAULT_CONFIG.is_file():
        return _default_state_dir(), None
    try:
        cfg = load_config(config or DEFAULT_CONFIG)
    except ConfigError as err:
        typer.echo(f"tcl-tuned: {err}", err=True)
        raise typer.Exit(2) from None
    return cfg.state_dir, cfg


@app.command("platforms")
def platforms_command(
    config: Path | None = typer.Option(None, "--config", dir_okay=False, help="daemon config naming the state dir"),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="state dir (default: the config's, else tune's)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List the platforms measured on or holding a student: records, student version, last distillation."""
    from daemon.platforms import summarise_all
    from daemon.status_table import render_platforms

    root, _ = _state_from(config, state_dir)
    entries = summarise_all(root, include_shipped=True)
    if as_json:
        typer.echo(json.dumps([entry.model_dump() for entry in entries], indent=2))
    else:
        Console().print(render_platforms(entries))


@app.command("distill")
def distill_command(
    platform: str = typer.Option(..., "--platform", help="platform name (see `tcl-tuned platforms`)"),
    config: Path | None = typer.Option(None, "--config", dir_okay=False, help="daemon config naming the state dir"),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="state dir (default: the config's, else tune's)"),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="training steps (default: the config's [distill])"),
) -> None:
    """Run one distillation round for PLATFORM by hand: distil, validate, promote if not worse; print the result."""
    from dataclasses import asdict

    from daemon.config import DistillSettings
    from deploy.layout import database_dir
    from tcl_core.continual import run_round

    root, cfg = _state_from(config, state_dir)
    settings = cfg.distill if cfg is not None else DistillSettings()
    database = database_dir(root, platform)
    if not database.is_dir():
        _fail(f"no tuning database for platform {platform!r} under {root} (see `tcl-tuned platforms`)")
    result = run_round(platform, database, root, settings.round_settings(steps=steps),
                       log=lambda line: typer.echo(line, err=True))
    typer.echo(json.dumps(asdict(result), indent=2))
    if result.decision == "skipped":
        raise typer.Exit(1)


farm_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Tuning farms: TVM RPC trackers and the devices behind them.")
app.add_typer(farm_app, name="farm")


@farm_app.command("status")
def farm_status_command(
    tracker: Optional[str] = typer.Option(None, "--tracker", help="HOST:PORT (default: the config's [runner])"),
    config: Path | None = typer.Option(None, "--config", dir_okay=False, help="daemon config with a [runner] table"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Show the tracker's devices per key: registered servers, free now, requests pending."""
    from daemon.config import ConfigError, load_config
    from deploy.farm import farm_devices, tracker_summary
    from deploy.options import RunnerOptions

    if tracker is not None:
        address = _host_port(tracker)
        if address is None:
            _fail(f"--tracker must be HOST:PORT, got {tracker!r}")
        runner = RunnerOptions(tracker_host=address[0], tracker_port=address[1])
    else:
        try:
            runner = load_config(config or DEFAULT_CONFIG).runner
        except ConfigError as err:
            _fail(f"{err} (or give --tracker HOST:PORT)")
    where = f"{runner.tracker_host}:{runner.tracker_port}"
    try:
        devices = farm_devices(tracker_summary(runner))
    except Exception as err:  # noqa: BLE001 - an unreachable tracker is an answer, not a traceback
        _fail(f"tracker {where} unreachable: {type(err).__name__}: {err}")
    if as_json:
        typer.echo(json.dumps({"tracker": where, "devices": devices}, indent=2))
        return
    typer.echo(f"tracker {where}: {len(devices)} device key(s)")
    for key, entry in sorted(devices.items()):
        typer.echo(f"  {key}: {entry['servers']} server(s), {entry['free']} free, {entry['pending']} pending")


def main() -> None:
    """The console script: the app, with a mistyped command line as one `error:` line (exit 1), not a box."""
    import sys

    usage_error = typer.BadParameter.__base__  # typer's vendored click UsageError (bad option, missing argument)
    try:
        code = app(standalone_mode=False)
    except usage_error as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # plain `tcl-tuned`: the help, as before
            app(["--help"], standalone_mode=False)
            sys.exit(0)
        command = f"{err.ctx.command_path}: " if getattr(err, "ctx", None) else ""
        typer.echo(f"error: {command}{' '.join(err.format_message().split())} (see --help)", err=True)
        sys.exit(1)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    sys.exit(code or 0)
