"""Candidate program -> sequence of feature vectors, the student's input.

Two encodings, to be chosen between by a measured comparison (issue 4; not yet made):

* `trace_features`: the schedule trace's primitives in order, in the spirit of TLP. One row per
  informative instruction: the primitive's kind (one-hot), the annotation it sets, and its
  sampled decisions (tile factors as log2, their product = the loop extent, categorical choices,
  compute locations), plus which block it touches and where in the trace it stands. Address-only
  instructions (GetSBlock, GetLoops, Split, ...) carry no decision and are skipped, which roughly
  halves the length; the Split that follows a SamplePerfectTile only applies its factors.
* `per_store_features`: MetaSchedule's own `PerStoreFeature`, one 164-wide row per buffer store of
  the lowered program (loop extents, vectorisation, memory traffic, ...), computed in C++.

`pad_batch` turns a list of (l_i, f) sequences into the student's (b, l, f) + (b, l) mask.
"""

from __future__ import annotations

import math

import numpy as np

from tcl_core import tvm_api

# Instruction kinds that decide something; anything else that is not skipped maps to "other".
KINDS = (
    "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "SamplePartitionedTile",
    "Annotate", "Unannotate", "Reorder", "Fuse", "Parallel", "Vectorize", "Unroll", "Bind",
    "ComputeAt", "ReverseComputeAt", "ComputeInline", "ReverseComputeInline", "CacheRead",
    "CacheWrite", "DecomposeReduction", "RFactor", "Blockize", "Tensorize", "TransformLayout",
    "StorageAlign", "AddUnitLoop", "EnterPostproc", "other",
)
SKIPPED = frozenset({"GetSBlock", "GetLoops", "GetConsumers", "GetProducers", "GetChildBlocks", "Split",
                     "GetSBlocks", "GetChildSBlocks"})
ANNOTATIONS = (
    "meta_schedule.tiling_structure", "meta_schedule.parallel", "meta_schedule.vectorize",
    "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit", "meta_schedule.cooperative_fetch",
    "meta_schedule.auto_tensorize", "other",
)
MAX_TILES = 6  # SamplePerfectTile splits into at most 4 (CPU) or 5 (GPU) factors

_KIND_INDEX = {name: i for i, name in enumerate(KINDS)}
_ANNOTATION_INDEX = {name: i for i, name in enumerate(ANNOTATIONS)}
# Layout of one row: kind one-hot | annotation one-hot | tile log2 factors | scalars.
_SCALARS = ("log2_extent", "log2_value", "compute_location", "block_ordinal", "position")
TRACE_FEATURE_DIM = len(KINDS) + len(ANNOTATIONS) + MAX_TILES + len(_SCALARS)
PER_STORE_FEATURE_DIM = 164  # PerStoreFeature(extract_workload=False) with its default buffer count


# InstructionKind -> its name. Kinds are registry singletons and tvm_ffi objects hash and compare
# by handle, so this memo saves one FFI string fetch per instruction; it only ever holds the few
# dozen registered kinds.
_kind_names: dict[object, str] = {}


def _log2(value: float) -> float:
    return math.log2(1.0 + max(float(value), 0.0))


_TILE_START = len(KINDS) + len(ANNOTATIONS)
_EXTENT, _VALUE, _LOCATION, _BLOCK, _POSITION = range(TRACE_FEATURE_DIM - len(_SCALARS), TRACE_FEATURE_DIM)


