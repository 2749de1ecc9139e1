"""What a suite's results say: curves, time to the baseline's latency, deployed latency, kernels vs peak.

    .venv/bin/python -m benchmarks.report benchmarks/results/<stem>.json   # redraw from stored results

Latency during tuning is estimated as TenSet does: the sum over the model's tasks of weight x
the fastest run time measured so far (benchmarks/time_to_target.py), defined once every task
has a successful measurement. The headline (TCL's metric) is, per model, the tuning seconds
the baseline (xgb) needed for its whole budget over the seconds each cost model needed to
reach the same estimate; the final latencies are the built libraries timed side by side.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from benchmarks.time_to_target import estimate_curve

__all__ = ["curves", "time_to_target", "kernel_efficiency", "markdown", "write_report"]

KERNEL_WORDS = ("matmul", "conv", "dense")  # tasks whose GFLOP/s are compared with the GEMM peak


def _weights(tasks: list[dict]) -> dict[str, float]:
    return {t["structural_hash"]: float(t["weight"]) for t in tasks}


def curves(results: dict, model: str) -> dict[str, list[tuple[int, float, float]]]:
    """Cost model -> [(trials, seconds, estimated ms)] after every measured batch (estimate inf until defined)."""
    weights = _weights(results["models"][model]["tasks"])
    out = {}
    for run in results["runs"]:
        if run["model"] != model or not run["measurements"]:
            continue
        estimate = estimate_curve(run["measurements"], weights)  # seconds after each measurement
        points = []
        for seconds, trials in run["timeline"]:
            if 0 < trials <= len(estimate):
                points.append((trials, float(seconds), 1e3 * estimate[trials - 1]))
        out[run["cost_model"]] = points
    return out


def time_to_target(results: dict, model: str, baseline: str) -> list[dict]:
    """Per cost model: seconds and trials to reach the baseline's final estimate, and the speed-up."""
    per_model = curves(results, model)
    base = per_model.get(baseline)
    if not base:
        return []
    target_ms = base[-1][2]
    base_seconds = next(seconds for trials, seconds, _ in base if trials == base[-1][0])  # budget spent
    rows = []
    for cost_model, points in per_model.items():
        reached = next(((trials, seconds) for trials, seconds, ms in points if ms <= target_ms), None)
        rows.append({
            "cost_model": cost_model, "final_estimate_ms": round(points[-1][2], 4) if points else None,
            "target_ms": round(target_ms, 4), "trials_to_target": reached[0] if reached else None,
            "seconds_to_target": reached[1] if reached else None, "baseline_seconds": base_seconds,
            "speedup": round(base_seconds / reached[1], 2) if reached and reached[1] > 0 else None,
        })
    return rows


def _seconds_to(points: list[tuple[int, float, float]], target_ms: float) -> float | None:
    return next((seconds for trials, seconds, ms in points if ms <= target_ms), None)


def _estimate_at(points: list[tuple[int, float, float]], seconds: float) -> float:
    """The estimate (ms) a run had reached `seconds` into it (inf before it had one)."""
    return min((ms for trials, at, ms in points if at <= seconds), default=math.inf)


def against_time(results: dict, model: str, baseline: str, onnxruntime_ms: float | None) -> list[dict]:
    """Per cost model: seconds to reach onnxruntime's latency (on the estimate) against the baseline's,
    and the estimate each run had at the time the shorter of the two runs ended (equal time)."""
    per_model = curves(results, model)
    base = per_model.get(baseline)
    if not base:
        return []
    base_to_ort = _seconds_to(base, onnxruntime_ms) if onnxruntime_ms else None
    rows = []
    for cost_model, points in per_model.items():
        if cost_model == baseline or not points:
            continue
        equal = min(points[-1][1], base[-1][1])
        mine, theirs = _estimate_at(points, equal), _estimate_at(base, equal)
        to_ort = _seconds_to(points, onnxruntime_ms) if onnxruntime_ms else None
        rows.append({
            "cost_model": cost_model, "onnxruntime_ms": onnxruntime_ms, "seconds_to_onnxruntime": to_ort,
            "baseline_seconds_to_onnxruntime": base_to_ort,
            "speedup_to_onnxruntime": round(base_to_ort / to_ort, 2) if to_ort and base_to_ort else None,
            "equal_seconds": round(equal, 1), "estimate_ms": mine, "baseline_estimate_ms": theirs,
            "equal_time_gain": round(theirs / mine, 3) if math.isfinite(mine) and math.isfinite(theirs) else None,
        })
    return rows


