"""Does a student pretrained on other CPUs' records rank this CPU's held-out models better once fine-tuned?

    .venv/bin/python -m research.pretrain_finetune --target data/llvm-znver4-2c-3de11c59 \
        --sources data/llvm-rocketlake-2c-02e6ab9d [data/...] --seed 0 \
        [--target-models bert_layer mlp mobilenet_v1 resnet18] [--steps 2400] [--out FILE.jsonl]

Trains on the sources' train splits only (their held-out models' records would leak the target's
held-out workloads), scores the target's held-out split, then fine-tunes the same network on the
target's train split (`--target-models` of it) with the same recipe (lr, cosine schedule, gains)
and scores it again. Offline training's recipe otherwise (one torch thread, seeded). Appends one
JSON line per run to `--out`; compare with `student_sweep.py` on the target alone, same seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.evaluate import evaluate  # noqa: E402
from tcl_core.train import chosen_train_split, load_split, split_databases, train_student  # noqa: E402

SCORES = ("top1", "top5", "pairwise_accuracy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--sources", type=Path, nargs="+", required=True)
    parser.add_argument("--target-models", nargs="+", default=None, help="fine-tune on these train models only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2400, help="each of pretraining and fine-tuning")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--gain-scale", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "pretrain_finetune.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources = [task for source in args.sources for task in load_split(split_databases(source)["train"])]
    target_split = split_databases(args.target)
    own = load_split(chosen_train_split(target_split["train"], args.target_models))
    held_by_model = {path.name: load_split([path]) for path in target_split["eval"]}
    held = [task for tasks in held_by_model.values() for task in tasks]
    recipe = dict(lr=args.lr, schedule="cosine", gain_scale=args.gain_scale, seed=args.seed, steps=args.steps)
    started = time.perf_counter()
    student, _ = train_student(sources, **recipe)
    pretrained = evaluate(student, held)
    student, _ = train_student(own, model=student, **recipe)
    fine_tuned = evaluate(student, held)
    row = {"target": args.target.name, "sources": [s.name for s in args.sources], "seed": args.seed,
           "steps": args.steps, "lr": args.lr, "gain_scale": args.gain_scale,
           "target_models": args.target_models, "source_records": sum(t.size for t in sources),
           "target_records": sum(t.size for t in own), "seconds": round(time.perf_counter() - started),
           "pretrained": {key: pretrained[key] for key in SCORES},
           "fine_tuned": {key: fine_tuned[key] for key in SCORES},
           "fine_tuned_top5_by_model": {name: evaluate(student, tasks)["top5"] for name, tasks in held_by_model.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
