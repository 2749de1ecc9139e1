"""An outside suite: the `onnx` package's own backend test models, each through the pipeline untuned.

    .venv/bin/python -m benchmarks onnx-backend [--sets pytorch-converted pytorch-operator simple]
        [--only NAME ...] [--stem onnx-backend]

The onnx package ships, for each model, reference inputs and outputs written by the ONNX project
(`onnx/backend/test/data/<set>/<model>/test_data_set_0/`). Every model goes two ways, and the
library's outputs on the shipped inputs are compared with the shipped outputs:
- `plain`: TVM's own path, `from_onnx` then `tvm.compile` (what a TVM user gets with no tuning);
- `pipeline`: `deploy.pipeline.run_pipeline` with `trials = 0` (import, lower with our levers,
  build, verify against onnxruntime or the reference it falls back to, emit).
Each model runs in a child process (a crash in TVM fails that model only), one at a time.
Results: `<out>/<stem>.json` (resumable) and `<stem>.md` with the tally and every failure's reason.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

SETS = ("pytorch-converted", "pytorch-operator", "simple")
ATOL, RTOL = 1e-4, 1e-3


def data_root() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def cases(sets: tuple[str, ...] = SETS) -> list[Path]:
    """Every model folder of the sets that has a model and a first data set."""
    return sorted(folder for name in sets for folder in (data_root() / name).iterdir()
                  if (folder / "model.onnx").is_file() and (folder / "test_data_set_0").is_dir())


def _shipped(folder: Path) -> tuple[list, list]:
    import onnx
    from onnx import numpy_helper

    def read(kind: str) -> list:
        return [numpy_helper.to_array(onnx.load_tensor(str(path)))
                for path in sorted((folder / "test_data_set_0").glob(f"{kind}_*.pb"),
                                   key=lambda p: int(p.stem.split("_")[1]))]

    return read("input"), read("output")


def _compare(actual: list, expected: list) -> str | None:
    """None when every output matches within ATOL + RTOL |expected| (deploy.verify.compare); else what differs.

    Integers, booleans and strings must match exactly.
    """
    import numpy as np

    from deploy import verify

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, the reference has {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            return f"output {index}: shape {list(got.shape)}, the reference {list(want.shape)}"
        if want.dtype.kind not in "fc":
            bad = got != want
        elif verify.compare([got], [want], atol=ATOL, rtol=RTOL).passed:
            continue
        else:  # which values differ, by the same rule
            bad = verify.mismatches(got, want, atol=ATOL, rtol=RTOL)
        if bad.any():
            return f"output {index}: {int(bad.sum())} of {bad.size} values differ"
    return None


def _reason(err: BaseException) -> str:
    """The exception's type and the last line of its message (TVM's useful line), nothing if it has none."""
    from deploy.intake import error_line

    return f"{type(err).__name__}: {error_line(err, last=True, limit=200) if str(err).strip() else ''}"


def run_plain(folder: Path) -> dict:
    """`from_onnx` + `tvm.compile`, outputs against the shipped ones."""
    import onnx

    from deploy import verify
    from tcl_core import tvm_api

    inputs, expected = _shipped(folder)
    try:
        model = onnx.load(str(folder / "model.onnx"))
        initializers = {i.name for i in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initializers]
        mod = tvm_api.from_onnx(model, shape_dict={n: list(a.shape) for n, a in zip(names, inputs)},
                                dtype_dict={n: str(a.dtype) for n, a in zip(names, inputs)})
    except Exception as err:
        return {"stage": "import", "reason": _reason(err)}
    try:
        executable = tvm_api.tvm.compile(mod, target="llvm")
        vm = tvm_api.relax.VirtualMachine(executable, tvm_api.tvm.cpu())
        actual = verify.to_numpy(vm["main"](*[tvm_api.tvm.runtime.tensor(a) for a in inputs]))
    except Exception as err:
        return {"stage": "build", "reason": _reason(err)}
    wrong = _compare(actual, expected)
    return {"stage": "verified"} if wrong is None else {"stage": "wrong", "reason": wrong}


def run_ours(folder: Path, work: Path) -> dict:
    """`run_pipeline(trials=0)`, then the library on the shipped inputs against the shipped outputs."""
    import shutil

    from deploy import verify
    from deploy.errors import PipelineError
    from deploy.options import TuningOptions
    from deploy.pipeline import run_pipeline
    from tcl_core import tvm_api

    inputs, expected = _shipped(folder)
    model = work / f"{folder.name}.onnx"
    shutil.copy(folder / "model.onnx", model)
    try:
        manifest = run_pipeline(model, output_dir=work / "out", state_dir=work / "state",
                                options=TuningOptions(trials=0, timing_repeats=1))
    except PipelineError as err:
        return {"stage": "failed", "reason": str(err)}
    vm = tvm_api.load_vm(Path(manifest.artifact_dir) / "model.so")
    actual = verify.to_numpy(vm["main"](*[tvm_api.tvm.runtime.tensor(a) for a in inputs]))
    wrong = _compare(actual, expected)
    row = {"stage": "verified" if wrong is None else "wrong", "reference": manifest.reference}
    return row if wrong is None else {**row, "reason": wrong}


def run_case(folder: str) -> dict:
    """Both ways for one model folder; runs in a child process."""
    with tempfile.TemporaryDirectory(prefix="onnx-backend-") as scratch:
        return {"plain": run_plain(Path(folder)), "pipeline": run_ours(Path(folder), Path(scratch))}


def markdown(results: dict) -> str:
    rows = results["cases"]
    lines = ["# The onnx package's backend test models through tcl-tuned, untuned", "",
             f"Command: `.venv/bin/python {results['command']}`"
             + "".join(f", then `{rerun}`" for rerun in results.get("reruns", []))
             + f"; onnx {results['onnx']}, onnxruntime "
             f"{results['onnxruntime']}, TVM {results['tvm']}. Each model's library runs the shipped inputs and is "
             f"compared with the shipped outputs (atol {ATOL}, rtol {RTOL}). `plain`: TVM's `from_onnx` + "
             "`tvm.compile`; `pipeline`: `run_pipeline` with `trials = 0`.", "",
             "| set | models | plain verified | pipeline verified | pipeline failed | pipeline wrong |",
             "|---|---|---|---|---|---|"]
    for name in [*results["sets"], "all"]:
        chosen = [r for r in rows.values() if name == "all" or r["set"] == name]
        count = lambda way, stage: sum(1 for r in chosen if r[way]["stage"] == stage)  # noqa: E731
        lines.append(f"| {name} | {len(chosen)} | {count('plain', 'verified')} | {count('pipeline', 'verified')} | "
                     f"{count('pipeline', 'failed') + count('pipeline', 'crashed')} | {count('pipeline', 'wrong')} |")
    references = Counter(r["pipeline"].get("reference") for r in rows.values() if r["pipeline"]["stage"] == "verified")
    lines += ["", "Verified against: " + ", ".join(f"{name} {n}" for name, n in references.most_common()), "",
              "## Every model that did not verify", "", "| model | plain | pipeline |", "|---|---|---|"]
    for key, row in sorted(rows.items()):
        if row["pipeline"]["stage"] != "verified" or row["plain"]["stage"] != "verified":
            show = lambda r: r["stage"] + (f": {r['reason']}" if r.get("reason") else "")  # noqa: E731
            lines.append(f"| {key} | {show(row['plain'])} | {show(row['pipeline'])} |".replace("\n", " "))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import onnx
    import onnxruntime

    from benchmarks.suite import results_dir
    from tcl_core import tvm_api

    parser = argparse.ArgumentParser(prog="python -m benchmarks onnx-backend", description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--only", nargs="+", default=None, help="model folder names to run (again): test_Linear ...")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results/<platform>/)")
    parser.add_argument("--stem", default="onnx-backend")
    args = parser.parse_args(argv)
    out = args.out or results_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.stem}.json"
    results = json.loads(path.read_text()) if path.exists() else {"cases": {}}
    command = " ".join(["-m benchmarks onnx-backend", *(argv if argv is not None else sys.argv[2:])])
    if args.only is None:
        results["command"] = command
    else:  # a rerun of some models: the whole run's command stays, the reruns are listed
        results.setdefault("command", command)
        results["reruns"] = [*results.get("reruns", []), command]
    results.update(sets=args.sets, onnx=onnx.__version__, onnxruntime=onnxruntime.__version__, tvm=tvm_api.TVM_VERSION)
    # --only runs the named models again; otherwise a rerun resumes where the last one stopped
    todo = [f for f in cases(tuple(args.sets)) if (f.name in args.only if args.only is not None
                                                   else f"{f.parent.name}/{f.name}" not in results["cases"])]
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)
    for index, folder in enumerate(todo, 1):
        key = f"{folder.parent.name}/{folder.name}"
        try:
            row = pool.submit(run_case, str(folder)).result(timeout=600)
        except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.TimeoutError) as err:
            pool.shutdown(wait=False, cancel_futures=True)
            pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)
            reason = "timed out after 600 s" if isinstance(err, concurrent.futures.TimeoutError) else "the child crashed"
            row = {"plain": {"stage": "crashed", "reason": reason}, "pipeline": {"stage": "crashed", "reason": reason}}
        results["cases"][key] = {"set": folder.parent.name, **row}
        print(f"[{index}/{len(todo)}] {key}: plain {row['plain']['stage']}, pipeline {row['pipeline']['stage']}"
              + (f" ({row['pipeline'].get('reason', '')[:120]})" if row["pipeline"]["stage"] != "verified" else ""),
              flush=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
    pool.shutdown()
    path.write_text(json.dumps(results, indent=2) + "\n")
    (out / f"{args.stem}.md").write_text(markdown(results))
    print(out / f"{args.stem}.md")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
