"""ONNX intake: load and check a dropped model, resolve its input shapes, read its sidecar.

Everything that can be wrong with a user's file is found here and reported as an `IntakeError`
with a one-line reason that says what to change, before any TVM work starts.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper
from pydantic import BaseModel, ConfigDict, ValidationError

from deploy.artifact import TensorInfo
from deploy.errors import IntakeError
from deploy.options import IntakeLimits, RunnerOptions

_MIB = 1 << 20


class Sidecar(BaseModel):
    """`<stem>.json` next to the model: concrete shapes for dynamic inputs and per-model overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: dict[str, list[int]] = {}
    trials: int | None = None
    target: dict[str, Any] | None = None
    runner: RunnerOptions | None = None  # measure this model elsewhere (or locally) whatever [runner] says


@dataclass(frozen=True)
class ModelSpec:
    """A checked model with every input shape concrete."""

    path: Path
    name: str
    sha256: str
    model: onnx.ModelProto
    inputs: tuple[TensorInfo, ...]
    output_names: tuple[str, ...]
    sidecar: Sidecar

    @property
    def shape_dict(self) -> dict[str, list[int]]:
        return {info.name: info.shape for info in self.inputs}

    @property
    def dtype_dict(self) -> dict[str, str]:
        return {info.name: info.dtype for info in self.inputs}


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's content, read in chunks (models can be large).

    Opened with O_NOFOLLOW: a symbolic link raises OSError (ELOOP) and its target is never read.
    """
    digest = hashlib.sha256()
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def symlink_refusal(path: Path) -> str:
    """The one-line reason a symbolic link in the drop folder is refused."""
    return f"{Path(path).name} is a symbolic link; copy the model itself into the watch folder"


def link_id(path: Path) -> str:
    """A stable id for a symbolic link that never reads its target: sha256 of its path and target text.

    The job queue keys entries by content hash; a link has no content of its own, so its entry is
    keyed by what it is (this path, pointing there), and the same link seen twice is one entry.
    """
    text = f"symlink\0{Path(path)}\0{os.readlink(path)}"
    return hashlib.sha256(os.fsencode(text)).hexdigest()


def load_model(path: Path, *, limits: IntakeLimits = IntakeLimits()) -> ModelSpec:
    """Load, check and shape-resolve the ONNX model at `path` (see module docstring).

    Refused before parsing: symbolic links (the drop folder is no door to other files), empty
    files and files over `limits.max_model_mb`. After resolving shapes: inputs that would not
    fit in `limits.max_input_mb`.
    """
    path = Path(path)
    if path.is_symlink():
        raise IntakeError(symlink_refusal(path))
    if not path.is_file():
        raise IntakeError(f"{path}: no such file")
    size = path.stat().st_size
    if size == 0:
        raise IntakeError(f"{path.name} is empty (0 bytes); was the upload interrupted?")
    if size > limits.max_model_mb * _MIB:
        raise IntakeError(f"{path.name} is {size / _MIB:.0f} MiB, over the {limits.max_model_mb:g} MiB limit "
                          "(tuning.limits.max_model_mb)")
    sha = sha256_of(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf raises DecodeError, RuntimeWarning or others
        raise IntakeError(f"{path.name} is not a readable ONNX file ({type(err).__name__}: {error_line(err)})")
    if not model.graph.node:
        raise IntakeError(f"{path.name} has an empty graph (is it an ONNX model?)")
    _load_external_data(model, path, budget_bytes=limits.max_model_mb * _MIB - size)
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        raise IntakeError(f"{path.name} fails the ONNX checker: {error_line(err)}")
    sidecar = _read_sidecar(path)
    inputs = _resolve_inputs(model, path, sidecar)
    _check_input_sizes(inputs, path, limits)
    model = _with_fixed_input_shapes(model, inputs)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as err:
        raise IntakeError(f"{path.name}: shape inference failed with the given input shapes: {error_line(err)}")
    outputs = tuple(output.name for output in model.graph.output)
    return ModelSpec(path=path, name=path.stem, sha256=sha, model=model, inputs=inputs,
                     output_names=outputs, sidecar=sidecar)


def error_line(err: BaseException, *, last: bool = False, limit: int = 300) -> str:
    """The first (`last`: the last) non-empty line of `err`'s message, stripped, at most `limit` characters.

    The exception's type name where the message is empty. TVM's messages end with the useful line
    (tracebacks come first): its callers take the last.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return ((lines[-1] if last else lines[0]) if lines else type(err).__name__)[:limit]


def _check_input_sizes(inputs: tuple[TensorInfo, ...], path: Path, limits: IntakeLimits) -> None:
    """Refuse inputs whose resolved shape would need more than `limits.max_input_mb` (a typo'd sidecar, a bomb)."""
    for info in inputs:
        nbytes = math.prod(info.shape) * np.dtype(info.dtype).itemsize
        if nbytes > limits.max_input_mb * _MIB:
            raise IntakeError(f"{path.name}: input {info.name!r} of shape {info.shape} would take "
                              f"{nbytes / _MIB:.0f} MiB, over the {limits.max_input_mb:g} MiB limit "
                              "(tuning.limits.max_input_mb)")


