"""Offline training of a student on collected tuning databases, evaluated on held-out ones.

Data comes from `tcl-tuned collect` (`<data>/<platform>/<model>/`, split named in card.json):
every task's measured candidates become one ranking group, labels normalised within the task.
The trained student is saved with a model card (data, metrics, command) beside it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tcl_core.distill import DistillConfig, distil_student
from tcl_core.evaluate import evaluate
from tcl_core.features import TRACE_FEATURE_DIM
from tcl_core.fit import to_groups, train_student
from tcl_core.records import FeaturiseTask, RecordsError, TaskRecords, card_weights, load_task_records
from tcl_core.student import GAIN_SCALE, StudentConfig, parameter_count, save_student

# to_groups and train_student live in tcl_core.fit (distill uses them too); kept importable from here.
__all__ = ["split_databases", "chosen_train_split", "load_split", "to_groups", "train_student", "train_and_report"]


def split_databases(platform_dir: Path) -> dict[str, list[Path]]:
    """{"train": [...], "eval": [...]}: the model folders of a collected platform, by their card's split."""
    card = json.loads((Path(platform_dir) / "card.json").read_text())
    split: dict[str, list[Path]] = {"train": [], "eval": []}
    for name, model in card["models"].items():
        if (Path(platform_dir) / name / "database_tuning_record.json").is_file():
            split[model["split"]].append(Path(platform_dir) / name)
    return split


def chosen_train_split(train_dirs: list[Path], names: list[str] | None) -> list[Path]:
    """The train split's model folders named in `names` (all when None), in the split's order."""
    if names is None:
        return train_dirs
    known = {path.name: path for path in train_dirs}
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise RecordsError(f"model(s) {unknown} are not in the train split {sorted(known)}")
    return [path for path in train_dirs if path.name in names]


def load_split(database_dirs: list[Path], featurise_task: FeaturiseTask | None = None) -> list[TaskRecords]:
    """All tasks of these databases, each weighted by how often it occurs in its model.

    Features are trace features unless `featurise_task` is given (see records.load_task_records).
    """
    return [task for folder in database_dirs
            for task in load_task_records(folder, weights=card_weights(folder), featurise_task=featurise_task)]


