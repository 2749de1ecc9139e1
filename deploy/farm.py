"""Tuning farms: what a TVM RPC tracker offers, and the check a job makes before it measures there.

The tracker and servers are TVM's own (`python -m tvm.exec.rpc_tracker`, `python -m
tvm.exec.rpc_server --tracker HOST:PORT --key KEY`); MetaSchedule's RPCRunner measures through
them (tcl_core.tvm_api.make_runner). Used by the pipeline and by `tcl-tuned farm status`.
"""

from __future__ import annotations

import socket

from deploy.errors import PipelineError
from deploy.options import RunnerOptions

__all__ = ["tracker_summary", "farm_devices", "check_farm"]


def tracker_summary(runner: RunnerOptions, *, connect_timeout: float = 5.0) -> dict:
    """The tracker's raw summary (imports TVM); raises OSError when it cannot be reached.

    One plain connection attempt first: TVM's client retries a refused connection for 60 s.
    """
    from tcl_core import tvm_api

    socket.create_connection((runner.tracker_host, runner.tracker_port), timeout=connect_timeout).close()
    return tvm_api.tracker_summary(runner.tracker_host, runner.tracker_port)


def farm_devices(summary: dict) -> dict[str, dict[str, int]]:
    """Device key -> {"servers": registered, "free": idle now, "pending": requests waiting}, from a tracker summary."""
    keys: dict[str, dict[str, int]] = {}
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).split(":")[-1]  # servers register as "server:<key>"
        keys.setdefault(key, {"servers": 0, "free": 0, "pending": 0})["servers"] += 1
    for key, queue in summary.get("queue_info", {}).items():
        entry = keys.setdefault(key, {"servers": 0, "free": 0, "pending": 0})
        entry["free"], entry["pending"] = int(queue.get("free", 0)), int(queue.get("pending", 0))
    return {key: entry for key, entry in keys.items() if entry["servers"] or entry["free"]}


def check_farm(runner: RunnerOptions) -> None:
    """Fail the job up front, with the reason, when the tracker is unreachable or has no device for the key.

    Without this every candidate would fail one by one and the job would end "done" on untuned
    kernels. Devices that die later fail only the candidates they were measuring.
    """
    where = f"{runner.tracker_host}:{runner.tracker_port}"
    try:
        summary = tracker_summary(runner)
    except Exception as err:  # OSError, TVM's RPC errors
        raise PipelineError(f"tuning farm: tracker {where} unreachable ({type(err).__name__}: {err})") from err
    devices = farm_devices(summary)
    if not devices.get(runner.device_key):
        keys = sorted(devices)
        raise PipelineError(f"tuning farm: tracker {where} has no device with key {runner.device_key!r} "
                            f"(keys there: {keys or 'none'})")