def kernel_efficiency(results: dict, model: str) -> list[dict]:
    """Matmul and convolution tasks: best GFLOP/s each cost model's search measured, and share of peak."""
    peak = results["peak_gflops"]
    runs = {r["cost_model"]: r for r in results["runs"] if r["model"] == model}
    rows = []
    for task in results["models"][model]["tasks"]:
        if task["flops"] <= 0 or not any(word in task["name"] for word in KERNEL_WORDS):
            continue
        gflops = {}
        for cost_model, run in runs.items():
            best = run["best_seconds_per_task"].get(task["structural_hash"])
            gflops[cost_model] = round(task["flops"] / best / 1e9, 2) if best else None
        measured = [g for g in gflops.values() if g]
        rows.append({"task": task["name"], "weight": task["weight"], "mflop": round(task["flops"] / 1e6, 3),
                     "gflops": gflops, "best_share_of_peak": round(max(measured) / peak, 3) if measured else None})
    return rows


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _fmt(value, spec: str = ".3f", none: str = "-") -> str:
    return none if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def markdown(results: dict, stem: str) -> str:
    config, machine = results["config"], results["machine"]
    baseline = config["baseline"]
    models = [m for m in config["models"] if "deployed" in results["models"].get(m, {})]
    cost_models = config["cost_models"]
    lines = [
        f"# Benchmark {stem}",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores. Command: `.venv/bin/python {results['command']}` "
        f"({results.get('seconds', 0) / 60:.0f} min). "
        + (f"Every model's database started with the records of the other models tuned in `{config['warm_from']}` "
           "(exact matches reused by every cost model; warm start by similarity for tcl), seed "
           if config.get("warm_from") else "Every model tuned from an empty database, seed ")
        + f"{config['seed']}, {_budget_words(config)}, {config['trials_per_iter']} per round, population "
        f"{config.get('population', 512)}, one cost model at a "
        f"time. Machine peak: {results['peak_gflops']} GFLOP/s (fp32 GEMM 2048, PyTorch, all cores)."
        + (f" Timings retaken on an idle machine (`{results['retime_command']}`)." if results.get("retime_command") else ""),
    ]
    if baseline in cost_models:  # a run of one cost model has nothing to compare tuning speed with
        lines += [
            "",
            f"## Tuning time to reach {baseline}'s final latency",
            "",
            f"Estimated latency (sum over tasks of weight x best measured) after each round; target: {baseline}'s "
            f"estimate after its whole budget. Speed-up: {baseline}'s tuning seconds / the seconds to reach it.",
            "",
            "| model | cost model | final estimate ms | target ms | trials to target | seconds to target | speed-up |",
            "|---|---|---|---|---|---|---|",
        ]
    for model in (models if baseline in cost_models else []):
        for row in time_to_target(results, model, baseline):
            lines.append(f"| {model} | {row['cost_model']} | {_fmt(row['final_estimate_ms'], '.4f')} | "
                         f"{row['target_ms']:.4f} | {_fmt(row['trials_to_target'], 'd', 'never')} | "
                         f"{_fmt(row['seconds_to_target'], '.0f', 'never')} | {_fmt(row['speedup'], '.2f')}{'x' if row['speedup'] else ''} |")
    if baseline in cost_models:
        lines += ["", f"## Time to onnxruntime's latency, and latency at equal time, against {baseline}", "",
                  "Target: onnxruntime's deployed latency on TVM's threads (timed below), reached on the estimate. "
                  f"Equal time: each run's estimate when the shorter of it and {baseline}'s run ended.", "",
                  f"| model | cost model | onnxruntime ms | seconds to it | {baseline}'s seconds to it | speed-up | "
                  f"equal time s | estimate ms | {baseline}'s estimate ms | {baseline} / it |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
    for model in (models if baseline in cost_models else []):
        deployed = results["models"][model]["deployed"]
        ort = deployed["onnxruntime"].get(f"{deployed.get('tvm_threads', 1)}_threads")
        for row in against_time(results, model, baseline, ort):
            lines.append(f"| {model} | {row['cost_model']} | {_fmt(ort, '.4f')} | "
                         f"{_fmt(row['seconds_to_onnxruntime'], '.0f', 'never')} | "
                         f"{_fmt(row['baseline_seconds_to_onnxruntime'], '.0f', 'never')} | "
                         f"{_fmt(row['speedup_to_onnxruntime'], '.2f')}{'x' if row['speedup_to_onnxruntime'] else ''} | "
                         f"{row['equal_seconds']:.0f} | {_fmt(row['estimate_ms'], '.4f')} | "
                         f"{_fmt(row['baseline_estimate_ms'], '.4f')} | {_fmt(row['equal_time_gain'], '.2f')} |")
    lines += ["", "## Deployed latency (median ms, timed side by side in one process)", "",
              "| model | untuned | " + " | ".join(f"tvm {c}" for c in cost_models)
              + f" | onnxruntime on TVM's threads | onnxruntime default | onnxruntime best (setting) | {baseline} / tcl "
              "| best tvm / ort on equal threads | best tvm / ort best |",
              "|---|---|" + "---|" * len(cost_models) + "---|---|---|---|---|---|"]
    ratios_vs_baseline, ratios_vs_ort, ratios_equal = [], [], []
    for model in models:
        deployed = results["models"][model]["deployed"]
        tvm = deployed["tvm"]
        ort_best = deployed["onnxruntime_best"]
        # "auto" counts as tcl where it resolved to the student
        student = "tcl" if "tcl" in tvm else next((r["cost_model"] for r in results["runs"] if r["model"] == model
                                                   and r.get("resolved_cost_model") == "tcl" and r["cost_model"] in tvm), None)
        vs_baseline = tvm[baseline] / tvm[student] if student and baseline in tvm else None
        best_tvm = min(tvm.values())
        if vs_baseline:
            ratios_vs_baseline.append(vs_baseline)
        ratios_vs_ort.append(best_tvm / ort_best["ms"])
        # Runs before 2026-12-07 record no TVM thread count: TVM ran one thread on 2-core x86 then.
        threads = deployed.get("tvm_threads", 1)
        equal = deployed["onnxruntime"].get(f"{threads}_threads")
        if equal:
            ratios_equal.append(best_tvm / equal)
        lines.append(f"| {model} | {deployed['untuned']:.4f} | " + " | ".join(_fmt(tvm.get(c), ".4f") for c in cost_models)
                     + f" | {_fmt(equal, '.4f')} ({threads}) | {deployed['onnxruntime']['default']:.4f} | "
                     f"{ort_best['ms']:.4f} ({ort_best['setting']}) | {_fmt(vs_baseline, '.2f')}x | "
                     f"{_fmt(best_tvm / equal if equal else None, '.2f')}x | {best_tvm / ort_best['ms']:.2f}x |")
    lines += ["", *against_onnxruntime(results)]
    lines += ["", f"Geometric mean over models: {baseline} / tcl latency {_fmt(_geomean(ratios_vs_baseline), '.3f')}x "
              f"(above 1: tcl's library is faster); best TVM library / onnxruntime on TVM's threads "
              f"{_fmt(_geomean(ratios_equal), '.3f')}x, / best onnxruntime "
              f"{_fmt(_geomean(ratios_vs_ort), '.3f')}x (below 1: TVM is faster).", "",
              "## Kernels against the machine's peak", "",
              "Best GFLOP/s each search measured for the matmul and convolution tasks, and the best of them as a "
              "share of the GEMM peak.", "",
              "| model | task | weight | MFLOP | " + " | ".join(cost_models) + " | share of peak |",
              "|---|---|---|---|" + "---|" * len(cost_models) + "---|"]
    for model in models:
        for row in kernel_efficiency(results, model):
            lines.append(f"| {model} | {row['task']} | {row['weight']} | {row['mflop']} | "
                         + " | ".join(_fmt(row["gflops"].get(c), ".2f") for c in cost_models)
                         + f" | {_fmt(row['best_share_of_peak'], '.1%')} |")
    lines += ["", f"![best latency against tuning time]({stem}-curves.png)", "",
              f"![deployed latency]({stem}-latency.png)", ""]
    return "\n".join(lines)


def _budget_words(config: dict) -> str:
    per_task = config.get("trials_per_task") or 0
    return f"{config['budget']} trials" + (f" or {per_task} per task, whichever is more" if per_task else "")


def against_onnxruntime(results: dict) -> list[str]:
    """Per model and cost model: budget, tuning time, the library against onnxruntime on equal threads, the advice."""
    lines = ["## The library against onnxruntime on equal threads", "",
             "tvm and onnxruntime: the side-by-side timing above. advice: the manifest's line, from the job's own "
             "timing when the library was built (not retimed).", "",
             "| model | cost model | tasks | trials | tuning min | estimate ms | tvm ms | onnxruntime ms | tvm / ort | advice |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in results["runs"]:
        deployed = results["models"].get(run["model"], {}).get("deployed")
        if not deployed:
            continue
        tvm = deployed["tvm"].get(run["cost_model"])
        ort = deployed["onnxruntime"].get(f"{deployed.get('tvm_threads', 1)}_threads")
        ratio = tvm / ort if tvm and ort else None
        lines.append(f"| {run['model']} | {run.get('resolved_cost_model', run['cost_model'])} | "
                     f"{len(results['models'][run['model']].get('tasks', []))} | {run['trials_measured']} | "
                     f"{run['tuning_seconds'] / 60:.1f} | {_fmt(run.get('estimated_ms'), '.4f')} | {_fmt(tvm, '.4f')} | "
                     f"{_fmt(ort, '.4f')} | {_fmt(ratio, '.2f')}x | {run.get('advice') or ''} |")
    return lines


def plot_curves(results: dict, path: Path) -> None:
    """One panel per model: estimated latency against tuning seconds, a line per cost model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in results["config"]["models"] if m in results["models"] and
              any(r["model"] == m for r in results["runs"])]
    columns = min(2, len(models)) or 1
    rows = math.ceil(len(models) / columns) or 1
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models):
        for cost_model, points in curves(results, model).items():
            finite = [(s, ms) for _, s, ms in points if math.isfinite(ms)]
            if finite:
                ax.step(*zip(*finite), where="post", marker=".", label=cost_model)
        deployed = results["models"][model].get("deployed")
        if deployed:
            ax.axhline(deployed["onnxruntime_best"]["ms"], color="grey", linestyle="--", label="onnxruntime best")
        ax.set(title=model, xlabel="tuning seconds", ylabel="estimated latency, ms", yscale="log")
        ax.legend()
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_latency(results: dict, path: Path) -> None:
    """Grouped bars per model: each tuned library, untuned, onnxruntime default and best (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in results["config"]["models"] if "deployed" in results["models"].get(m, {})]
    series = [*(f"tvm {c}" for c in results["config"]["cost_models"]), "untuned", "onnxruntime default",
              "onnxruntime best"]
    width = 0.8 / len(series)
    figure, ax = plt.subplots(figsize=(max(6, 2.5 * len(models)), 4))
    for i, name in enumerate(series):
        values = []
        for model in models:
            deployed = results["models"][model]["deployed"]
            values.append({"untuned": deployed["untuned"], "onnxruntime default": deployed["onnxruntime"]["default"],
                           "onnxruntime best": deployed["onnxruntime_best"]["ms"]}.get(
                name, deployed["tvm"].get(name.removeprefix("tvm "), math.nan)))
        ax.bar([m + i * width for m in range(len(models))], values, width, label=name)
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(models))], models)
    ax.set(ylabel="median latency, ms (log)", yscale="log", title="deployed latency")
    ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_report(results: dict, out_dir: Path, stem: str) -> list[Path]:
    """`<stem>.md`, `<stem>-curves.png` and `<stem>-latency.png` in out_dir; returns their paths."""
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}-curves.png", out_dir / f"{stem}-latency.png"]
    paths[0].write_text(markdown(results, stem))
    plot_curves(results, paths[1])
    plot_latency(results, paths[2])
    return paths


if __name__ == "__main__":
    source = Path(sys.argv[1])
    for written in write_report(json.loads(source.read_text()), source.parent, source.stem):
        print(written)