def train_and_report(platform_dir: Path, out: Path, *, steps: int, lr: float = 1e-3, seed: int = 0,
                     config: StudentConfig | None = None, version: int = 1, also_eval: tuple[Path, ...] = (),
                     teacher: Path | None = None, fraction: float = 1.0, alpha: float = 0.1,
                     schedule: str = "constant", gain_scale: float = GAIN_SCALE,
                     train_models: tuple[str, ...] = (), log: Callable[[str], None] = print) -> dict:
    """Train on the platform's train split, evaluate on both splits, save the student and its card.

    `also_eval` names more databases (another platform's, say) to score the student on; their
    numbers go in the card under their folder's path. `teacher` and/or `fraction` < 1 bootstrap a
    platform the TCL way: only `fraction` of each task's candidates, picked by the RDU sampler
    (embedded by the teacher), are used as labels, and the student starts from the teacher and
    is distilled towards it on all the train split's candidates (tcl_core.distill, `alpha`).
    `train_models` trains on only these model folders of the train split (all when empty); the
    card's command names the models it trained on either way, so it still rebuilds the same
    student after more models are collected. The card is written twice: `<out>.json`
    for programs (tcl_core.students reads its `version`) and `<out>.md` for people.
    """
    split = split_databases(platform_dir)
    split["train"] = chosen_train_split(split["train"], list(train_models) or None)
    started = time.perf_counter()
    train_tasks, eval_tasks = load_split(split["train"]), load_split(split["eval"])
    load_seconds = time.perf_counter() - started
    log(f"loaded {sum(t.size for t in train_tasks)} train / {sum(t.size for t in eval_tasks)} eval records "
        f"in {load_seconds:.1f} s")
    started = time.perf_counter()
    config = config or StudentConfig(feature_dim=TRACE_FEATURE_DIM)
    labelled = train_tasks
    if teacher is None and fraction >= 1.0:
        student, losses = train_student(train_tasks, steps=steps, lr=lr, seed=seed, config=config, schedule=schedule,
                                        gain_scale=gain_scale)
    else:
        from tcl_core.rdu import select_subset
        from tcl_core.student import load_student

        teacher_model = load_student(teacher) if teacher is not None else None
        if fraction < 1.0:
            labelled = select_subset(train_tasks, fraction, method="rdu", student=teacher_model, seed=seed)
        student, losses = distil_student(teacher_model, labelled, pool=train_tasks, student_config=config,
                                         config=DistillConfig(steps=steps, lr=lr, alpha=alpha, seed=seed))
    train_seconds = time.perf_counter() - started
    config = student.config  # with a teacher, the teacher's sizes
    command = (f"tcl-tuned cost-model train --data {platform_dir} --out {out} --steps {steps} --lr {lr} --seed {seed} "
               f"--d-model {config.d_model} --d-state {config.d_state} --layers {config.n_layers} --version {version}"
               + (f" --schedule {schedule}" if schedule != "constant" else "")
               + (f" --gain-scale {gain_scale:g}" if gain_scale != GAIN_SCALE else "")
               + (f" --teacher {teacher} --alpha {alpha}" if teacher is not None else "")
               + (f" --fraction {fraction}" if fraction < 1.0 else "")
               + "".join(f" --train-model {path.name}" for path in split["train"])
               + "".join(f" --also-eval {path}" for path in also_eval))
    card = {
        "version": version, "command": command,
        "platform": Path(platform_dir).name,
        "train_models": [p.name for p in split["train"]], "eval_models": [p.name for p in split["eval"]],
        "train_records": sum(t.size for t in labelled), "eval_records": sum(t.size for t in eval_tasks),
        "pool_records": sum(t.size for t in train_tasks), "fraction": fraction,
        "teacher": str(teacher) if teacher is not None else None,
        "train_tasks": len(train_tasks), "eval_tasks": len(eval_tasks),
        "parameters": parameter_count(student), "config": student.config.__dict__,
        "steps": steps, "lr": lr, "schedule": schedule, "gain_scale": gain_scale, "seed": seed, "train_seconds": round(train_seconds, 1),
        "final_loss": float(np.mean(losses[-50:])) if losses else None,
        "metrics": {"train": evaluate(student, train_tasks) if train_tasks else None,
                    "eval": evaluate(student, eval_tasks) if eval_tasks else None,
                    **{str(path): evaluate(student, load_split([Path(path)])) for path in also_eval}},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_student(student, out)
    out.with_suffix(".json").write_text(json.dumps(card, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(model_card_markdown(card))
    log(json.dumps(card["metrics"], indent=2))
    return card


def model_card_markdown(card: dict) -> str:
    """The human-readable model card: what the student learned from, how well it ranks, how to rebuild it."""
    rows = [f"| {name} | {m['top1']:.3f} | {m['top5']:.3f} | {m['pairwise_accuracy']:.3f} | "
            f"{m['random_top1']:.3f} | {m['random_top5']:.3f} |" for name, m in card["metrics"].items() if m]
    lines = [
        f"# Student model card: {card['platform']} (version {card['version']})", "",
        "A TCL Mamba cost model (tcl_core/student.py) over schedule-trace features (tcl_core/features.py), "
        "trained with LambdaRank within each task. Higher score = predicted faster; only the order "
        "within one task means anything.", "",
        f"- Data: `{card['platform']}`, trained on {', '.join(card['train_models'])} ({card['train_records']} "
        f"records, {card['train_tasks']} tasks)"
        + (f", the RDU sampler's {card['fraction']:.0%} of {card['pool_records']} records" if card.get("fraction", 1) < 1 else "")
        + (f", distilled from `{card['teacher']}`" if card.get("teacher") else "")
        + f"; held out: {', '.join(card['eval_models'])} ({card['eval_records']} "
        f"records, {card['eval_tasks']} tasks). Dataset card: `data/{card['platform']}/card.md`.",
        f"- Size: {card['parameters']} parameters; config `{json.dumps(card['config'])}`.",
        f"- Training: {card['steps']} Adam steps (lr {card['lr']}, {card.get('schedule', 'constant')} schedule, "
        f"LambdaRank gains 2^({card.get('gain_scale', 1.0):g} label) - 1, seed {card['seed']}), "
        f"{card['train_seconds']} s; final loss {card['final_loss']:.3f}.",
        f"- Reproduce: `{card['command']}`", "",
        "TenSet top-k (task-weighted; best true throughput among the k ranked highest over the best "
        "measured), pairwise ranking accuracy, and the exact random-ranking expectation:", "",
        "| data | top-1 | top-5 | pairwise | random top-1 | random top-5 |", "|---|---|---|---|---|---|", *rows,
    ]
    return "\n".join(lines) + "\n"
