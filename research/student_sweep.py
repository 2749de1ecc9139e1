"""Student sizes against held-out ranking quality: which configuration ships.

    .venv/bin/python -m research.student_sweep --data data/<platform> --steps 600 \
        --configs 64x16x2 32x8x2 64x4x2 [--seeds 0 1 2] [--train-models resnet18 mlp ...] \
        [--results student_sweep]

Each configuration is `d_model x d_state x n_layers`; every one trains with the same seeds and
steps on the card's train split (trace features) and is scored on the eval split with TenSet's
top-1 / top-5 and pairwise accuracy, averaged over the seeds (one seed's noise is several
points of top-1 here). `--train-models` trains on only these model folders of the train split,
to see how held-out ranking grows with the number of models learnt from; each run also reports
its scores on each held-out model alone. `--loss` picks the ranking loss (LambdaRank by default,
`--gain-scale` its gains; `listwise` with `--temperature`, tcl_core.student). Prediction time is measured separately on an idle machine
(research/cost_model_speed.py); this only compares quality and size. Writes
research/results/student_sweep.{json,md}.
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

from tcl_core.evaluate import evaluate  # noqa: E402
from tcl_core.features import TRACE_FEATURE_DIM  # noqa: E402
from tcl_core.student import (  # noqa: E402
    GAIN_SCALE, LISTWISE_TEMPERATURE, LOSSES, SCHEDULES, StudentConfig, parameter_count,
)
from tcl_core.train import chosen_train_split, load_split, split_databases, train_student  # noqa: E402


def parse_config(text: str) -> StudentConfig:
    d_model, d_state, n_layers = (int(part) for part in text.split("x"))
    return StudentConfig(feature_dim=TRACE_FEATURE_DIM, d_model=d_model, d_state=d_state, n_layers=n_layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--schedule", choices=SCHEDULES, default="constant")
    parser.add_argument("--gain-scale", type=float, default=GAIN_SCALE, help="LambdaRank gains 2^(scale * label) - 1")
    parser.add_argument("--loss", choices=LOSSES, default="lambda")
    parser.add_argument("--temperature", type=float, default=LISTWISE_TEMPERATURE,
                        help="the listwise loss's target temperature")
    parser.add_argument("--configs", nargs="+", default=["64x16x2", "32x8x2", "64x4x2"])
    parser.add_argument("--train-models", nargs="+", default=None, help="train on these model folders only")
    parser.add_argument("--results", default="student_sweep", help="file stem under --out")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small batches: intra-op threads only wait on each other (evaluate.score_tasks)
    split = split_databases(args.data)
    train_dirs = chosen_train_split(split["train"], args.train_models)
    train_tasks = load_split(train_dirs)
    eval_by_model = {path.name: load_split([path]) for path in split["eval"]}
    eval_tasks = [task for tasks in eval_by_model.values() for task in tasks]
    rows = []
    for text in args.configs:
        config = parse_config(text)
        runs = []
        for seed in args.seeds:
            started = time.perf_counter()
            student, _ = train_student(train_tasks, steps=args.steps, seed=seed, config=config, lr=args.lr,
                                       schedule=args.schedule, gain_scale=args.gain_scale, loss=args.loss,
                                       temperature=args.temperature)
            runs.append({"seed": seed, "train_seconds": round(time.perf_counter() - started, 1),
                         **evaluate(student, eval_tasks),
                         "by_model": {name: evaluate(student, tasks) for name, tasks in eval_by_model.items()}})
            print(json.dumps({"config": text, **runs[-1]}), flush=True)
        row = {"config": text, "parameters": parameter_count(student), "runs": runs,
               **{key: float(np.mean([r[key] for r in runs])) for key in ("top1", "top5", "pairwise_accuracy",
                                                                          "train_seconds")},
               "top1_sd": float(np.std([r["top1"] for r in runs])), "top5_sd": float(np.std([r["top5"] for r in runs])),
               "top5_by_model": {name: float(np.mean([r["by_model"][name]["top5"] for r in runs]))
                                 for name in eval_by_model}}
        rows.append(row)
    result = {"command": f"research/student_sweep.py --data {args.data} --steps {args.steps} "
                         f"--lr {args.lr} --schedule {args.schedule} "
                         + (f"--gain-scale {args.gain_scale:g} " if args.loss == "lambda" else f"--loss {args.loss} ")
                         + (f"--temperature {args.temperature:g} " if args.loss == "listwise" else "")
                         + f"--seeds {' '.join(map(str, args.seeds))} --configs {' '.join(args.configs)} "
                         + (f"--train-models {' '.join(args.train_models)} " if args.train_models else "")
                         + f"--results {args.results}",
              "train_models": [path.name for path in train_dirs], "eval_models": list(eval_by_model),
              "train_records": sum(t.size for t in train_tasks), "eval_records": sum(t.size for t in eval_tasks),
              "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.results}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Student size sweep (held-out ranking)", "", f"Command: `.venv/bin/python {result['command']}`. "
             f"Mean over {len(args.seeds)} seed(s), ± the standard deviation. Trained on "
             f"{', '.join(result['train_models'])} ({result['train_records']} records); held out: "
             f"{', '.join(result['eval_models'])} ({result['eval_records']} records).", "",
             "| d_model x d_state x layers | parameters | top-1 | top-5 | "
             + "".join(f"top-5 {name} | " for name in eval_by_model) + "pairwise | train s |",
             "|---|---|---|---|" + "---|" * len(eval_by_model) + "---|---|",
             *[f"| {r['config']} | {r['parameters']} | {r['top1']:.3f} ± {r['top1_sd']:.3f} | "
               f"{r['top5']:.3f} ± {r['top5_sd']:.3f} | "
               + "".join(f"{r['top5_by_model'][name]:.3f} | " for name in eval_by_model)
               + f"{r['pairwise_accuracy']:.3f} | {r['train_seconds']:.0f} |"
               for r in rows]]
    (args.out / f"{args.results}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
