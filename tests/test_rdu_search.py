"""RDU inside tuning: the batch split, and a real tuning run through RDUSearch."""

from __future__ import annotations

import json

import numpy as np

from deploy.layout import database_dir
from deploy.options import TuningOptions
from deploy.pipeline import run_pipeline
from tcl_core import rdu_search
from tcl_core.rdu import RDUWeights
from tcl_core.rdu_search import choose_batch
from tests.models import tiny_mlp_onnx


def test_choose_batch_keeps_the_best_then_picks_away_from_them():
    scores = np.array([0.9, 0.8, 0.1, 0.2, 0.3, 0.0])
    # candidates 0, 1 (the best) and 4 sit together; 2 is far from them, 3 and 5 in between
    embeddings = np.array([[0.0, 0.0], [0.1, 0.0], [10.0, 10.0], [3.0, 3.0], [0.0, 0.1], [4.0, 4.0]])
    uncertainty = np.zeros(6)
    chosen = choose_batch(scores, embeddings, uncertainty, 4, 0.5)
    assert list(chosen[:2]) == [0, 1]  # the best-predicted half, best first
    assert 4 not in chosen and len(set(chosen.tolist())) == 4  # not the best picks' twin
    far_first = choose_batch(scores, embeddings, uncertainty, 4, 0.5,
                             weights=RDUWeights(representativeness=0.0, uncertainty=0.0))
    assert far_first[2] == 2  # diversity alone: the farthest from the best picks comes first


def test_choose_batch_without_rdu_is_the_top_k():
    scores = np.array([0.1, 0.5, 0.3, 0.9])
    chosen = choose_batch(scores, np.zeros((4, 2)), np.zeros(4), 2, 0.0)
    assert chosen.tolist() == [3, 1]


def test_choose_batch_avoids_what_the_task_measured_before():
    scores = np.array([1.0, 0.0, 0.0])
    embeddings = np.array([[0.0, 0.0], [5.0, 5.0], [-5.0, -5.0]])
    measured = np.array([[5.0, 5.1], [5.1, 5.0]])  # 1 is next to what was measured already
    chosen = choose_batch(scores, embeddings, np.zeros(3), 2, 0.5, measured=measured)
    assert chosen.tolist() == [0, 2]


def test_tuning_with_rdu_measures_the_whole_budget(tmp_path, monkeypatch):
    batches = []

    def recording(*args, **kwargs):
        chosen = choose_batch(*args, **kwargs)
        batches.append(len(chosen))
        return chosen

    monkeypatch.setattr(rdu_search, "choose_batch", recording)
    manifest = run_pipeline(
        tiny_mlp_onnx(tmp_path / "mlp.onnx", seed=5), output_dir=tmp_path / "out", state_dir=tmp_path / "state",
        options=TuningOptions(trials=8, cost_model="tcl", trials_per_iter=4, population=32, timing_repeats=3,
                              rdu_fraction=0.5),
    )
    assert manifest.cost_model == "tcl" and manifest.trials_measured == 8 and manifest.verification.passed
    records = (database_dir(tmp_path / "state", manifest.platform) / "database_tuning_record.json").read_text()
    traces = [json.dumps(json.loads(line)[1][0]) for line in records.splitlines() if line]
    assert len(traces) == 8 and len(set(traces)) == 8  # every measured candidate distinct
    assert batches and all(size == 4 for size in batches)  # the sampler chose each batch it could
