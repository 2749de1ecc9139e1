"""Top-k score, random baseline and pairwise accuracy on toy cases worked out by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tcl_core.metrics import (
    pairwise_accuracy, random_top_k_score, ranking_summary, throughput, top_k_score, weighted_mean,
)

INF = math.inf


def test_throughput_is_zero_for_failures():
    assert throughput(np.array([0.5, INF, np.nan, 0.0, -1.0])).tolist() == [2.0, 0.0, 0.0, 0.0, 0.0]


def test_top_k_of_a_reversed_ranking():
    seconds = np.array([1.0, 2.0, 4.0])  # throughput 1, 0.5, 0.25
    worst_first = np.array([0.0, 1.0, 2.0])
    assert top_k_score(worst_first, seconds, 1) == pytest.approx(0.25)
    assert top_k_score(worst_first, seconds, 2) == pytest.approx(0.5)
    assert top_k_score(worst_first, seconds, 3) == 1.0
    assert top_k_score(worst_first, seconds, 10) == 1.0  # k beyond the group: everything is chosen
    assert top_k_score(-worst_first, seconds, 1) == 1.0


def test_tied_scores_give_the_expected_tie_break():
    seconds = np.array([2.0, 1.0, 4.0])  # throughput 0.5, 1, 0.25
    scores = np.array([1.0, 1.0, 0.0])  # the first two tie for the top
    assert top_k_score(scores, seconds, 1) == pytest.approx((0.5 + 1.0) / 2)
    assert top_k_score(scores, seconds, 2) == 1.0
    # a sure pick above the tie sets a floor: top-2 = max(0.5, random one of {1, 0.25})
    assert top_k_score(np.array([2.0, 1.0, 1.0]), seconds, 2) == pytest.approx((1.0 + 0.5) / 2)


def test_failed_candidates_count_as_zero_throughput():
    seconds = np.array([INF, 1.0, 2.0])
    scores = np.array([5.0, 0.0, 1.0])  # the model's favourite failed
    assert top_k_score(scores, seconds, 1) == 0.0
    assert top_k_score(scores, seconds, 2) == pytest.approx(0.5)
    assert math.isnan(top_k_score(scores, np.array([INF, INF, np.nan]), 1))  # nothing succeeded


def test_random_baseline_by_hand_and_by_brute_force():
    seconds = np.array([1.0, 2.0, 4.0])
    assert random_top_k_score(seconds, 1) == pytest.approx((1 + 0.5 + 0.25) / 3)
    assert random_top_k_score(seconds, 2) == pytest.approx((1 + 1 + 0.5) / 3)  # pairs {1,.5} {1,.25} {.5,.25}
    seconds = np.array([1.0, 3.0, 3.0, INF, 2.0])  # tied times and a failure
    speed = throughput(seconds)
    for k in (1, 2, 3):
        brute = np.mean([speed[list(p[:k])].max() for p in itertools.permutations(range(5))]) / speed.max()
        assert random_top_k_score(seconds, k) == pytest.approx(brute)
        assert top_k_score(np.full(5, 7.0), seconds, k) == pytest.approx(brute)  # constant model = random


def test_top_k_checks_its_arguments():
    with pytest.raises(ValueError):
        top_k_score(np.zeros(2), np.ones(3), 1)
    with pytest.raises(ValueError):
        top_k_score(np.zeros(2), np.ones(2), 0)
    with pytest.raises(ValueError):
        top_k_score(np.array([0.0, np.nan]), np.ones(2), 1)


def test_pairwise_accuracy():
    labels = np.array([1.0, 0.5, 0.25])
    assert pairwise_accuracy(np.array([3.0, 2.0, 1.0]), labels) == 1.0
    assert pairwise_accuracy(np.array([1.0, 2.0, 3.0]), labels) == 0.0
    assert pairwise_accuracy(np.zeros(3), labels) == 0.5  # constant: every pair a coin flip
    # two failures (label 0) tie: only the two pairs against the success count, both wrong
    assert pairwise_accuracy(np.array([0.0, 1.0, 2.0]), np.array([1.0, 0.0, 0.0])) == 0.0
    # one tied-score pair (1/2) and two right ones
    assert pairwise_accuracy(np.array([2.0, 2.0, 0.0]), np.array([1.0, 0.5, 0.0])) == pytest.approx(2.5 / 3)
    assert math.isnan(pairwise_accuracy(np.array([1.0, 2.0]), np.array([0.0, 0.0])))


def test_weighted_mean_skips_undefined_tasks():
    assert weighted_mean([1.0, math.nan, 0.0], [3.0, 5.0, 1.0]) == pytest.approx(0.75)
    assert math.isnan(weighted_mean([math.nan], [1.0]))


def test_ranking_summary_weights_tasks():
    perfect = (np.array([2.0, 1.0]), np.array([1.0, 2.0]), np.array([1.0, 0.5]))
    backwards = (np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([1.0, 0.5]))
    scores, seconds, labels = zip(perfect, backwards)
    summary = ranking_summary(scores, seconds, labels, [3.0, 1.0], ks=(1, 5))
    assert summary["top1"] == pytest.approx((3 * 1.0 + 1 * 0.5) / 4)
    assert summary["top5"] == 1.0
    assert summary["random_top1"] == pytest.approx(0.75) and summary["random_top5"] == 1.0
    assert summary["pairwise_accuracy"] == pytest.approx(0.75)
