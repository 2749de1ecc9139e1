"""Target + hardware fingerprint -> platform name: the key that tuning records live under.

Records measured on one CPU, target or TVM release say little about another, so each platform
gets its own tuning database. The name stays readable (`llvm-znver5-2c-1a2b3c4d`) and the hash
covers everything that makes a measurement stale.
"""

from __future__ import annotations

import hashlib
import json
import platform as _stdlib_platform
from pathlib import Path
from typing import Any


def cpu_model_name() -> str:
    """The CPU's marketing name from /proc/cpuinfo (falls back to the stdlib's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _stdlib_platform.processor() or _stdlib_platform.machine()


def platform_name(target: dict[str, Any], tvm_version: str, device_key: str | None = None) -> str:
    """A stable, readable name for (target, the measuring hardware, TVM major.minor).

    The hardware is this machine's CPU, or, for candidates measured on an RPC tuning farm, the
    device class the farm's `device_key` names (the daemon cannot fingerprint a remote board;
    one key per board type is the farm's convention). The key then ends the readable part.
    """
    major_minor = ".".join(tvm_version.split(".")[:2])
    hardware = ({"device_key": device_key} if device_key else
                {"cpu": cpu_model_name(), "machine": _stdlib_platform.machine()})
    canonical = json.dumps({"target": target, **hardware, "tvm": major_minor}, sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    parts = [str(target.get("kind", "unknown")), str(target.get("mcpu") or target.get("arch") or "generic")]
    if "num-cores" in target:
        parts.append(f"{target['num-cores']}c")
    if device_key:
        parts.append(device_key)
    return "-".join(parts + [digest])
