"""Compile with the weights embedded and export one `model.so`.

The library is the whole deployment: `relax.VirtualMachine(tvm.runtime.load_module(path),
tvm.cpu())["main"](*inputs)` needs no parameter files, no Python of ours, no tuning database.
"""

from __future__ import annotations

from pathlib import Path

from tcl_core import tvm_api


def build_library(lowered, target, path: Path, *, database=None) -> Path:
    """Export `lowered` to `path`, with the database's best schedules applied when given."""
    mod = tvm_api.apply_database(lowered, target, database) if database is not None else lowered
    return tvm_api.compile_module(mod, target, path)
