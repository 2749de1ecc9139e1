"""`tcl-tuned collect --bootstrap-from`: measure here the RDU-chosen share of another platform's candidates.

A new platform starts with no measurements. Instead of sampling the space afresh, take the
candidates another platform already measured (a collected folder, `data/<platform>/`), let the
RDU sampler (tcl_core.rdu) pick the most informative `fraction` of each task's, in the embedding
of the student nearest to this platform, and measure only those here. What it picks never looks
at the other platform's run times. The result is an ordinary collected folder for this platform
(the same model folders; a card saying where the candidates came from and how long they took),
ready for `tcl-tuned cost-model train` or for distillation from the nearest student
(research/continual.py). Resumable: a task that already holds its share here is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tcl_core import tvm_api
from tcl_core.collect import load_card, write_card
from tcl_core.features import trace_features
from tcl_core.platform import platform_name
from tcl_core.rdu import embed_candidates, rdu_select, subset_size
from tcl_core.records import RECORD_FILE, load_task_records
from tcl_core.student import Student

__all__ = ["bootstrap"]

Log = Callable[[str], None]


def bootstrap(
    source: Path, out: Path, *, fraction: float, student: Student | None, student_name: str,
    target: dict | None = None, models: list[str] | None = None, log: Log = print,
) -> Path:
    """Measure `fraction` of each task's candidates in `source` (RDU picks) on `target`; return its folder.

    `student` embeds the candidates for RDU (None: raw features, see tcl_core.rdu), named in the
    card as `student_name`. `models`: only these model folders of `source` (default: all of them).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    source = Path(source)
    model_dirs = sorted(path.parent for path in source.glob(f"*/{RECORD_FILE}"))
    if not model_dirs:
        raise FileNotFoundError(f"{source} holds no tuning databases (<model>/{RECORD_FILE})")
    if models:
        missing = sorted(set(models) - {d.name for d in model_dirs})
        if missing:
            raise ValueError(f"{source} holds no model folder {', '.join(missing)}; it has "
                             f"{', '.join(d.name for d in model_dirs)}")
        model_dirs = [d for d in model_dirs if d.name in models]
    target_dict = target or tvm_api.host_target_dict()
    tvm_target = tvm_api.make_target(target_dict)
    root = Path(out) / platform_name(target_dict, tvm_api.TVM_VERSION)
    if root.resolve() == source.resolve():
        raise ValueError(f"{source} is this platform's own folder; bootstrap from another platform's")
    source_card = load_card(source, {})
    card = load_card(root, target_dict, method=__doc__.split("\n\n")[1])
    card["bootstrap"] = {"source": source.name, "fraction": fraction, "embedded_by": student_name}
    for model_dir in model_dirs:
        name = model_dir.name
        started = time.perf_counter()
        captured: list[tuple[object, list]] = []  # (workload, its records), in the order of the tasks

        def keep_records(workload, records) -> list:
            captured.append((workload, records))
            return [trace_features(record.trace) for record in records]

        tasks = load_task_records(model_dir, featurise_task=keep_records)
        database = tvm_api.open_database(root / name)
        source_entry = source_card["models"].get(name, {})
        entry = card["models"].setdefault(name, {"split": source_entry.get("split", "train"), "seconds": 0.0})
        entry["tasks"] = source_entry.get("tasks", [])  # the task weights, for top-k
        entry["bootstrapped"] = True  # a card may also hold models collected here afresh (card.md says which)
        measured = 0
        for task, (workload, records) in zip(tasks, captured):
            share = subset_size(task.size, fraction)
            if tvm_api.count_records(database, workload.mod) >= share:
                continue
            embeddings, uncertainty = embed_candidates(list(task.features), student)
            chosen = rdu_select(embeddings, uncertainty, share)
            seconds = tvm_api.measure_records([records[i] for i in chosen], workload.mod,
                                              target=tvm_target, database=database)
            measured += len(seconds)
            failed = sum(s is None for s in seconds)
            log(f"{name}: task {task.task_index}: measured {len(seconds)} of {task.size}"
                + (f" ({failed} failed)" if failed else ""))
        entry["seconds"] = round(entry["seconds"] + time.perf_counter() - started, 1)
        entry["records"] = len(database)
        write_card(root, card)
        log(f"{name}: {measured} measured here, {entry['records']} in {root / name}")
    return root
