"""The student: padding and truncation, labels, ranking losses, training, persistence, prediction."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tcl_core.student import (
    Student,
    StudentConfig,
    lambda_rank_loss,
    listwise_loss,
    load_student,
    normalise_labels,
    pairwise_accuracy,
    pairwise_rank_loss,
    parameter_count,
    predict,
    save_student,
    train_steps,
)

torch.set_num_threads(1)
TINY = StudentConfig(feature_dim=4, d_model=16, n_layers=1, d_state=4, max_len=12)
# The listwise loss at a mild temperature: at its default the targets of the two worst candidates
# below differ by less than float32 resolves next to the others' shares.
LOSSES = [lambda_rank_loss, pairwise_rank_loss, functools.partial(listwise_loss, temperature=0.5)]


def _toy_group(g: int = 12, f: int = 4, lmax: int = 8):
    """Candidates whose run time is the mean of softplus(feature 0) over their valid positions."""
    lengths = torch.randint(2, lmax + 1, (g,))  # (g,)
    mask = torch.arange(lmax).unsqueeze(0) < lengths.unsqueeze(1)  # (g, l)
    features = torch.randn(g, lmax, f)  # (g, l, f)
    seconds = (F.softplus(features[..., 0]) * mask).sum(1) / lengths + 0.2  # (g,)
    return features, mask, normalise_labels(seconds)


def test_padding_with_garbage_gives_the_unpadded_score():
    torch.manual_seed(0)
    model = Student(TINY).eval()
    alone = torch.randn(1, 5, 4)  # (1, 5, f)
    other = torch.randn(1, 9, 4)  # a longer neighbour in the same batch
    padded = torch.cat([alone, torch.full((1, 4, 4), float("nan"))], dim=1)  # (1, 9, f)
    padded[0, 6:] = 1e5
    batch = torch.cat([padded, other])  # (2, 9, f)
    mask = torch.tensor([[True] * 5 + [False] * 4, [True] * 9])  # (2, 9)
    scores = model(batch, mask)  # (2,)
    torch.testing.assert_close(scores[0], model(alone, torch.ones(1, 5, dtype=torch.bool))[0])
    torch.testing.assert_close(scores[1], model(other)[0])
    assert torch.isfinite(scores).all() and scores[0] != scores[1]


def test_long_sequences_are_truncated_to_max_len():
    torch.manual_seed(1)
    model = Student(TINY).eval()
    long = torch.randn(2, 20, 4)  # (b, 20, f), longer than max_len = 12
    mask = torch.ones(2, 20, dtype=torch.bool)
    torch.testing.assert_close(model(long, mask), model(long[:, :12], mask[:, :12]))


def test_normalise_labels():
    labels = normalise_labels(np.array([2.0, 1.0, 4.0, np.inf, np.nan, 0.0]))
    torch.testing.assert_close(labels, torch.tensor([0.5, 1.0, 0.25, 0.0, 0.0, 0.0]))
    assert torch.equal(normalise_labels(torch.tensor([np.inf, np.nan])), torch.zeros(2))


@pytest.mark.parametrize("loss_fn", LOSSES)
def test_losses_prefer_the_right_order(loss_fn):
    labels = torch.tensor([1.0, 0.8, 0.5, 0.1, 0.0])
    right, reversed_ = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]), torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])
    assert loss_fn(right, labels) < loss_fn(reversed_, labels)
    scores = torch.zeros(5, requires_grad=True)
    loss_fn(scores, labels).backward()
    assert (scores.grad[:-1] - scores.grad[1:] < 0).all()  # descent raises better candidates more


@pytest.mark.parametrize("loss_fn", LOSSES)
def test_losses_on_degenerate_groups_are_zero_not_nan(loss_fn):
    for scores, labels in [
        (torch.tensor([0.3]), torch.tensor([1.0])),  # a group of one
        (torch.tensor([0.3, -2.0, 1.0]), torch.tensor([0.5, 0.5, 0.5])),  # all tied
        (torch.tensor([0.3, -2.0]), torch.tensor([0.0, 0.0])),  # all failed
    ]:
        scores = scores.requires_grad_()
        loss = loss_fn(scores, labels)
        loss.backward()
        assert loss.item() == 0.0 and torch.isfinite(scores.grad).all()
    # Partial ties: only the strictly ordered pairs count, so the tied pair's order is free.
    labels = torch.tensor([1.0, 0.5, 0.5])
    assert math.isclose(loss_fn(torch.tensor([9.0, 1.0, 0.0]), labels).item(),
                        loss_fn(torch.tensor([9.0, 0.0, 1.0]), labels).item(), rel_tol=1e-5)


def test_sharper_gains_weigh_the_near_best_pair_more():
    labels = torch.tensor([1.0, 0.8, 0.1])
    scores = torch.zeros(3, requires_grad=True)

    def grads(gain_scale):
        scores.grad = None
        lambda_rank_loss(scores, labels, gain_scale=gain_scale).backward()
        return scores.grad.clone()

    flat, sharp = grads(1.0), grads(4.0)
    # Gain 1 is TLP's 2^label - 1: checked against the formula written out for the top pair.
    ideal = sum((2.0 ** y - 1) / math.log2(2 + k) for k, y in enumerate([1.0, 0.8, 0.1]))
    top_pair = abs((2.0 - 1) - (2.0 ** 0.8 - 1)) * (1 - 1 / math.log2(3)) / ideal
    assert math.isclose(lambda_rank_loss(torch.tensor([0.0, 0.0, -50.0]), labels, gain_scale=1.0).item(),
                        top_pair * math.log(2), rel_tol=1e-4)
    # The push apart of the best two, relative to the push on the worst, grows with the scale.
    assert (flat[0] - flat[1]) / -flat[2] < (sharp[0] - sharp[1]) / -sharp[2]


def test_listwise_target_concentrates_on_the_fastest_as_temperature_falls():
    labels = torch.tensor([1.0, 0.9, 0.5])
    scores = torch.zeros(3, requires_grad=True)
    # At zero scores the gradient is softmax(scores) - target, so it reads the target off.
    listwise_loss(scores, labels, temperature=0.05).backward()
    target = 1 / 3 - scores.grad
    expected = torch.softmax(labels / 0.05, dim=0)
    assert torch.allclose(target, expected, atol=1e-6)
    assert math.isclose(target[1].item() / target[0].item(), math.exp(-2), rel_tol=1e-4)
    # Ranking the fastest first costs less than ranking the runner-up first, and far less than last.
    first, second, last = (listwise_loss(torch.tensor(s), labels).item()
                           for s in ([4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]))
    assert first < second < last


def test_training_learns_a_toy_ranking():
    torch.manual_seed(2)
    train = [_toy_group() for _ in range(16)]
    held_out = [_toy_group() for _ in range(8)]
    model = Student(TINY)

    def accuracy() -> float:
        return float(np.mean([pairwise_accuracy(torch.from_numpy(predict(model, x, m)), y)
                              for x, m, y in held_out]))

    before = accuracy()
    losses = train_steps(model, train, steps=120, lr=1e-2)  # the default LambdaRank loss
    after = accuracy()
    assert len(losses) == 120 and all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    assert after > 0.8 and after > before + 0.05, (before, after)
    assert not model.training


def test_train_steps_pairwise_and_bad_loss_name():
    torch.manual_seed(3)
    model = Student(TINY)
    x, m, y = _toy_group(g=6)
    single = (x[:1], m[:1], y[:1])  # a one-candidate task: no pairs, no NaN, weights untouched
    before = [p.detach().clone() for p in model.parameters()]
    assert train_steps(model, [single], steps=2, lr=1e-2, loss="pairwise") == [0.0, 0.0]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    losses = train_steps(model, [(x, m, y)], steps=3, lr=1e-2, loss="pairwise")
    assert len(losses) == 3 and losses[0] > 0
    with pytest.raises(ValueError):
        train_steps(model, [(x, m, y)], steps=1, lr=1e-2, loss="mse")


def test_training_with_the_listwise_loss_learns_a_toy_ranking():
    torch.manual_seed(2)
    train = [_toy_group() for _ in range(16)]
    held_out = [_toy_group() for _ in range(8)]
    model = Student(TINY)
    losses = train_steps(model, train, steps=120, lr=1e-2, loss="listwise", temperature=0.2)
    accuracy = float(np.mean([pairwise_accuracy(torch.from_numpy(predict(model, x, m)), y)
                              for x, m, y in held_out]))
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    assert accuracy > 0.8, accuracy


def test_cosine_schedule_warms_up_anneals_and_still_learns():
    torch.manual_seed(2)
    train = [_toy_group() for _ in range(16)]
    model = Student(TINY)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    seen: list[float] = []

    def record_rate() -> torch.Tensor:  # called once per step, before the optimiser steps
        seen.append(optimiser.param_groups[0]["lr"])
        return torch.zeros(())

    losses = train_steps(model, train, steps=100, lr=1e-2, optimiser=optimiser, schedule="cosine",
                         extra_loss=record_rate)
    assert len(seen) == 100
    assert seen[0] < 1e-3 and max(seen) == pytest.approx(1e-2, rel=1e-3) and seen[-1] < 1e-4
    assert seen.index(max(seen)) <= 5  # the peak is reached within the first 5% of the steps
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    with pytest.raises(ValueError, match="schedule"):
        train_steps(model, train, steps=1, lr=1e-2, schedule="linear")
    for steps in (1, 2, 3, 10, 20, 39):  # short runs (20 once crashed inside OneCycleLR) still train
        assert len(train_steps(model, train, steps=steps, lr=1e-2, schedule="cosine")) == steps


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(4)
    model = Student(TINY)
    train_steps(model, [_toy_group()], steps=2, lr=1e-2)  # move off the initialisation
    x, m, _ = _toy_group(g=7)
    save_student(model, tmp_path / "student.pt")
    loaded = load_student(tmp_path / "student.pt")
    assert loaded.config == TINY
    assert np.array_equal(predict(loaded, x, m), predict(model, x, m))
    torch.save({"format": "something-else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError):
        load_student(tmp_path / "other.pt")


def test_predict_batches_agree_and_handle_empty_input():
    torch.manual_seed(5)
    model = Student(TINY)
    x, m, _ = _toy_group(g=10)
    whole = predict(model, x.numpy(), m.numpy())
    assert whole.shape == (10,) and whole.dtype == np.float32
    np.testing.assert_allclose(predict(model, x, m, batch_size=3), whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predict(model, x, m, sequential=True), whole, rtol=1e-4, atol=1e-5)
    assert predict(model, x[:0], m[:0]).shape == (0,)


def test_default_parameter_count():
    model = Student(StudentConfig(feature_dim=32))
    count = parameter_count(model)
    print(f"default Student(feature_dim=32): {count} parameters")
    # Per layer: in_proj 16384 + conv 640 + x_proj 4608 + dt_proj 640 + A 2048 + D 128 + out 8192 + norm 64.
    assert count == 2 * 32704 + (32 * 64 + 64) + 64 + (64 * 64 + 64 + 64 + 1)
    assert count < 200_000
