"""Replay a tuning search offline on collected records: which cost model finds each task's best, and how fast.

    .venv/bin/python -m research.search_replay --data data/<platform> [--database DIR ...] \
        --student PATH [--policies tcl tcl:steps=0 xgb random] [--rounds 4] [--batch 8] \
        [--seeds 0 1 2] [--results search_replay]

A real tuning pair costs 13 minutes of both cores and its outcome swings with the evolution's
luck on a few big tasks (docs/cost_model.md, "Budget"), too noisy to tune the in-search update with. Here a
job is replayed on records already measured: each task's candidate pool is its stored records,
and "measuring" a candidate looks up its stored time. Per job (one model), round after round,
each task in turn: the cost model scores the task's unmeasured candidates, the top
(batch - random) are measured with `random` = floor(explore x batch) drawn uniformly from the
rest (MetaSchedule's eps-greedy), and the cost model's `update` gets them, exactly as
MetaSchedule calls `predict` and `update`. Cost models are the real ones (`TclCostModel`, TVM's
`XGBModel` as `deploy` makes it, random).

After each round: the task-weighted sum of the best time found per task over the sum of each
task's best stored time ("kernels", >= 1, what the latency would be relative to the pool's
best) and the weighted mean of best / found per task ("found"), mean and spread over seeds.

What it does not replay: the evolution (the pool is fixed: half of it came from a random-driven
search, half from an xgb-driven one, `tcl-tuned collect`), and the gradient task scheduler
(tasks take turns). It compares ranking-plus-update policies on equal candidates, nothing more.

Policy specs: `random`, `xgb`, `tcl[:steps=N][:lr=X][:gain=G][:scope=job|task][:blend=W][:explore=E]`
(defaults are the adapter's and deploy's: 8 steps, lr 1e-4, gain 1, scope job, explore 0.25; `xgb`
explores 0 as TVM's 0.05 rounds down at a batch of 8; `blend=W` adds W x TVM's XGBoost, trained
online on the same measurements, to the student's scores, both standardised: an experiment, not
a cost model the daemon offers). Writes research/results/<results>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from research.cost_model_eval import database_groups  # noqa: E402
from tcl_core import tuning, tvm_api  # noqa: E402
from tcl_core.records import card_weights  # noqa: E402
from tcl_core.train import split_databases  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
_FAILED = 1e10  # what MetaSchedule stores for a failed run


@dataclass
class Task:
    """One task's pool: its workload, stored candidates and their times."""

    name: str
    mod: object
    candidates: list        # MeasureCandidate per stored record
    seconds: np.ndarray     # (g,) mean run seconds; inf for a failure
    weight: float

    @property
    def best(self) -> float:
        return float(self.seconds.min())


@dataclass(frozen=True)
class Policy:
    """A cost model and its share of random picks."""

    kind: str  # "tcl", "xgb" or "random"
    explore: float
    steps: int = 8
    lr: float = 1e-4
    gain: float = 1.0
    scope: str = "job"
    blend: float = 0.0  # weight of TVM's XGBoost beside the student (tcl only; 0: the student alone)
    spec: str = ""


def parse_policy(spec: str) -> Policy:
    """'tcl:steps=32:lr=0.001:gain=4:explore=0.25' -> Policy; unknown keys or kinds raise ValueError."""
    kind, *options = spec.split(":")
    if kind not in ("tcl", "xgb", "random"):
        raise ValueError(f"policy {spec!r}: kind must be tcl, xgb or random")
    values: dict = {"explore": 0.25 if kind == "tcl" else 0.0}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("steps", "lr", "gain", "explore", "scope", "blend") or not value:
            raise ValueError(f"policy {spec!r}: expected key=value with key steps, lr, gain, scope, blend or explore")
        if key == "scope" and value not in ("job", "task"):
            raise ValueError(f"policy {spec!r}: scope is job or task")
        values[key] = value if key == "scope" else float(value)
    if kind != "tcl" and set(values) - {"explore"}:
        raise ValueError(f"policy {spec!r}: only tcl takes steps, lr, gain, scope and blend")
    return Policy(kind=kind, explore=values["explore"], steps=int(values.get("steps", 8)),
                  lr=values.get("lr", 1e-4), gain=values.get("gain", 1.0), scope=values.get("scope", "job"),
                  blend=values.get("blend", 0.0), spec=spec)


