"""Held-out ranking quality: the student vs TenSet-MLP vs TVM's XGBoost, same records, vs random.

    .venv/bin/python -m research.cost_model_eval --data data/<platform> [--steps 600] \
        [--lr 0.001] [--schedule constant] [--results cost_model_eval]

Every learned model sees only the card's train split; scores are TenSet's top-1 / top-5 on the
eval split's tasks (weighted by how often each occurs in its model) and pairwise accuracy, with
the exact random-ranking baseline beside them. Rows:

* the student (Mamba) on trace features, the shipped design;
* the same student on PerStoreFeature rows: the feature comparison of issue 4;
* TenSet-MLP (tcl_core.tenset_mlp) on PerStoreFeature, trained with the same loss and steps;
* TVM's XGBoost (its own features) updated with every train record.

Feature extraction is timed for both encodings (candidates per second, from stored records).
Writes research/results/<results>.{json,md} (default cost_model_eval).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core import tvm_api  # noqa: E402
from tcl_core.evaluate import evaluate  # noqa: E402
from tcl_core.features import PER_STORE_FEATURE_DIM, per_store_task_featuriser  # noqa: E402
from tcl_core.metrics import ranking_summary  # noqa: E402
from tcl_core.records import card_weights, mean_seconds  # noqa: E402
from tcl_core.student import GAIN_SCALE, SCHEDULES, StudentConfig, normalise_labels, parameter_count  # noqa: E402
from tcl_core.tenset_mlp import TensetMLP  # noqa: E402
from tcl_core.train import load_split, split_databases, train_student  # noqa: E402


def database_groups(database_dir: Path):
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
        for mod, candidates, seconds in database_groups(folder).values():
            context = tvm_api.ms.TuneContext(mod=mod, target=target)
            results = [tvm_api.ms.runner.RunnerResult(run_secs=[s] if np.isfinite(s) else [1e10], error_msg=None)
                       for s in seconds]
            model.update(context, candidates, results)
    scores, run_seconds, labels, weights = [], [], [], []
    for folder in eval_dirs:
        task_weights = card_weights(folder)
        for key, (mod, candidates, seconds) in database_groups(folder).items():
            scores.append(np.asarray(model.predict(tvm_api.ms.TuneContext(mod=mod, target=target), candidates)))
            run_seconds.append(seconds)
            labels.append(normalise_labels(seconds).numpy())
            weights.append(task_weights.get(str(key), 1.0))
    return ranking_summary(scores, run_seconds, labels, weights)


def _load_timed(folders: list[Path], featurise_task=None) -> tuple[list, float]:
    """All tasks of `folders` (trace features, or `featurise_task`'s), and records per second."""
    started = time.perf_counter()
    tasks = load_split(folders, featurise_task)
    seconds = time.perf_counter() - started
    return tasks, sum(t.size for t in tasks) / seconds


def _trained(name: str, tasks: list, steps: int, seed: int, **kwargs) -> tuple:
    started = time.perf_counter()
    model, losses = train_student(tasks, steps=steps, seed=seed, **kwargs)
    print(f"{name}: {steps} steps in {time.perf_counter() - started:.0f} s, final loss {np.mean(losses[-50:]):.3f}",
          flush=True)
    return model, round(time.perf_counter() - started, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3, help="the neural models' Adam learning rate")
    parser.add_argument("--schedule", choices=SCHEDULES, default="constant", help="their learning-rate schedule")
    parser.add_argument("--gain-scale", type=float, default=GAIN_SCALE,
                        help="their LambdaRank gains, 2^(scale * label) - 1")
    parser.add_argument("--results", default="cost_model_eval", help="file stem under --out")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small batches: intra-op threads only wait on each other (evaluate.score_tasks)
    split = split_databases(args.data)
    card = json.loads((args.data / "card.json").read_text())
    target = tvm_api.make_target(card["target"])
    train_hashes = {t["structural_hash"] for name in card["models"] if card["models"][name]["split"] == "train"
                    for t in card["models"][name].get("tasks", [])}
    shared = sum(t["structural_hash"] in train_hashes for name in card["models"]
                 if card["models"][name]["split"] == "eval" for t in card["models"][name].get("tasks", []))

    train_trace, trace_rate = _load_timed(split["train"])
    eval_trace, _ = _load_timed(split["eval"])
    per_store = per_store_task_featuriser(target)
    train_store, store_rate = _load_timed(split["train"], per_store)
    eval_store, _ = _load_timed(split["eval"], per_store)
    print(f"features: trace {trace_rate:.0f} records/s, PerStoreFeature {store_rate:.0f} records/s "
          "(both including TVM's replay of each stored trace)", flush=True)

    rows = {}
    schedule = {"lr": args.lr, "schedule": args.schedule, "gain_scale": args.gain_scale}
    student, seconds = _trained("student/trace", train_trace, args.steps, args.seed, **schedule)
    rows["student_trace"] = {**evaluate(student, eval_trace), "parameters": parameter_count(student),
                             "train_seconds": seconds}
    store_student, seconds = _trained("student/per-store", train_store, args.steps, args.seed,
                                      config=StudentConfig(feature_dim=PER_STORE_FEATURE_DIM), **schedule)
    rows["student_per_store"] = {**evaluate(store_student, eval_store), "parameters": parameter_count(store_student),
                                 "train_seconds": seconds}
    torch.manual_seed(args.seed)
    mlp, seconds = _trained("tenset-mlp/per-store", train_store, args.steps, args.seed, model=TensetMLP(), **schedule)
    rows["tenset_mlp"] = {**evaluate(mlp, eval_store), "parameters": parameter_count(mlp), "train_seconds": seconds}
    started = time.perf_counter()
    rows["xgb"] = {**xgb_summary(split["train"], split["eval"], target),
                   "train_seconds": round(time.perf_counter() - started, 1)}
    result = {
        "command": f"research/cost_model_eval.py --data {args.data} --steps {args.steps} --seed {args.seed} "
                   f"--lr {args.lr} --schedule {args.schedule} --gain-scale {args.gain_scale:g} --results {args.results}",
        "train_models": [p.name for p in split["train"]], "eval_models": [p.name for p in split["eval"]],
        "train_records": sum(t.size for t in train_trace), "eval_records": sum(t.size for t in eval_trace),
        "eval_tasks_also_in_train": shared, "steps": args.steps, "lr": args.lr, "schedule": args.schedule,
        "gain_scale": args.gain_scale,
        "feature_records_per_second": {"trace": round(trace_rate, 1), "per_store": round(store_rate, 1)},
        **rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.results}.json").write_text(json.dumps(result, indent=2) + "\n")
    names = [("TCL student (Mamba), trace features", "student_trace"),
             ("TCL student (Mamba), PerStoreFeature", "student_per_store"),
             ("TenSet-MLP, PerStoreFeature", "tenset_mlp"), ("TVM XGBoost", "xgb")]
    random_row = result["student_trace"]
    lines = [
        "# Held-out ranking: student vs TenSet-MLP vs XGBoost vs random", "",
        f"Command: `.venv/bin/python {result['command']}`. Train: {', '.join(result['train_models'])} "
        f"({result['train_records']} records); held out: {', '.join(result['eval_models'])} "
        f"({result['eval_records']} records; {shared} held-out tasks share a workload with training). "
        f"Every learned model sees the same train records; neural ones take {args.steps} steps of the same "
        f"LambdaRank loss (gains 2^({args.gain_scale:g} label) - 1, lr {args.lr}, {args.schedule} schedule).", "",
        "| model | parameters | top-1 | top-5 | pairwise accuracy | train s |", "|---|---|---|---|---|---|",
        *[f"| {label} | {result[key].get('parameters', '-')} | {result[key]['top1']:.3f} | {result[key]['top5']:.3f} | "
          f"{result[key]['pairwise_accuracy']:.3f} | {result[key]['train_seconds']} |" for label, key in names],
        f"| random ranking (exact expectation) | - | {random_row['random_top1']:.3f} | "
        f"{random_row['random_top5']:.3f} | 0.500 | - |", "",
        f"Feature extraction from stored records (TVM's trace replay included): trace "
        f"{trace_rate:.0f} records/s, PerStoreFeature {store_rate:.0f} records/s.",
    ]
    (args.out / f"{args.results}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
