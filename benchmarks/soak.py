"""Soak: the real daemon (real pipeline, real TVM) fed good and bad files while being SIGKILLed and restarted.

    .venv/bin/python benchmarks/soak.py [--rounds 6] [--good 6] [--trials 0] [--seed 0] [--out benchmarks/results]

Each round drops a few valid models (tiny MLPs with different weights: distinct content) and a
few bad ones (empty, noise, truncated, a symlink, escaping external data), then SIGKILLs the
daemon at a random moment and starts it again. At the end it lets the last daemon finish,
stops it with SIGTERM and checks what survived: every good model done exactly once with its
artifact, every bad one failed with a reason, no job left queued or running, no staging folder
left in the output folder, no orphaned process. Writes `<out>/soak.json` (what it tried and what
it found) and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.status import read_status  # noqa: E402
from tests.models import corrupt_onnx, tiny_mlp_onnx  # noqa: E402


def _drop(watch: Path, staging: Path, name: str, write) -> None:
    """Write under staging, then rename into the watch folder (how users are told to submit)."""
    path = staging / name
    write(path)
    os.rename(path, watch / name)


def _bad_files(watch: Path, staging: Path, index: int) -> list[str]:
    tag = f"r{index}"
    names = ["empty.onnx" if index == 0 else f"zeros-{tag}.onnx", f"noise-{tag}.onnx",
             f"truncated-{tag}.onnx", f"corrupt-{tag}.onnx", f"link-{tag}.onnx"]
    # Every bad file has its own content: the same content twice is one job (dedup by sha256).
    _drop(watch, staging, names[0], lambda p: p.write_bytes(b"\0" * (100 * index)))  # index 0: empty
    _drop(watch, staging, names[1], lambda p: p.write_bytes(os.urandom(4096)))
    real = tiny_mlp_onnx(staging / "whole.onnx", seed=10_000).read_bytes()
    _drop(watch, staging, names[2], lambda p: p.write_bytes(real[: len(real) // 3] + tag.encode()))
    _drop(watch, staging, names[3], lambda p: corrupt_onnx(p).write_bytes(p.read_bytes() + tag.encode()))
    target = staging / f"elsewhere-{tag}.onnx"
    tiny_mlp_onnx(target, seed=20_000 + index)  # the daemon hashes what a link points at
    (watch / names[4]).symlink_to(target)
    return names


def _start(config: Path, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "daemon", "daemon", "--config", str(config)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def _wait_for(status_file: Path, condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if status_file.is_file() and condition(read_status(status_file)):
                return True
        except Exception:  # noqa: BLE001 - a status file must always parse; count it below instead
            pass
        time.sleep(0.2)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--good", type=int, default=6, help="valid models over all rounds")
    parser.add_argument("--trials", type=int, default=0, help="tuning trials per model (0: untuned builds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, default=REPO / "var" / "soak")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = args.root
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    watch, out, state, staging = root / "watch", root / "out", root / "state", root / "staging"
    for folder in (watch, out, state, staging):
        folder.mkdir(parents=True)
    config = root / "config.toml"
    config.write_text(f'watch_dir = "{watch}"\noutput_dir = "{out}"\nstate_dir = "{state}"\n'
                      f'settle_seconds = 0.5\nstop_grace_seconds = 2.0\n[tuning]\ntrials = {args.trials}\n'
                      f'timing_repeats = 3\ncost_model = "random"\n[distill]\nenabled = false\n')
    status_file = state / "status.json"
    started = time.monotonic()
    good, bad, kills, unparsable = [], [], [], 0
    with open(root / "daemon.log", "w") as log:
        process = _start(config, log)
        for round_index in range(args.rounds):
            for k in range(round_index * args.good // args.rounds, (round_index + 1) * args.good // args.rounds):
                name = f"good model {k:02d}.onnx"
                _drop(watch, staging, name, lambda p, k=k: tiny_mlp_onnx(p, seed=k))
                good.append(name)
            bad += _bad_files(watch, staging, round_index)
            delay = rng.uniform(2.0, 25.0)
            time.sleep(delay)
            state_seen = None
            try:
                status = read_status(status_file)
                state_seen = sorted({m.state for m in status.models})
            except Exception:  # noqa: BLE001
                unparsable += 1
            children = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
            process.kill()
            process.wait()
            kills.append({"round": round_index, "after_seconds": round(delay, 1), "states_seen": state_seen,
                          "children_at_kill": len(children)})
            time.sleep(3)  # the orphan watch of the killed daemon's job polls every 0.5 s
            kills[-1]["orphans_left"] = sum(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                                            for pid in children)
            process = _start(config, log)
        expected = {Path(n).stem for n in good + bad}
        finished = _wait_for(status_file, lambda s: {m.name for m in s.models if m.state in ("done", "failed")}
                             >= expected, timeout=1800)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    status = read_status(status_file)
    by_name = {m.name: m for m in status.models}
    runs = (root / "daemon.log").read_text().count(": done -> ")
    checks = {
        "all files answered": finished,
        "every good model done": all(by_name.get(Path(n).stem) and by_name[Path(n).stem].state == "done" for n in good),
        "every bad file failed with a reason": all(by_name.get(Path(n).stem) and by_name[Path(n).stem].state == "failed"
                                                   and by_name[Path(n).stem].error for n in bad),
        "each good model built exactly once": runs == len(good),
        "every artifact whole": all((Path(by_name[Path(n).stem].artifact_dir) / "manifest.json").is_file()
                                    for n in good if by_name.get(Path(n).stem) and by_name[Path(n).stem].artifact_dir),
        "no staging folder left": not list(out.glob(".staging-*")),
        "no orphaned process after a kill": all(k["orphans_left"] == 0 for k in kills),
        "status file always parsed": unparsable == 0,
    }
    report = {
        "command": "benchmarks/soak.py " + " ".join(sys.argv[1:]), "seconds": round(time.monotonic() - started, 1),
        "tried": {"good": len(good), "bad": len(bad), "kills": kills},
        "found": {m.name: {"state": m.state, "error": m.error} for m in status.models},
        "checks": checks, "passed": all(checks.values()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"checks": checks, "seconds": report["seconds"]}, indent=2))
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
