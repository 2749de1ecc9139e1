"""The `tcl-tuned` console script: tune, daemon, status, example."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


@app.command()
def tune(
    model: Path = typer.Argument(..., exists=True, dir_okay=False, help="the ONNX file"),
    out: Path = typer.Option(..., "--out", help="output folder; the artifact lands in OUT/<stem>-<sha8>/"),
) -> None:
    """Tune one model without the daemon; exit code 0 only when the artifact verified."""
    raise NotImplementedError


# --- daemon and status commands go below this line ---