def load_tasks(database_dir: Path) -> list[Task]:
    """The tasks of one collected model folder, in database order, weighted by its card."""
    weights = card_weights(database_dir)
    return [Task(name=f"{database_dir.name}/{index}", mod=mod, candidates=candidates, seconds=seconds,
                 weight=weights.get(str(key), 1.0))
            for index, (key, (mod, candidates, seconds)) in enumerate(database_groups(database_dir).items())
            if np.isfinite(seconds).any()]


def make_model(policy: Policy, student_path: Path):
    if policy.kind == "tcl":
        from tcl_core.cost_model import TclCostModel
        from tcl_core.student import load_student

        student = TclCostModel(load_student(student_path), update_steps=policy.steps, lr=policy.lr,
                               update_gain_scale=policy.gain, update_scope=policy.scope)
        return Blend(student, tuning.make_cost_model("xgb"), policy.blend) if policy.blend else student
    return tuning.make_cost_model(policy.kind)


def standardised(scores) -> np.ndarray:
    """(g,) scores shifted and scaled to mean 0, std 1; all zeros when they are all equal."""
    scores = np.asarray(scores, dtype=np.float64)
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)


class Blend:
    """The student plus `weight` x TVM's XGBoost, each standardised over the candidates scored.

    Both learn from every measurement; XGBoost starts from nothing, scores all candidates alike
    until it has trained (standardised to 0, so the student decides alone), and then adds what
    it learns online from the job to the student's offline ranking.
    """

    def __init__(self, student, xgb, weight: float) -> None:
        self.student, self.xgb, self.weight = student, xgb, weight

    def predict(self, context, candidates) -> np.ndarray:
        return (standardised(self.student.predict(context, candidates))
                + self.weight * standardised(self.xgb.predict(context, candidates)))

    def update(self, context, candidates, results) -> None:
        self.student.update(context, candidates, results)
        self.xgb.update(context, candidates, results)


def pick(scores: np.ndarray, batch: int, explore: float, rng: np.random.Generator) -> np.ndarray:
    """Indices into `scores` to measure: the top batch - floor(explore * batch), the rest at random.

    Ties in the scores are broken at random (XGBoost scores 0 for everything before it trains).
    """
    batch = min(batch, len(scores))
    n_random = min(int(explore * batch), batch)
    order = np.lexsort((rng.random(len(scores)), -np.asarray(scores, dtype=np.float64)))  # best first
    chosen = list(order[:batch - n_random])
    rest = order[batch - n_random:]
    chosen += list(rng.choice(rest, size=n_random, replace=False)) if n_random else []
    return np.asarray(chosen, dtype=int)


def replay_job(tasks: list[Task], model, policy: Policy, *, rounds: int, batch: int, target,
               rng: np.random.Generator) -> list[list[float]]:
    """Best seconds found per task after each round: [round][task]."""
    measured = [np.zeros(len(t.candidates), dtype=bool) for t in tasks]
    contexts = [tvm_api.ms.TuneContext(mod=t.mod, target=target, task_name=t.name) for t in tasks]
    found_after: list[list[float]] = []
    best = [math.inf] * len(tasks)
    for _ in range(rounds):
        for index, task in enumerate(tasks):
            left = np.flatnonzero(~measured[index])
            if len(left) == 0:
                continue
            scores = np.asarray(model.predict(contexts[index], [task.candidates[i] for i in left]))
            chosen = left[pick(scores, batch, policy.explore, rng)]
            measured[index][chosen] = True
            best[index] = min(best[index], float(task.seconds[chosen].min()))
            results = [tvm_api.ms.runner.RunnerResult(
                run_secs=[float(task.seconds[i]) if np.isfinite(task.seconds[i]) else _FAILED], error_msg=None)
                for i in chosen]
            model.update(contexts[index], [task.candidates[i] for i in chosen], results)
        found_after.append(list(best))
    return found_after


