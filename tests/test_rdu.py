"""The RDU sampler: each term does what it says, budgets hold, and choices ignore run times."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tcl_core.rdu import RDUWeights, embed_candidates, rdu_select, select_subset, subset_size
from tcl_core.records import TaskRecords
from tcl_core.student import Student, StudentConfig, normalise_labels

torch.set_num_threads(1)
ONLY_R = RDUWeights(representativeness=1, diversity=0, uncertainty=0)
ONLY_D = RDUWeights(representativeness=0, diversity=1, uncertainty=0)
ONLY_U = RDUWeights(representativeness=0, diversity=0, uncertainty=1)


def _two_clusters(rng, dense=30, sparse=3):
    """A dense blob at the origin and a few points far away: (n, 2)."""
    return np.concatenate([rng.normal(0, 0.1, (dense, 2)), rng.normal(10, 0.1, (sparse, 2))])


def test_representativeness_picks_from_the_dense_region():
    points = _two_clusters(np.random.default_rng(0))
    picked = rdu_select(points, np.zeros(len(points)), 3, weights=ONLY_R)
    assert (picked < 30).all()  # all from the dense blob


def test_diversity_covers_both_regions():
    points = _two_clusters(np.random.default_rng(1))
    picked = rdu_select(points, np.zeros(len(points)), 2, weights=RDUWeights())
    assert (picked < 30).any() and (picked >= 30).any()


def test_diversity_stays_away_from_what_is_already_measured():
    points = _two_clusters(np.random.default_rng(2))
    measured = points[:5]  # the dense blob is already known
    picked = rdu_select(points, np.zeros(len(points)), 1, measured=measured, weights=ONLY_D)
    assert picked[0] >= 30


def test_uncertainty_picks_the_least_certain():
    points = np.random.default_rng(3).normal(size=(20, 4))
    uncertainty = np.linspace(0, 1, 20)
    assert list(rdu_select(points, uncertainty, 3, weights=ONLY_U)) == [19, 18, 17]


def test_budget_is_respected_and_picks_are_distinct():
    points = np.random.default_rng(4).normal(size=(50, 3))
    picked = rdu_select(points, np.random.default_rng(5).random(50), 10)
    assert len(picked) == 10 and len(set(picked.tolist())) == 10
    assert len(rdu_select(points[:3], np.zeros(3), 10)) == 3
    assert len(rdu_select(points, np.zeros(50), 0)) == 0


def test_subset_size_keeps_a_pair():
    assert subset_size(32, 0.1) == 3 and subset_size(5, 0.1) == 2 and subset_size(1, 0.1) == 1


def _task(rng, g=20, seed_offset=0):
    features = tuple(rng.normal(size=(int(rng.integers(3, 8)), 4)).astype(np.float32) for _ in range(g))
    seconds = rng.uniform(1e-4, 1e-3, g)
    return TaskRecords(task_index=seed_offset, workload_hash=str(seed_offset), features=features,
                       run_seconds=seconds, labels=normalise_labels(seconds).numpy())


@pytest.mark.parametrize("method", ["rdu", "random"])
def test_select_subset_renormalises_and_ignores_run_times(method):
    rng = np.random.default_rng(6)
    tasks = [_task(rng, seed_offset=i) for i in range(3)]
    torch.manual_seed(0)
    student = Student(StudentConfig(feature_dim=4, d_model=8, n_layers=1, d_state=4))
    kept = select_subset(tasks, 0.25, method=method, student=student, seed=1)
    assert [t.size for t in kept] == [5, 5, 5]
    for task in kept:
        assert task.labels.max() == pytest.approx(1.0)  # best kept = 1
        assert set(task.run_seconds) <= set(tasks[task.task_index].run_seconds)
    shuffled = [TaskRecords(t.task_index, t.workload_hash, t.features, t.run_seconds[::-1].copy(),
                            t.labels[::-1].copy()) for t in tasks]
    again = select_subset(shuffled, 0.25, method=method, student=student, seed=1)
    for a, b in zip(kept, again):  # same features chosen though the run times were permuted
        assert all(np.array_equal(x, y) for x, y in zip(a.features, b.features))


def test_embeddings_with_and_without_a_student():
    rng = np.random.default_rng(7)
    sequences = [rng.normal(size=(int(rng.integers(2, 6)), 4)).astype(np.float32) for _ in range(70)]
    raw, zero = embed_candidates(sequences, None)
    assert raw.shape == (70, 8) and not zero.any()
    torch.manual_seed(0)
    student = Student(StudentConfig(feature_dim=4, d_model=8, n_layers=1, d_state=4))
    embedded, uncertainty = embed_candidates(sequences, student)
    assert embedded.shape == (70, 8) and (uncertainty > 0).all()
    again, same = embed_candidates(sequences, student)
    np.testing.assert_array_equal(uncertainty, same)  # seeded dropout: the same pool, the same picks
