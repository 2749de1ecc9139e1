"""RDU data efficiency and continual transfer across platforms, from collected data (issue 5).

    python -m research.continual efficiency --data data/llvm-znver5-2c-c69ac8f7 [--steps 600 [N ...]] [--seeds 0 1 2]
    python -m research.continual transfer --sequence data/A data/B data/C [--steps 600] [--fraction 0.1]

`efficiency`: students trained from scratch on the platform's train split, on all of it, on 10%
of each task's candidates picked by the RDU sampler, and on 10% picked at random; TenSet top-1 /
top-5 on the held-out (eval split) models. With `--teacher` (another platform's student), the
same three subsets as TCL uses them on a new platform, `+distil`: start from the teacher, train
with the ranking loss plus distillation towards it (tcl_core.distill), and the teacher untouched. RDU's embeddings come from `--embed-with` (a student
from another platform) or, without one, from the raw features (tcl_core.rdu). Random picks and
training seeds vary over `--seeds`; the RDU picks are deterministic, its training seed varies.

`transfer`: platform A's student is trained on all of A's train split; each next platform gets
only `--fraction` of its train split's candidates (RDU picks, embedded by the previous student),
and every method continues from its own previous model:
  distil    tcl_core.distill: ranking loss + distillation towards the previous student on the new
            platform's unlabelled candidates (constant size, no old data)
  finetune  the same without the distillation term
  scratch   a fresh student on the new platform's picks alone
  multitask one shared trunk with a head per platform, retrained each step on every platform's
            data so far (needs all old data; grows by one head per platform)
After each step every model is scored (top-1) on every platform's held-out models: the
forgetting matrix. Results: research/results/continual_<mode>.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tcl_core.distill import DistillConfig, distil_student  # noqa: E402
from tcl_core.evaluate import evaluate, open_student  # noqa: E402
from tcl_core.rdu import select_subset  # noqa: E402
from tcl_core.student import Student, StudentConfig, parameter_count, save_student, train_steps  # noqa: E402
from tcl_core.train import load_split, split_databases, to_groups  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _load(platform_dir: Path) -> tuple[list, list]:
    split = split_databases(platform_dir)
    return load_split(split["train"]), load_split(split["eval"])


def _scores(model, tasks) -> dict:
    report = evaluate(model, tasks)
    return {key: round(report[key], 4) for key in ("top1", "top5", "pairwise_accuracy", "random_top1", "random_top5")}


SCRATCH_METHODS = ("full", "rdu", "random")
TEACHER_METHODS = ("teacher", "full+distil", "rdu+distil", "random+distil")


def efficiency(args) -> dict:
    train, held_out = _load(args.data)
    teacher = open_student(args.teacher) if args.teacher else None
    embed_with = args.embed_with or args.teacher  # TCL embeds a new platform's pool with the previous student
    embedder = open_student(embed_with) if embed_with else None
    methods = args.methods or (TEACHER_METHODS if teacher else SCRATCH_METHODS)
    if teacher is None and any(m in TEACHER_METHODS for m in methods):
        raise SystemExit(f"methods {', '.join(TEACHER_METHODS)} need --teacher")
    rows = []
    if args.save_students:
        args.save_students.mkdir(parents=True, exist_ok=True)
    for steps, seed, method in itertools.product(args.steps, args.seeds, methods):
        picked_once = method in ("full", "full+distil", "teacher")  # nothing random to vary but training
        if picked_once and seed != args.seeds[0] and not args.all_seeds_full:
            continue
        if method == "teacher" and steps != args.steps[0]:
            continue  # untrained: one row whatever the steps
        started = time.perf_counter()
        pick = method.removesuffix("+distil")
        tasks = train if pick in ("full", "teacher") else select_subset(
            train, args.fraction, method=pick, student=embedder, seed=seed)
        pick_seconds = time.perf_counter() - started
        if method == "teacher":
            student = teacher  # zero-shot: the other platform's student, untouched
        elif method.endswith("+distil"):  # TCL: start from the teacher, rank loss + distillation on the pool
            student, _ = distil_student(teacher, tasks, pool=train, config=DistillConfig(
                steps=steps, seed=seed, alpha=args.alpha))
        else:
            student, _ = distil_student(None, tasks, config=DistillConfig(steps=steps, seed=seed))
        if args.save_students and method != "teacher":
            save_student(student, args.save_students / f"{method}-{steps}-seed{seed}.pt")
        row = {"method": method, "steps": 0 if method == "teacher" else steps, "seed": seed,
               "records": 0 if method == "teacher" else sum(t.size for t in tasks),
               "pick_seconds": round(pick_seconds, 1), **_scores(student, held_out)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"data": str(args.data), "fraction": args.fraction, "steps": args.steps,
            "embed_with": str(embed_with) if embed_with else None,
            "teacher": str(args.teacher) if args.teacher else None, "alpha": args.alpha if teacher else None,
            "train_records": sum(t.size for t in train), "eval_records": sum(t.size for t in held_out), "rows": rows}


class MultiHead(nn.Module):
    """The multi-task baseline: one Student trunk, one scoring head per platform."""

    def __init__(self, config: StudentConfig) -> None:
        super().__init__()
        self.trunk = Student(config)
        self.heads = nn.ModuleList()
        self.config = config

    def add_head(self) -> int:
        self.heads.append(copy.deepcopy(self.trunk.head))
        return len(self.heads) - 1

    def view(self, index: int) -> nn.Module:
        return _HeadView(self, index)


class _HeadView(nn.Module):
    """One platform's scorer, with the Student's call signature (for train_steps and evaluate)."""

    def __init__(self, multi: MultiHead, index: int) -> None:
        super().__init__()
        self.multi, self.index, self.config = multi, index, multi.config

    def forward(self, features, mask=None, *, sequential=None):
        return self.multi.heads[self.index](self.multi.trunk.encode(features, mask, sequential=sequential)).squeeze(-1)


def _train_multitask(multi: MultiHead, per_platform: list[list], steps: int, seed: int) -> None:
    """Joint training: each step one task group of one platform, platforms taking turns."""
    torch.manual_seed(seed)
    optimiser = torch.optim.Adam(multi.parameters(), lr=1e-3)
    groups = [to_groups(tasks, multi.config.max_len) for tasks in per_platform]
    for step in range(steps):
        index = step % len(groups)
        train_steps(multi.view(index), groups[index], steps=1, lr=1e-3, sequential=True, optimiser=optimiser)


def transfer(args) -> dict:
    platforms = [Path(p) for p in args.sequence]
    data = {p.name: _load(p) for p in platforms}
    names = [p.name for p in platforms]
    steps_out = []
    first_train = data[names[0]][0]
    base, _ = distil_student(None, first_train, config=DistillConfig(steps=args.steps, seed=args.seed))
    models = {method: base for method in ("distil", "finetune", "scratch") if method in args.methods}
    multi = MultiHead(base.config)
    multi.trunk.load_state_dict(base.state_dict())
    multi.add_head()
    multi.heads[0].load_state_dict(base.head.state_dict())
    seen = [first_train]
    extra = {"multitask": multi} if "multitask" in args.methods else {}
    steps_out.append(_score_step(names[0], names, data, {**models, **extra}, 1, records=sum(t.size for t in first_train)))
    for index, name in enumerate(names[1:], start=1):
        train_all = data[name][0]
        started = time.perf_counter()
        picks = select_subset(train_all, args.fraction, method="rdu", student=models["distil"], seed=args.seed)
        pick_seconds = time.perf_counter() - started
        config = DistillConfig(steps=args.steps, seed=args.seed, alpha=args.alpha)
        train = {
            "distil": lambda: distil_student(models["distil"], picks, pool=train_all, config=config)[0],
            "finetune": lambda: distil_student(models["finetune"], picks, config=DistillConfig(
                steps=args.steps, seed=args.seed, alpha=0.0))[0],
            "scratch": lambda: distil_student(None, picks, config=DistillConfig(steps=args.steps, seed=args.seed))[0],
        }
        models = {method: make() for method, make in train.items() if method in args.methods}
        if args.save_students:
            args.save_students.mkdir(parents=True, exist_ok=True)
            for method, model in models.items():
                save_student(model, args.save_students / f"{index + 1}-{name}-{method}.pt")
        multi.add_head()
        seen.append(picks)
        if "multitask" in args.methods:
            _train_multitask(multi, seen, args.steps * len(seen), args.seed)
        extra = {"multitask": multi} if "multitask" in args.methods else {}
        steps_out.append(_score_step(name, names, data, {**models, **extra}, index + 1,
                                     records=sum(t.size for t in picks), pick_seconds=round(pick_seconds, 1)))
    return {"sequence": names, "fraction": args.fraction, "steps": args.steps, "alpha": args.alpha,
            "methods": args.methods,
            "parameters": {"student": parameter_count(base),  # the trunk's own head is unused in multitask
                           "multitask": parameter_count(multi) - parameter_count(multi.trunk.head)},
            "steps_out": steps_out}


def _score_step(name, names, data, models, heads, **extra) -> dict:
    scores = {}
    for method, model in models.items():
        scores[method] = {}
        for position, other in enumerate(names):
            if method == "multitask":
                if position >= heads:
                    continue  # no head for a platform not seen yet
                model_view = model.view(position)
            else:
                model_view = model
            scores[method][other] = _scores(model_view, data[other][1])["top1"]
    row = {"trained_on": name, **extra, "top1": scores}
    print(json.dumps(row), flush=True)
    return row


def _markdown(mode: str, result: dict, command: str) -> str:
    lines = [f"# Continual learning: {mode}", "", f"Command: `{command}`", ""]
    if mode == "efficiency":
        steps = result["steps"] if isinstance(result["steps"], list) else [result["steps"]]
        lines += [f"Data `{result['data']}`: {result['train_records']} train records, {result['eval_records']} held-out "
                  f"records (eval split); {', '.join(map(str, steps))} steps; embeddings for RDU: "
                  f"{result['embed_with'] or 'raw features'}. "
                  + (f"`+distil` rows start from the teacher {result['teacher']} and train with the ranking loss "
                     f"plus distillation (alpha {result['alpha']}) on the unlabelled train pool; `teacher` is "
                     "that student untouched. " if result.get("teacher") else "")
                  + "Other rows train from scratch.", "",
                  "| method | steps | records | top-1 | top-5 | pairwise | seeds |", "|---|---|---|---|---|---|---|"]

        def row_steps(row: dict) -> int:  # rows of older results carry no steps: they had one value
            return row.get("steps", 0 if row["method"] == "teacher" else steps[0])

        for method, method_steps in dict.fromkeys((r["method"], row_steps(r)) for r in result["rows"]):
            rows = [r for r in result["rows"] if r["method"] == method and row_steps(r) == method_steps]
            top1, top5, pair = (np.array([r[k] for r in rows]) for k in ("top1", "top5", "pairwise_accuracy"))
            lines.append(f"| {method} | {method_steps} | {rows[0]['records']} | {top1.mean():.3f} ± {top1.std():.3f} | "
                         f"{top5.mean():.3f} ± {top5.std():.3f} | {pair.mean():.3f} | {len(rows)} |")
        random_top1 = result["rows"][0]["random_top1"]
        lines += ["", f"Random ranking of the held-out candidates: top-1 {random_top1:.3f}."]
    else:
        names = result["sequence"]
        lines += [f"Platforms in order: {', '.join(names)}; each after the first sees {result['fraction']:.0%} of its "
                  f"train split's candidates (RDU picks). Parameters: student {result['parameters']['student']}, "
                  f"multi-task {result['parameters']['multitask']} after {len(names)} heads.", "",
                  "Top-1 on each platform's held-out models after each step:", "",
                  "| after | method | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for step in result["steps_out"]:
            for method, scores in step["top1"].items():
                cells = [f"{scores[n]:.3f}" if n in scores else "" for n in names]
                lines.append(f"| {step['trained_on']} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    eff = sub.add_parser("efficiency")
    eff.add_argument("--data", type=Path, required=True)
    eff.add_argument("--embed-with", type=Path)
    eff.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    eff.add_argument("--all-seeds-full", action="store_true", help="train the 100%% student once per seed too")
    eff.add_argument("--teacher", type=Path, help="another platform's student: adds the distilled rows")
    eff.add_argument("--alpha", type=float, default=DistillConfig.alpha, help="distillation weight for +distil")
    eff.add_argument("--save-students", type=Path, default=None,
                     help="write each trained student here as <method>-<steps>-seed<seed>.pt")
    eff.add_argument("--methods", nargs="+", choices=SCRATCH_METHODS + TEACHER_METHODS,
                     help="default: the scratch ones, or with --teacher the teacher ones")
    tra = sub.add_parser("transfer")
    tra.add_argument("--sequence", type=Path, nargs="+", required=True)
    tra.add_argument("--seed", type=int, default=0)
    tra.add_argument("--alpha", type=float, default=0.1)
    tra.add_argument("--save-students", type=Path, default=None, help="write each step's students here")
    tra.add_argument("--methods", nargs="+", default=["distil", "finetune", "scratch", "multitask"])
    eff.add_argument("--steps", type=int, nargs="+", default=[600], help="one run per value (a learning curve)")
    tra.add_argument("--steps", type=int, default=600)
    for p in (eff, tra):
        p.add_argument("--fraction", type=float, default=0.1)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--results", default=None, help="results file stem (default continual_<mode>)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result = efficiency(args) if args.mode == "efficiency" else transfer(args)
    result["seconds"] = round(time.perf_counter() - started, 1)
    command = "python -m research.continual " + " ".join(sys.argv[1:])
    result["command"] = command
    stem = args.results or f"continual_{args.mode}"  # may hold dots ("alpha0.1"): no with_suffix
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(args.mode, result, command))
    print((RESULTS / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
