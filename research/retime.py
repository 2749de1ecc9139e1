"""Time a suite run's kept libraries and onnxruntime again, side by side, for as many rounds as asked.

    .venv/bin/python -m benchmarks run ... --stem NAME --keep-work     # tunes, times, keeps the libraries
    .venv/bin/python -m research.retime NAME [--rounds 20] [--repeats 200]

End-to-end latency of one library moves by 20% and more between runs on a shared 2-core
machine, more than the difference between two cost models' libraries. This re-times the
libraries a suite run kept (`benchmarks/results/.work/<stem>/<model>/<cost model>/out/`), taking
turns as the suite does (`suite.measure_deployed`), at a time of your choosing and for longer.
Prints one JSON object per model; the suite's results file is not changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite import measure_deployed  # noqa: E402


def kept_libraries(work: Path) -> dict[str, dict[str, Path]]:
    """model -> cost model -> model.so, for every library under a kept work folder."""
    found: dict[str, dict[str, Path]] = {}
    for library in sorted(work.glob("*/*/out/*/model.so")):
        cost_model_dir = library.parents[2]
        found.setdefault(cost_model_dir.parent.name, {})[cost_model_dir.name] = library
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stem", help="the suite run's --stem (run with --keep-work)")
    # the suite's --out, where its results and kept work folders are (benchmarks/results)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "benchmarks" / "results")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=200, help="samples per engine over all rounds")
    parser.add_argument("--seed", type=int, default=None, help="input seed (default: the suite run's)")
    args = parser.parse_args(argv)
    results_path = args.out / f"{args.stem}.json"
    config = json.loads(results_path.read_text())["config"] if results_path.exists() else {}
    seed = args.seed if args.seed is not None else config.get("seed", 0)
    libraries = kept_libraries(args.out / ".work" / args.stem)
    if not libraries:
        raise SystemExit(f"no kept libraries under {args.out / '.work' / args.stem}; run the suite with --keep-work")
    for model, by_cost_model in libraries.items():
        deployed = measure_deployed(model, by_cost_model, repeats=args.repeats, seed=seed, rounds=args.rounds)
        print(json.dumps({"model": model, **deployed}), flush=True)


if __name__ == "__main__":
    main()
