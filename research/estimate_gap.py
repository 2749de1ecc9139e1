"""Where a library's time goes beyond the tuner's estimate: the kernels alone against the whole call.

    .venv/bin/python -m research.estimate_gap benchmarks/results/.work/<stem>/<model>/<cost model>

Takes a run kept by `python -m benchmarks run --keep-work` (its ONNX file, `out/*/` artifact and
`state/databases-v2/*` database), and prints three numbers on this process's TVM threads: the
tuner's estimate (each task's best measured time x its weight), the sum of the library's kernels
each timed alone back to back (`tcl_core.tvm_api.profile_kernels`), and the median whole call;
then the tasks and the kernels, slowest first. Run it on an idle machine (docs/performance.md,
items 9-10).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx

from deploy import verify
from deploy.options import TuningOptions
from deploy.pipeline import import_and_lower
from tcl_core import tvm_api


def main(work: Path) -> None:
    artifact = next(work.glob("out/*/"))
    manifest = json.loads((artifact / "manifest.json").read_text())
    target = tvm_api.make_target(manifest["target"])
    options = TuningOptions(conv_layout=manifest["conv_layout"], fast_math=manifest["fast_math"],
                            pack_weights=manifest["pack_weights"])
    lowered = import_and_lower(onnx.load(str(next(work.glob("*.onnx")))), target, options)
    database = tvm_api.open_database(next(work.glob("state/databases-v2/*")))
    rows, estimate = [], 0.0
    for task in tvm_api.extract_tasks(lowered, target):
        record = database.query_tuning_record(task.dispatched[0], target, task.task_name)
        best = float(np.mean([float(s) for s in record.run_secs])) * 1e3 if record else float("nan")
        estimate += best * int(task.weight)
        rows.append((task.task_name, int(task.weight), best))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in manifest["inputs"]]
    kernels = tvm_api.profile_kernels(artifact / "model.so", arrays)
    whole = verify.median_ms(verify.tvm_call(tvm_api.load_vm(artifact / "model.so"), arrays), 20)
    print(f"estimate {estimate:.4f} ms  kernels alone {sum(ms for _, ms in kernels):.4f} ms  "
          f"whole call {whole:.4f} ms  threads {tvm_api.runtime_threads()}")
    print("tasks (best measured x weight):")
    for name, weight, best in sorted(rows, key=lambda r: -r[1] * r[2]):
        print(f"  {name:60s} x{weight} {best:.4f} ms")
    print("kernels (each alone, per run):")
    for name, ms in kernels:
        print(f"  {name:60s} {ms:.4f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[2].strip())
    main(Path(sys.argv[1]))
