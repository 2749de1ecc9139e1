"""`python -m benchmarks run [--quick] ...`: the benchmark suite (benchmarks/suite.py);
`python -m benchmarks levers ...`: lever by lever against onnxruntime (benchmarks/levers.py)."""

import sys

from benchmarks import levers, suite

COMMANDS = {"run": suite.main, "levers": levers.main}

if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
    sys.exit("usage: python -m benchmarks run [--quick] [options] | python -m benchmarks levers [options]  (--help)")
COMMANDS[sys.argv[1]](sys.argv[2:])
