"""Compare the built library with onnxruntime, and time tuned TVM, untuned TVM and onnxruntime.

All three run in this process on the same seeded inputs, so their latencies are comparable.
When onnxruntime cannot run a model (an opset its kernels no longer cover, an op it lacks), the
reference is the model converted to a newer opset, else onnx's reference implementation
(`open_reference`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime

from deploy.artifact import TensorInfo, Verification
from deploy.errors import PipelineError
from deploy.intake import error_line
from tcl_core import tvm_api

# The opset a model onnxruntime cannot run is converted to before trying again: every kernel of
# onnxruntime 1.18 and later covers it, and onnx's converter reaches it from opset 1.
CONVERTED_OPSET = 17
# onnx's reference implementation runs numpy op by op: fine for checking, slow on big models.
_REFERENCE_EVALUATOR_MAX_WEIGHTS = 20_000_000

# A timing sample lasts at least this long, so timer resolution and call overhead stay small.
_MIN_SAMPLE_SECONDS = 2e-3


def random_inputs(inputs: Sequence[TensorInfo], seed: int) -> list[np.ndarray]:
    """Seeded inputs: standard normal floats, small non-negative ints (safe as indices), bools."""
    rng = np.random.default_rng(seed)
    arrays = []
    for info in inputs:
        dtype = np.dtype(info.dtype)
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(info.shape).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0, 2, size=info.shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=info.shape).astype(bool))
        else:
            raise ValueError(f"input {info.name!r} has dtype {dtype}, which random_inputs cannot make")
    return arrays


def onnxruntime_session(model_bytes: bytes, threads: int = 0) -> onnxruntime.InferenceSession:
    """A CPU session on `threads` intra-op threads (0: onnxruntime's default, one per physical core)."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class Reference:
    """What the library is checked against: `call()` returns the expected outputs, in order."""

    call: Callable[[], list]
    name: str                     # "onnxruntime", "onnxruntime, converted to opset 17", "onnx.reference"
    onnxruntime_model: bytes | None  # the model onnxruntime runs (to time it); None: onnxruntime cannot
    why: str | None = None        # why not onnxruntime on the model as given


def open_reference(model: onnx.ModelProto, inputs: Sequence[TensorInfo], arrays: Sequence[np.ndarray],
                   threads: int) -> Reference:
    """onnxruntime on the model; else on it converted to CONVERTED_OPSET; else onnx.reference (small models).

    Each candidate must run once on `arrays` to be chosen. Raises PipelineError naming why none could.
    """
    model_bytes = model.SerializeToString()
    try:
        call = onnxruntime_call(onnxruntime_session(model_bytes, threads=threads), inputs, arrays)
        call()
        return Reference(call, "onnxruntime", model_bytes)
    except Exception as err:  # onnxruntime raises Fail, NotImplemented, InvalidGraph, RuntimeException...
        why = f"onnxruntime cannot run it ({error_line(err)})"
    try:
        converted = onnx.version_converter.convert_version(model, CONVERTED_OPSET).SerializeToString()
        call = onnxruntime_call(onnxruntime_session(converted, threads=threads), inputs, arrays)
        call()
        return Reference(call, f"onnxruntime, converted to opset {CONVERTED_OPSET}", converted, why)
    except Exception as err:
        converted_why = error_line(err)
    weights = sum(int(np.prod(init.dims)) for init in model.graph.initializer)
    if weights > _REFERENCE_EVALUATOR_MAX_WEIGHTS:
        raise PipelineError(f"no reference can run this model: {why}; converted to opset {CONVERTED_OPSET}: "
                            f"{converted_why}; too large for onnx.reference ({weights} weights)")
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        feeds = {info.name: array for info, array in zip(inputs, arrays)}
        call = lambda: list(evaluator.run(None, feeds))  # noqa: E731
        call()
        return Reference(call, "onnx.reference", None, why)
    except Exception as err:
        raise PipelineError(f"no reference can run this model: {why}; converted to opset {CONVERTED_OPSET}: "
                            f"{converted_why}; onnx.reference: {error_line(err)}") from None


def onnxruntime_call(session, inputs: Sequence[TensorInfo], arrays: Sequence[np.ndarray]) -> Callable[[], list]:
    feeds = {info.name: array for info, array in zip(inputs, arrays)}
    return lambda: session.run(None, feeds)


def tvm_call(vm, arrays: Sequence[np.ndarray]) -> Callable[[], object]:
    """A zero-argument call of `vm["main"]` on device copies of `arrays` (convert with `to_numpy`)."""
    main = vm["main"]
    device_inputs = [tvm_api.tvm.runtime.tensor(array) for array in arrays]
    return lambda: main(*device_inputs)


def to_numpy(result) -> list[np.ndarray]:
    """A VM result (one tensor or nested tuples of them) as a flat list of arrays, in output order."""
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [item for part in result for item in to_numpy(part)]


def compare(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], *, atol: float, rtol: float) -> Verification:
    """Max absolute / relative error; passes when every element is within atol + rtol * |expected|."""
    if len(actual) != len(expected):
        return Verification(max_abs_err=float("inf"), max_rel_err=float("inf"), atol=atol, rtol=rtol, passed=False)
    max_abs = max_rel = 0.0
    passed = True
    for got, want in zip(actual, expected):
        if got.shape != want.shape:
            return Verification(max_abs_err=float("inf"), max_rel_err=float("inf"), atol=atol, rtol=rtol, passed=False)
        diff, want64 = _abs_err(got, want)
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(want64), 1e-12)).max()))
            passed = passed and not bool(_outside(diff, want64, atol, rtol).any())
    return Verification(max_abs_err=max_abs, max_rel_err=max_rel, atol=atol, rtol=rtol, passed=passed)


