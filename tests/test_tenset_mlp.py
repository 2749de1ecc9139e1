"""The TenSet-MLP baseline: padding-invariant, and trainable by the student's own helpers."""

import numpy as np
import torch
import torch.nn.functional as F

from tcl_core.student import normalise_labels, pairwise_accuracy, parameter_count, predict, train_steps
from tcl_core.tenset_mlp import TensetMLP, TensetMLPConfig

torch.set_num_threads(1)
TINY = TensetMLPConfig(feature_dim=4, hidden_dim=32, max_len=12)


def _toy_group(g: int = 12, f: int = 4, lmax: int = 8):
    """Candidates whose run time is the sum of softplus(feature 0) over their stores."""
    lengths = torch.randint(1, lmax + 1, (g,))  # (g,)
    mask = torch.arange(lmax).unsqueeze(0) < lengths.unsqueeze(1)  # (g, l)
    features = torch.randn(g, lmax, f)  # (g, l, f)
    seconds = (F.softplus(features[..., 0]) * mask).sum(1) + 0.1  # (g,)
    return features, mask, normalise_labels(seconds)


def test_padding_does_not_change_the_score():
    torch.manual_seed(0)
    model = TensetMLP(TINY).eval()
    features, mask, _ = _toy_group()
    garbage = features.masked_fill(~mask.unsqueeze(-1), float("nan"))
    wider = torch.cat([garbage, torch.full((12, 3, 4), 7.0)], dim=1)
    wider_mask = torch.cat([mask, torch.zeros(12, 3, dtype=torch.bool)], dim=1)
    np.testing.assert_allclose(predict(model, features, mask), predict(model, wider, wider_mask), atol=1e-5)


def test_learns_a_toy_ranking_with_the_student_loss():
    torch.manual_seed(1)
    model = TensetMLP(TINY)
    train = [_toy_group() for _ in range(16)]
    held_out = [_toy_group() for _ in range(8)]

    def accuracy() -> float:
        return float(np.mean([pairwise_accuracy(torch.from_numpy(predict(model, x, m)), y) for x, m, y in held_out]))

    before = accuracy()
    losses = train_steps(model, train, steps=150, lr=3e-3)
    after = accuracy()
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    assert after > 0.8 and after > before + 0.05, (before, after)


def test_default_size_matches_tvms_segment_sum_mlp():
    # TVM's SegmentSumMLP at hidden 256 on 164 features: 164*256+256 + 3*(256*256+256) + 257
    assert parameter_count(TensetMLP()) == 164 * 256 + 256 + 3 * (256 * 256 + 256) + 257
