"""Student size and prediction throughput, features included: candidates per second on this CPU.

    .venv/bin/python -m research.cost_model_speed [--database data/<platform>/resnet18] [--count 2000] \
        [--configs 64x16x2 32x8x2 64x4x2]

Takes real candidate traces from a collected tuning database (as many as `--count`, repeating
records if the database is smaller), then times, in one process: trace -> feature sequences,
padding, and `predict` of an (untrained, same cost) student of each size on 1 and 2 torch threads
with each scan: `inplace` (the loop without autograd that scoring uses), `reference` (the same
loop as training runs it) and `parallel`; each timing is the best of `--repeat`. One round of
MetaSchedule's evolutionary search scores about 2,000 candidates, so `seconds per 2,000` is
what a search round pays for the cost model. Writes `research/results/cost_model_speed.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core import mamba, tvm_api  # noqa: E402
from tcl_core.features import TRACE_FEATURE_DIM, pad_batch, trace_features  # noqa: E402
from tcl_core.platform import cpu_model_name  # noqa: E402
from tcl_core.student import Student, StudentConfig, parameter_count, predict  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=None, help="a collected database folder")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--configs", nargs="+", default=["64x16x2", "32x8x2", "64x4x2"],
                        help="student sizes, d_model x d_state x n_layers")
    parser.add_argument("--repeat", type=int, default=3, help="time each case this often, keep the best")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cost_model_speed.json")
    args = parser.parse_args()
    database_dir = args.database or next(Path("data").glob("*/resnet18"))
    records = list(tvm_api.open_database(database_dir).get_all_tuning_records())
    traces = [records[i % len(records)].trace for i in range(args.count)]

    features_s = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        sequences = [trace_features(trace) for trace in traces]
        features_s = min(features_s, time.perf_counter() - started)
    started = time.perf_counter()
    features, mask = pad_batch(sequences, 64)
    pad_s = time.perf_counter() - started
    rows = []
    for text in args.configs:
        d_model, d_state, n_layers = (int(part) for part in text.split("x"))
        torch.manual_seed(0)
        student = Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=d_model, d_state=d_state,
                                        n_layers=n_layers))
        timings = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for scan in ("inplace", "reference", "parallel"):
                timings[f"{scan}_{threads}thread"] = _best_predict_seconds(student, features, mask, scan, args.repeat)
        best = min(timings, key=timings.get)
        total = features_s + pad_s + timings[best]
        rows.append({"config": text, "parameters": parameter_count(student), "predict_seconds": timings,
                     "best": best, "seconds_per_2000_with_features": round(2000 * total / args.count, 4),
                     "candidates_per_second_with_features": round(args.count / total, 1)})
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "command": f"research/cost_model_speed.py --database {database_dir} --count {args.count} --configs {' '.join(args.configs)}"
                   f" --repeat {args.repeat}",
        "database": str(database_dir), "candidates": args.count, "cpu": cpu_model_name(), "cores": os.cpu_count(),
        "sequence_length": int(features.shape[1]), "feature_dim": TRACE_FEATURE_DIM,
        "seconds": {"features": round(features_s, 4), "pad": round(pad_s, 4)},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _best_predict_seconds(student: Student, features, mask, scan: str, repeat: int) -> float:
    """Fastest of `repeat` timed `predict` calls with `scan` (after a small warm-up call)."""
    inference_scan = mamba.selective_scan_inference
    if scan == "reference":  # scoring runs without autograd; swap its loop for the training one
        mamba.selective_scan_inference = mamba.selective_scan_sequential
    try:
        predict(student, features[:64], mask[:64], sequential=scan != "parallel")  # warm-up
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            predict(student, features, mask, sequential=scan != "parallel")
            best = min(best, time.perf_counter() - started)
    finally:
        mamba.selective_scan_inference = inference_scan
    return round(best, 4)


if __name__ == "__main__":
    main()
