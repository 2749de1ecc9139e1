"""Held-out ranking quality: the student vs TVM's XGBoost trained on the same records vs random.

    .venv/bin/python benchmarks/cost_model_eval.py --data data/<platform> [--steps 400]

Both learned models see only the card's train split; scores are TenSet's top-1 / top-5 on the
eval split's tasks (weighted by how often each occurs in its model) and pairwise accuracy, with
the exact random-ranking baseline beside them. Writes benchmarks/results/cost_model_eval.{json,md}.
The TenSet-style MLP baseline is not in this table yet (TVM's "mlp" does not train as shipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core import tvm_api  # noqa: E402
from tcl_core.evaluate import evaluate  # noqa: E402
from tcl_core.metrics import ranking_summary  # noqa: E402
from tcl_core.records import card_weights, mean_seconds  # noqa: E402
from tcl_core.student import normalise_labels, parameter_count  # noqa: E402
from tcl_core.train import load_split, split_databases, train_student  # noqa: E402


def _groups(database_dir: Path):
    """(workload mod, candidates, run seconds (g,)) per workload of a database."""
    by_workload: dict = {}
    for record in tvm_api.open_database(database_dir).get_all_tuning_records():
        key = tvm_api.structural_hash(record.workload.mod)
        entry = by_workload.setdefault(key, (record.workload.mod, [], []))
        entry[1].append(record.as_measure_candidate())
        entry[2].append(mean_seconds([float(s) for s in record.run_secs or []]))
    return {key: (mod, cands, np.array(secs)) for key, (mod, cands, secs) in by_workload.items()}


def xgb_summary(train_dirs: list[Path], eval_dirs: list[Path], target) -> dict:
    """TVM's XGBModel updated with every train task's records, then asked to rank the eval tasks."""
    model = tvm_api.ms.cost_model.XGBModel(num_warmup_samples=0, adaptive_training=False)
    for folder in train_dirs:
        for mod, candidates, seconds in _groups(folder).values():
            context = tvm_api.ms.TuneContext(mod=mod, target=target)
            results = [tvm_api.ms.runner.RunnerResult(run_secs=[s] if np.isfinite(s) else [1e10], error_msg=None)
                       for s in seconds]
            model.update(context, candidates, results)
    scores, run_seconds, labels, weights = [], [], [], []
    for folder in eval_dirs:
        task_weights = card_weights(folder)
        for key, (mod, candidates, seconds) in _groups(folder).items():
            scores.append(np.asarray(model.predict(tvm_api.ms.TuneContext(mod=mod, target=target), candidates)))
            run_seconds.append(seconds)
            labels.append(normalise_labels(seconds).numpy())
            weights.append(task_weights.get(str(key), 1.0))
    return ranking_summary(scores, run_seconds, labels, weights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    split = split_databases(args.data)
    card = json.loads((args.data / "card.json").read_text())
    target = tvm_api.make_target(card["target"])
    train_tasks, eval_tasks = load_split(split["train"]), load_split(split["eval"])
    started = time.perf_counter()
    student, _ = train_student(train_tasks, steps=args.steps)
    student_seconds = time.perf_counter() - started
    started = time.perf_counter()
    xgb = xgb_summary(split["train"], split["eval"], target)
    xgb_seconds = time.perf_counter() - started
    result = {
        "command": f"benchmarks/cost_model_eval.py --data {args.data} --steps {args.steps}",
        "train_models": [p.name for p in split["train"]], "eval_models": [p.name for p in split["eval"]],
        "train_records": sum(t.size for t in train_tasks), "eval_records": sum(t.size for t in eval_tasks),
        "student": {**evaluate(student, eval_tasks), "parameters": parameter_count(student),
                    "steps": args.steps, "train_seconds": round(student_seconds, 1)},
        "xgb": {**xgb, "train_seconds": round(xgb_seconds, 1)},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost_model_eval.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = [("TCL student (Mamba)", result["student"]), ("TVM XGBoost, same records", result["xgb"])]
    lines = [
        "# Held-out ranking: student vs XGBoost vs random", "",
        f"Command: `.venv/bin/python {result['command']}`. Train: {', '.join(result['train_models'])} "
        f"({result['train_records']} records); held out: {', '.join(result['eval_models'])} ({result['eval_records']} records).",
        "", "| model | top-1 | top-5 | pairwise accuracy |", "|---|---|---|---|",
        *[f"| {name} | {m['top1']:.3f} | {m['top5']:.3f} | {m['pairwise_accuracy']:.3f} |" for name, m in rows],
        f"| random ranking (exact expectation) | {result['student']['random_top1']:.3f} | "
        f"{result['student']['random_top5']:.3f} | 0.500 |",
    ]
    (args.out / "cost_model_eval.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