def trace_features(trace) -> np.ndarray:
    """One (l, TRACE_FEATURE_DIM) float32 array for a MetaSchedule trace (see module docstring).

    Runs once per candidate inside the search, so it is written for speed: every attribute of a
    TVM object is a call through the FFI, so each is read once and only where needed (the
    decisions map only for Sample* instructions, only the first input unless the value of an
    Annotate is wanted), containers are read through tvm_api's raw accessors, and kind names
    are looked up once per kind (`_kind_names`).
    """
    instructions = tvm_api.array_items(trace.insts)
    decisions = None  # the decisions map, fetched on first need
    block_ordinal: dict[object, int] = {}  # SBlockRV -> order of first appearance
    out = np.zeros((len(instructions), TRACE_FEATURE_DIM), dtype=np.float32)  # (insts, f); trimmed below
    kept = 0
    last_position = max(len(instructions) - 1, 1)
    for position, inst in enumerate(instructions):
        kind_object = inst.kind
        kind = _kind_names.get(kind_object)
        if kind is None:
            kind = _kind_names.setdefault(kind_object, str(kind_object.name))
        if kind in SKIPPED:
            if kind == "GetSBlock":
                for output in tvm_api.array_items(inst.outputs):
                    block_ordinal.setdefault(output, len(block_ordinal))
            continue
        row = out[kept]
        kept += 1
        row[_KIND_INDEX.get(kind, _KIND_INDEX["other"])] = 1.0
        row[_POSITION] = position / last_position
        annotate = kind in ("Annotate", "Unannotate")
        inputs = inst.inputs
        if annotate:
            head = tvm_api.array_items(inputs, 2)
            block = head[0] if head else None
        else:
            block = tvm_api.array_item(inputs, 0)
        if block_ordinal and block is not None and block in block_ordinal:  # the block it touches comes first
            row[_BLOCK] = block_ordinal[block] / len(block_ordinal)
        if kind.startswith("Sample"):
            decisions = trace.decisions if decisions is None else decisions
            decision = tvm_api.map_get(decisions, inst)
            if decision is None:
                continue
            if kind == "SamplePerfectTile":
                factors = [int(f) for f in tvm_api.array_items(decision, MAX_TILES)]
                row[_TILE_START:_TILE_START + len(factors)] = [_log2(f) for f in factors]
                row[_EXTENT] = _log2(math.prod(factors))
            elif kind == "SampleCategorical":
                candidates = tvm_api.array_item(inst.attrs, 0)
                row[_VALUE] = _log2(int(tvm_api.array_item(candidates, int(decision))))
            elif kind == "SampleComputeLocation":
                row[_LOCATION] = float(int(decision))
        elif annotate:
            key = str(tvm_api.array_item(inst.attrs, 0))
            row[len(KINDS) + _ANNOTATION_INDEX.get(key, _ANNOTATION_INDEX["other"])] = 1.0
            value = head[1] if len(head) > 1 else None
            value = getattr(value, "value", value)  # IntImm in a live trace, int in a stored one
            if isinstance(value, int) and not isinstance(value, bool):  # parallel / vectorize extents
                row[_VALUE] = _log2(value)
    if kept == 0:
        return np.zeros((1, TRACE_FEATURE_DIM), dtype=np.float32)
    return out[:kept].copy()  # (l, f)


def per_store_features(context, candidates) -> list[np.ndarray]:
    """MetaSchedule's PerStoreFeature for each candidate: a list of (stores, 164) float32 arrays."""
    extractor = tvm_api.ms.feature_extractor.PerStoreFeature(extract_workload=False)
    return [tensor.numpy().astype(np.float32) for tensor in extractor.extract_from(context, candidates)]


def per_store_task_featuriser(target):
    """A `records.FeaturiseTask` computing `per_store_features` of stored records for `target`."""

    def featurise(workload, records) -> list[np.ndarray]:
        context = tvm_api.ms.TuneContext(mod=workload.mod, target=target)
        return per_store_features(context, [record.as_measure_candidate() for record in records])

    return featurise


def pad_batch(sequences: list[np.ndarray], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad (l_i, f) sequences to (b, l, f) with a (b, l) bool mask; keep the first max_len rows."""
    length = min(max(len(s) for s in sequences), max_len)
    width = sequences[0].shape[1]
    features = np.zeros((len(sequences), length, width), dtype=np.float32)  # (b, l, f)
    mask = np.zeros((len(sequences), length), dtype=bool)  # (b, l)
    for i, sequence in enumerate(sequences):
        kept = sequence[:length]
        features[i, : len(kept)] = kept
        mask[i, : len(kept)] = True
    return features, mask