def round_scores(tasks: list[Task], found: list[float]) -> dict:
    """'kernels': sum w * found / sum w * best (>= 1); 'found': weighted mean of best / found (<= 1)."""
    weights = np.array([t.weight for t in tasks])  # (t,)
    best = np.array([t.best for t in tasks])  # (t,)
    found_arr = np.array(found)  # (t,)
    kernels = float((weights * found_arr).sum() / (weights * best).sum())
    ratio = np.where(np.isfinite(found_arr), best / found_arr, 0.0)
    return {"kernels": kernels, "found": float((weights * ratio).sum() / weights.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a collected platform folder (its card names the target)")
    parser.add_argument("--database", type=Path, nargs="*", default=None,
                        help="model folders to replay (default: the card's eval split)")
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--policies", nargs="+", default=["random", "xgb", "tcl:steps=0", "tcl"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--results", default="search_replay")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    policies = [parse_policy(spec) for spec in args.policies]
    torch.set_num_threads(1)
    card = json.loads((args.data / "card.json").read_text())
    target = tvm_api.make_target(card["target"])
    folders = args.database or split_databases(args.data)["eval"]
    jobs = {folder.name: load_tasks(folder) for folder in folders}
    rows = []
    for policy in policies:
        for seed in args.seeds:
            for job, tasks in jobs.items():
                torch.manual_seed(seed)
                np.random.seed(seed)  # XGBModel scores at random from numpy's global state before it trains
                started = time.perf_counter()
                found = replay_job(tasks, make_model(policy, args.student), policy, rounds=args.rounds,
                                   batch=args.batch, target=target, rng=np.random.default_rng(seed))
                rows.append({"policy": policy.spec, "seed": seed, "job": job,
                             "seconds": round(time.perf_counter() - started, 1),
                             "rounds": [round_scores(tasks, f) for f in found],
                             "found_seconds": found[-1]})
                print(json.dumps({k: rows[-1][k] for k in ("policy", "seed", "job", "seconds")}),
                      [round(r["kernels"], 3) for r in rows[-1]["rounds"]], flush=True)
    result = {"command": " ".join(["research/search_replay.py", *sys.argv[1:]]),
              "student": str(args.student), "batch": args.batch,
              "jobs": {job: {"tasks": len(tasks), "candidates": sum(len(t.candidates) for t in tasks),
                             "best_seconds": [t.best for t in tasks], "weights": [t.weight for t in tasks]}
                       for job, tasks in jobs.items()},
              "runs": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.results}.json").write_text(json.dumps(result, indent=2) + "\n")
    markdown = to_markdown(result, [p.spec for p in policies], args.rounds)
    (args.out / f"{args.results}.md").write_text(markdown)
    print(markdown)


def to_markdown(result: dict, policies: list[str], rounds: int) -> str:
    """One table per job: kernels (mean ± std over seeds) after each round, per policy."""
    lines = ["# Search replay on collected records", "", f"Command: `.venv/bin/python {result['command']}`", "",
             "kernels = task-weighted sum of the best time found per task / the same sum of each task's best "
             f"stored time (1.000 = every task's best found); batch {result['batch']} per task per round; "
             "mean ± std over seeds.", ""]
    for job, size in result["jobs"].items():
        lines += [f"## {job} ({size['tasks']} tasks, {size['candidates']} candidates)", "",
                  "| policy | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " |",
                  "|---|" + "---|" * rounds]
        for policy in policies:
            runs = [run for run in result["runs"] if run["policy"] == policy and run["job"] == job]
            cells = []
            for r in range(rounds):
                values = [run["rounds"][r]["kernels"] for run in runs]
                cells.append(f"{np.mean(values):.3f} ± {np.std(values):.3f}")
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
