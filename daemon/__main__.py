"""`python -m daemon ...` = the `tcl-tuned` console script, for checkouts that are not installed."""

from daemon.cli import app

if __name__ == "__main__":  # the guard matters: spawned workers re-import the main module
    app()
