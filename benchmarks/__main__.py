"""`python -m benchmarks run [--quick] ...`: the benchmark suite (benchmarks/suite.py)."""

import sys

from benchmarks import suite

if len(sys.argv) < 2 or sys.argv[1] != "run":
    sys.exit("usage: python -m benchmarks run [--quick] [options]  (python -m benchmarks run --help)")
suite.main(sys.argv[2:])
