"""`python -m benchmarks run [--quick] ...`: the benchmark suite (benchmarks/suite.py);
`python -m benchmarks levers ...`: lever by lever against onnxruntime (benchmarks/levers.py);
`python -m benchmarks onnx-backend ...`: the onnx package's backend test models (benchmarks/onnx_backend.py)."""

import sys

from benchmarks import levers, onnx_backend, suite

COMMANDS = {"run": suite.main, "levers": levers.main, "onnx-backend": onnx_backend.main}

if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
    sys.exit("usage: python -m benchmarks run [--quick] [options] | levers [options] | onnx-backend [options]  (--help)")
COMMANDS[sys.argv[1]](sys.argv[2:])