def mismatches(got: np.ndarray, want: np.ndarray, *, atol: float, rtol: float) -> np.ndarray:
    """Element-wise, by `compare`'s rule: True where `got` is off `want` by more than atol + rtol * |want|."""
    return _outside(*_abs_err(np.asarray(got), np.asarray(want)), atol, rtol)


def _abs_err(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|got - want| and want, in float64."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    # NaN where the reference has NaN (sqrt of a negative input), and the same infinities, agree
    same = (np.isnan(got64) & np.isnan(want64)) | (np.isinf(want64) & (got64 == want64))
    got64, want64 = np.where(same, 0.0, got64), np.where(same, 0.0, want64)
    diff = np.abs(got64 - want64)
    return np.where(np.isnan(diff), np.inf, diff), want64  # NaN on one side only is a mismatch


def _outside(diff: np.ndarray, want64: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    return ~(diff <= atol + rtol * np.abs(want64))


# Both engines' worker threads stay busy for a while after a run. On a 2-core machine the next
# engine's threads then share the cores with them: onnxruntime timed right after a TVM library
# ran 2.5x slower, a TVM library right after onnxruntime up to 50x (tiny_cnn, 2 threads). After a
# 0.1 s pause onnxruntime still ran 1.5-4x slow in some samples, after 0.5 s mostly not
# (docs/performance.md, item 6).
_SETTLE_SECONDS = 0.5


def median_ms(call: Callable[[], object], repeats: int) -> float:
    """Median milliseconds per call over `repeats` samples, each averaging enough calls to last 2 ms.

    Waits `_SETTLE_SECONDS` first, so the threads of whatever ran before are asleep, as they are
    in a deployment that runs one engine.
    """
    time.sleep(_SETTLE_SECONDS)
    for _ in range(3):
        call()  # warm caches and lazy initialisation
    started = time.perf_counter()
    call()
    once = max(time.perf_counter() - started, 1e-7)
    number = max(1, int(_MIN_SAMPLE_SECONDS / once))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - started) / number)
    return statistics.median(samples) * 1e3
