"""`tcl-tuned collect`: measure candidate programs of the zoo's tasks on this platform.

Candidates should span the space, as TenSet's do, not only the best: each task gets half its
budget from an evolutionary search driven by the "random" cost model (close to random
sampling of the space) and half from one driven by "xgb" (evolved, good programs). Records are
TVM's own JSON tuning database, one folder per model under `<out>/<platform>/`, so any tool
that reads MetaSchedule databases reads them. Resumable: a task that already holds a phase's
share of records is skipped. `card.json` (and `card.md`) say what was measured and how long it took.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import onnx

from tcl_core import tuning, tvm_api
from tcl_core.platform import cpu_model_name, platform_name
from tcl_core.zoo import ZooModel, export_onnx

Log = Callable[[str], None]

# lower_for_tuning's defaults: the forms every folder collected before 2026-12-07 was lowered in
TVM_LOWERING = {"fast_math": False, "pack_weights": False, "conv_layout": "NCHW"}


def collect(
    out: Path,
    *,
    models: list[ZooModel],
    trials_per_task: int,
    target: dict | None = None,
    trials_per_iter: int = 16,
    population: int = 256,
    lowering: dict | None = None,
    log: Log = print,
) -> Path:
    """Measure `trials_per_task` candidates for every task of `models`; return the platform folder.

    `lowering`: tcl_core.tvm_api.lower_for_tuning's options (fast_math, pack_weights, conv_layout),
    the forms the tasks are tuned in; None: TVM's own (`TVM_LOWERING`). A student learns the forms
    it is trained on, so pass what jobs tune (the CLI passes the pipeline's defaults) and never
    mix forms in one folder.
    """
    target_dict = target or tvm_api.host_target_dict()
    tvm_target = tvm_api.make_target(target_dict)
    root = Path(out) / platform_name(target_dict, tvm_api.TVM_VERSION)
    card = load_card(root, target_dict)
    # Candidates run on the target's cores, as the pipeline measures them. Folders collected before
    # 2026-12-07 ran on TVM's x86 default, half the cores (one here), and say nothing: no mixing.
    threads = int(target_dict.get("num-cores") or os.cpu_count() or 1)
    if card["models"] and card.get("threads", 1) != threads:
        raise ValueError(f"{root} holds records measured on {card.get('threads', 1)} thread(s); these would run on "
                         f"{threads}: collect into another --out")
    card["threads"] = threads
    lowering = dict(TVM_LOWERING, **(lowering or {}))
    if card["models"] and card.get("lowering", TVM_LOWERING) != lowering:
        raise ValueError(f"{root} holds records lowered with {card.get('lowering', TVM_LOWERING)}; these would be "
                         f"lowered with {lowering}: collect into another --out")
    card["lowering"] = lowering
    for zoo_model in models:
        name = zoo_model.name
        started = time.perf_counter()
        tasks = _tasks_of(zoo_model, root, tvm_target, lowering)
        database = tvm_api.open_database(root / name)
        entry = card["models"].setdefault(name, {"split": zoo_model.split, "seconds": 0.0})
        entry["tasks"] = [{"name": t.task_name, "weight": int(t.weight),
                           "structural_hash": str(tvm_api.structural_hash(t.dispatched[0]))} for t in tasks]
        half = max(trials_per_iter, trials_per_task // 2)
        for phase, cost_model, share in (("spread", "random", half), ("evolved", "xgb", trials_per_task)):
            need = [share - tvm_api.count_records(database, t.dispatched[0]) for t in tasks]
            todo = [(task, missing) for task, missing in zip(tasks, need) if missing > 0]
            log(f"{name}: {phase} phase ({cost_model}), {len(todo)}/{len(tasks)} tasks to measure")
            if todo:
                tuning.tune(
                    tasks=[task for task, _ in todo], target=tvm_target, database=database,
                    work_dir=root / "logs" / name, cost_model=cost_model,
                    max_trials_global=sum(missing for _, missing in todo),
                    max_trials_per_task=max(missing for _, missing in todo),
                    num_trials_per_iter=trials_per_iter, population=population, seed=0,
                    on_measured=lambda done: log(f"{name}: {phase}: {done.trials} measured"), threads=threads,
                )
            entry["seconds"] = round(entry["seconds"] + time.perf_counter() - started, 1)
            started = time.perf_counter()
            entry["records"] = len(database)
            write_card(root, card)
    return root


def _tasks_of(zoo_model: ZooModel, root: Path, target, lowering: dict) -> list:
    onnx_path = root / "models" / f"{zoo_model.name}.onnx"
    if not onnx_path.exists():
        export_onnx(zoo_model, onnx_path)
    mod = tvm_api.from_onnx(onnx.load(str(onnx_path)), shape_dict={"x": list(zoo_model.input_shape)})
    return tvm_api.extract_tasks(tvm_api.lower_for_tuning(mod, target, **lowering), target)


def load_card(root: Path, target: dict, *, method: str | None = None) -> dict:
    """The dataset card of a platform folder, or a new one saying how its records are made (`method`)."""
    path = root / "card.json"
    if path.exists():
        return json.loads(path.read_text())
    method = method or __doc__.split("\n\n")[1]
    return {"platform": root.name, "target": target, "cpu": cpu_model_name(), "tvm_version": tvm_api.TVM_VERSION,
            "method": method.replace("\n", " "), "models": {}}


def write_card(root: Path, card: dict) -> None:
    """card.json (atomically) and a readable card.md beside the model folders."""
    root.mkdir(parents=True, exist_ok=True)
    card["records"] = sum(m.get("records", 0) for m in card["models"].values())
    card["hours"] = round(sum(m["seconds"] for m in card["models"].values()) / 3600, 3)
    (root / "card.json.tmp").write_text(json.dumps(card, indent=2) + "\n")
    (root / "card.json.tmp").rename(root / "card.json")
    lines = [f"# Dataset card: {card['platform']}", "", f"CPU: {card['cpu']}; target `{json.dumps(card['target'])}`; "
             f"TVM {card['tvm_version']}.", "", card["method"], "",
             f"{card['records']} records, {card['hours']} hours of measurement.", ""]
    if "lowering" in card:
        forms = ", ".join(f"{key} {value}" for key, value in card["lowering"].items())
        lines += [f"Timed on {card.get('threads', 1)} thread(s); tasks lowered with {forms}.", ""]
    if "bootstrap" in card:
        boot = card["bootstrap"]
        names = [name for name, model in card["models"].items() if model.get("bootstrapped")]
        lines += [f"Bootstrapped (`collect --bootstrap-from`): {', '.join(names) or 'its models'}, from {boot['source']}: "
                  f"{boot['fraction']:.0%} of each task's candidates there, RDU picks embedded by {boot['embedded_by']}, "
                  "measured here.", ""]
    lines += ["| model | split | tasks | records | hours |", "|---|---|---|---|---|"]
    for name, model in card["models"].items():
        lines.append(f"| {name} | {model['split']} | {len(model.get('tasks', []))} | {model.get('records', 0)} | "
                     f"{model['seconds'] / 3600:.3f} |")
    (root / "card.md").write_text("\n".join(lines) + "\n")
