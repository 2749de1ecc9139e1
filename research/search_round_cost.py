"""What the `tcl` cost model costs a real search round: its predict calls recorded in a tuning run, then replayed.

    .venv/bin/python -m research.search_round_cost [--model vit_block] [--budget 64] [--population 512] \
        [--student PATH] [--repeat 3] [--stem search_round_cost]

Tunes `--model` from an empty database through the real pipeline with the `tcl` cost model and
records the candidate traces of every `predict` call and where each `update` fell. A search
round is one task's evolutionary search, ended by an update or by the search moving to another
task: the population is predicted once per genetic iteration, so a round is several calls (5
with TVM's defaults). After the run,
with nothing else running, the whole call sequence is replayed with the same student, each way
best of `--repeat`:

* `every candidate`: trace features, padding and the student on every candidate of every call,
  as the adapter did before its score cache;
* `cached`: the adapter's own `predict` (features once per trace object, the student once per
  distinct sequence, within a round), its caches cleared where the run had an update.

Both give the same scores (checked). The share of candidates the student still has to score
depends on the search (population, mutation), so it is measured, not assumed. Timings inside
the tuning run itself would be skewed by the runner measuring in parallel, hence the replay.
Writes `<out>/<stem>.json` and a Markdown summary beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import MODELS, tune_once  # noqa: E402
from tcl_core import cost_model  # noqa: E402
from tcl_core.cost_model import TclCostModel  # noqa: E402
from tcl_core.features import pad_batch, trace_features  # noqa: E402
from tcl_core.platform import cpu_model_name  # noqa: E402
from tcl_core.student import load_student, predict  # noqa: E402

DEFAULT_STUDENT = Path("tcl_core/students/llvm-znver4-2c-3de11c59/student.pt")


def record_search(model: str, *, budget: int, population: int, trials_per_iter: int, student: Path,
                  seed: int) -> tuple[list, dict]:
    """Tune once; return the events [("predict", task, traces) | ("update", task)] and the run's record.

    The adapter is built inside MetaSchedule's tune_tasks, out of reach, so its class is wrapped
    for the run (derived_object forwards to `TclCostModel._cls`'s methods).
    """
    events: list = []
    adapter = TclCostModel._cls
    original_predict, original_update = adapter.predict, adapter.update

    def recording_predict(self, context, candidates):
        events.append(("predict", str(context.task_name), [c.sch.trace for c in candidates]))
        return original_predict(self, context, candidates)

    def recording_update(self, context, candidates, results):
        events.append(("update", str(context.task_name)))
        return original_update(self, context, candidates, results)

    adapter.predict, adapter.update = recording_predict, recording_update
    try:
        with tempfile.TemporaryDirectory() as scratch:
            run = tune_once(model, Path(scratch), budget=budget, cost_model="tcl", trials_per_iter=trials_per_iter,
                            population=population, seed=seed, student=student, timing_repeats=5)
    finally:
        adapter.predict, adapter.update = original_predict, original_update
    return events, run


def replay_every_candidate(events: list, student) -> tuple[list[float], list[np.ndarray]]:
    """Seconds and scores of each predict call, scoring every candidate (the adapter before its cache)."""
    seconds, scores = [], []
    for event in events:
        if event[0] != "predict":
            continue
        started = time.perf_counter()
        features, mask = pad_batch([trace_features(trace) for trace in event[2]], student.config.max_len)
        scores.append(predict(student, features, mask, sequential=True))
        seconds.append(time.perf_counter() - started)
    return seconds, scores


def replay_cached(events: list, student) -> tuple[list[float], list[np.ndarray], list[int]]:
    """Seconds, raw scores and sequences scored by the student, per predict call, through the adapter."""
    model = TclCostModel._cls(student)
    seconds, scores, scored = [], [], []
    student_rows: list[int] = []  # rows the adapter hands the student, one entry per student call

    def counting_predict(student_, features, mask, **kwargs):
        student_rows.append(len(features))
        return predict(student_, features, mask, **kwargs)

    cost_model.predict = counting_predict  # the adapter's module-level call; restored below
    try:
        for event in events:
            if event[0] == "update":
                model._start_round()  # where the run's update ended a round (the replay's weights do not change)
                continue
            candidates = [SimpleNamespace(sch=SimpleNamespace(trace=trace)) for trace in event[2]]
            student_rows.clear()
            started = time.perf_counter()
            model.predict(SimpleNamespace(task_name=event[1]), candidates)
            seconds.append(time.perf_counter() - started)
            scored.append(sum(student_rows))
            scores.append(model._score([model._features(trace) for trace in event[2]]))  # untimed: all cached now
    finally:
        cost_model.predict = predict
    return seconds, scores, scored


def rounds(events: list) -> list[list[int]]:
    """Indices (into the predict calls) of each search round: consecutive calls for one task with no update between."""
    grouped: list[list[int]] = []
    call, current_task = 0, None
    for event in events:
        if event[0] == "update":
            current_task = None
            continue
        if event[1] != current_task:
            grouped.append([])
            current_task = event[1]
        grouped[-1].append(call)
        call += 1
    return grouped


def repeated_trace_share(events: list) -> float:
    """Share of predicted candidates whose trace object (by handle) the same round already predicted.

    What a feature cache keyed by trace identity could skip (unmutated survivors come back as the
    same object; mutations are new objects even when they land on an old program).
    """
    calls = [event[2] for event in events if event[0] == "predict"]
    repeats = 0
    for group in rounds(events):
        seen: set = set()  # tvm_ffi objects hash and compare by handle; the events keep them alive
        for trace in (trace for i in group for trace in calls[i]):
            repeats += trace in seen
            seen.add(trace)
    return round(repeats / sum(len(traces) for traces in calls), 3)


def summarise(events: list, every_s: list[float], cached_s: list[float], scored: list[int]) -> dict:
    """Per-round and per-2,000-candidate costs of both replays (inputs: one value per predict call)."""
    sizes = [len(event[2]) for event in events if event[0] == "predict"]
    groups = rounds(events)
    total = sum(sizes)

    def per_round(values: list[float]) -> list[float]:
        return [sum(values[i] for i in group) for group in groups]

    def costs(values: list[float]) -> dict:
        return {"seconds": round(sum(values), 3), "seconds_per_round": round(float(np.mean(per_round(values))), 4),
                "slowest_round_seconds": round(max(per_round(values)), 4),
                "seconds_per_2000": round(2000 * sum(values) / total, 4)}

    return {
        "predict_calls": len(sizes), "candidates": total, "rounds": len(groups),
        "candidates_per_round": round(total / len(groups), 1),
        "scored_by_student": sum(scored), "scored_share": round(sum(scored) / total, 3),
        "every_candidate": costs(every_s), "cached": costs(cached_s),
        "speedup": round(sum(every_s) / sum(cached_s), 2),
    }


def write_markdown(result: dict, path: Path) -> None:
    s = result["summary"]
    lines = [
        f"# Cost-model time per search round: {result['model']}, {result['budget']} trials, population {result['population']}",
        "", f"`{result['command']}`", "",
        f"CPU: {result['cpu']}, {result['cores']} cores; student `{result['student']}`; "
        f"{s['predict_calls']} predict calls in {s['rounds']} rounds, {s['candidates_per_round']} candidates per round; "
        f"the student scored {s['scored_by_student']} of {s['candidates']} ({100 * s['scored_share']:.0f}%) with the cache; "
        f"{100 * s['repeated_trace_share']:.0f}% were a trace object already predicted in the round. "
        f"Replayed after the run, best of {result['repeat']}; scores identical: {result['scores_identical']}.",
        "", "| | seconds, whole run | seconds per round (mean) | slowest round | seconds per 2,000 candidates |",
        "|---|---|---|---|---|",
    ]
    for name in ("every_candidate", "cached"):
        row = s[name]
        lines.append(f"| {name.replace('_', ' ')} | {row['seconds']} | {row['seconds_per_round']} | "
                     f"{row['slowest_round_seconds']} | {row['seconds_per_2000']} |")
    lines += ["", f"Cached / every candidate: {s['speedup']}x faster. Tuning run: {result['tuning_seconds']} s, "
              f"library {result['latency_ms']['tvm']} ms.", ""]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_block", choices=sorted(MODELS))
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--population", type=int, default=512, help="TVM's default (the daemon's was 512 until 2026-12-07, now 256)")
    parser.add_argument("--trials-per-iter", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--student", type=Path, default=DEFAULT_STUDENT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--stem", default="search_round_cost")
    args = parser.parse_args()

    events, run = record_search(args.model, budget=args.budget, population=args.population,
                                trials_per_iter=args.trials_per_iter, student=args.student, seed=args.seed)
    student = load_student(args.student)
    every_s, cached_s = [np.inf] * 2, [np.inf] * 2
    for _ in range(args.repeat):
        seconds, every_scores = replay_every_candidate(events, student)
        every_s = seconds if sum(seconds) < sum(every_s) else every_s
        seconds, cached_scores, scored = replay_cached(events, student)
        cached_s = seconds if sum(seconds) < sum(cached_s) else cached_s
    identical = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(every_scores, cached_scores))
    summary = summarise(events, every_s, cached_s, scored)
    summary["repeated_trace_share"] = repeated_trace_share(events)
    result = {
        "command": f"research/search_round_cost.py --model {args.model} --budget {args.budget} "
                   f"--population {args.population} --trials-per-iter {args.trials_per_iter} --seed {args.seed} "
                   f"--student {args.student} --repeat {args.repeat} --stem {args.stem}",
        "model": args.model, "budget": args.budget, "population": args.population, "student": str(args.student),
        "repeat": args.repeat, "cpu": cpu_model_name(), "cores": os.cpu_count(), "platform": run["platform"],
        "tuning_seconds": run["tuning_seconds"], "latency_ms": run["latency_ms"],
        "scores_identical": bool(identical), "summary": summary,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / f"{args.stem}.md")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