def _load_external_data(model: onnx.ModelProto, path: Path, *, budget_bytes: float) -> None:
    """Pull in external tensors, refusing locations outside the model's own folder and too much data."""
    base = path.parent.resolve()
    total = 0
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        target = (base / info.location).resolve()
        if not target.is_relative_to(base):
            raise IntakeError(
                f"{path.name}: tensor {tensor.name!r} points at external data {info.location!r} "
                "outside the model's folder; keep external data files beside the model"
            )
        if not target.is_file():
            raise IntakeError(f"{path.name}: external data file {info.location!r} for {tensor.name!r} is missing")
        total += info.length if info.length else target.stat().st_size
        if total > budget_bytes:
            raise IntakeError(f"{path.name}: model and external data exceed the size limit "
                              "(tuning.limits.max_model_mb)")
    try:
        external_data_helper.load_external_data_for_model(model, str(base))
    except Exception as err:
        raise IntakeError(f"{path.name}: could not read external data: {error_line(err)}")


def _read_sidecar(path: Path) -> Sidecar:
    sidecar_path = path.with_suffix(".json")
    if not sidecar_path.is_file():
        return Sidecar()
    try:
        return Sidecar.model_validate(json.loads(sidecar_path.read_text()))
    except json.JSONDecodeError as err:
        raise IntakeError(f"{sidecar_path.name} is not valid JSON: {err}")
    except ValidationError as err:
        problem = err.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise IntakeError(f"{sidecar_path.name}: {where}: {problem['msg']}")


def _resolve_inputs(model: onnx.ModelProto, path: Path, sidecar: Sidecar) -> tuple[TensorInfo, ...]:
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [value for value in model.graph.input if value.name not in initializers]
    known = {value.name for value in graph_inputs}
    unknown = sorted(set(sidecar.inputs) - known)
    if unknown:
        raise IntakeError(f"{path.stem}.json names input(s) {unknown} the model does not have; it has {sorted(known)}")
    resolved = []
    for value in graph_inputs:
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            raise IntakeError(f"{path.name}: input {value.name!r} is not a tensor with a known rank")
        dims = [dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None
                for dim in tensor_type.shape.dim]
        shape = _concrete_shape(value.name, dims, tensor_type, sidecar.inputs.get(value.name), path)
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        resolved.append(TensorInfo(name=value.name, shape=shape, dtype=dtype))
    return tuple(resolved)


def _concrete_shape(name, dims, tensor_type, given, path: Path) -> list[int]:
    labels = [dim.dim_param or "?" if value is None else str(value)
              for dim, value in zip(tensor_type.shape.dim, dims)]
    if given is None:
        dynamic = [i for i, value in enumerate(dims) if value is None]
        if dynamic:
            example = [value if value is not None else 1 for value in dims]
            raise IntakeError(
                f"input {name!r} has dynamic dimension(s) {dynamic} in shape [{', '.join(labels)}]; "
                f"write {path.stem}.json next to the model with "
                f"{json.dumps({'inputs': {name: example}})} (your real sizes)"
            )
        return list(dims)
    if len(given) != len(dims) or any(v is not None and v != g for v, g in zip(dims, given)) or min(given, default=1) < 1:
        raise IntakeError(f"{path.stem}.json gives {name!r} shape {given}, which does not fit the model's [{', '.join(labels)}]")
    return list(given)


def _with_fixed_input_shapes(model: onnx.ModelProto, inputs: tuple[TensorInfo, ...]) -> onnx.ModelProto:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    shapes = {info.name: info.shape for info in inputs}
    for value in fixed.graph.input:
        if value.name in shapes:
            for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
                dim.Clear()
                dim.dim_value = size
    return fixed


def describe_nodes(model: onnx.ModelProto, op_types: set[str], at_most: int = 3) -> str:
    """Where `op_types` occur: op, domain and opset, node name, input shapes; for a report or a workaround.

    `Frobnicate (com.example opset 1) at node 'n0', inputs x float32[2, 3]`; shapes from onnx's
    shape inference, `?` where it cannot tell.
    """
    opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model shape inference chokes on still gets its ops named
        inferred = model
    known = {v.name: v for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}
    known.update({init.name: init for init in inferred.graph.initializer})

    def shape_of(name: str) -> str:
        value = known.get(name)
        if isinstance(value, onnx.TensorProto):
            return f"{onnx.helper.tensor_dtype_to_np_dtype(value.data_type)}{list(value.dims)}"
        if value is None or not value.type.HasField("tensor_type"):
            return "?"
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        return f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}[{', '.join(map(str, dims))}]"

    found = [(index, node) for index, node in enumerate(model.graph.node) if node.op_type in op_types]
    parts = []
    for index, node in found[:at_most]:
        domain = node.domain or "ai.onnx"
        inputs = ", ".join(f"{name} {shape_of(name)}" for name in node.input if name)
        where = f"node '{node.name}'" if node.name else f"node #{index} (unnamed)"
        parts.append(f"{node.op_type} ({domain} opset {opsets.get(domain, '?')}) at {where}, inputs {inputs}")
    more = f" (and {len(found) - at_most} more)" if len(found) > at_most else ""
    return "; ".join(parts) + more
