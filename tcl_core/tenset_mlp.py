"""The TenSet-MLP baseline (Zheng et al., 2021): per-store features -> MLP -> sum over stores -> score.

The TCL paper's baseline. TVM ships it (`cost_model.mlp_model.SegmentSumMLP`) but it does not
train as shipped (shared notes, item 10), so this is the same network, written to our interface:
it takes the padded (b, l, f) + mask batches that `Student` takes, so `student.train_steps`,
`student.predict` and `evaluate.evaluate` drive it unchanged, with the same ranking loss.
Layers as in TVM's SegmentSumMLP (hidden 256, no norm): encoder Linear-ReLU-Linear-ReLU per
store, a sum over the program's stores (its cost is roughly the sum of its loop nests'), two
residual Linear-ReLU layers and a linear decoder.

Shape letters: b batch of candidates, l stores (padded), f features per store, h hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tcl_core.features import PER_STORE_FEATURE_DIM


@dataclass(frozen=True)
class TensetMLPConfig:
    feature_dim: int = PER_STORE_FEATURE_DIM  # f: PerStoreFeature(extract_workload=False) columns
    hidden_dim: int = 256                      # h, as TVM's SegmentSumMLP
    max_len: int = 64                          # stores kept per program (as the student's max_len)


class TensetMLP(nn.Module):
    """Scores (b,) for per-store feature batches; higher = predicted faster."""

    def __init__(self, config: TensetMLPConfig | None = None) -> None:
        super().__init__()
        self.config = config or TensetMLPConfig()
        f, h = self.config.feature_dim, self.config.hidden_dim
        self.encoder = nn.Sequential(nn.Linear(f, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.layer0 = nn.Sequential(nn.Linear(h, h), nn.ReLU())
        self.layer1 = nn.Sequential(nn.Linear(h, h), nn.ReLU())
        self.decoder = nn.Linear(h, 1)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None, *,
                sequential: bool | None = None) -> torch.Tensor:
        """features: (b, l, f), mask: (b, l) bool, True = a real store -> (b,). `sequential` is ignored."""
        del sequential  # accepted so the student's training and prediction helpers can drive it
        if mask is None:
            mask = torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)  # (b, l)
        features, mask = features[:, : self.config.max_len], mask[:, : self.config.max_len].bool()
        encoded = self.encoder(features.masked_fill(~mask.unsqueeze(-1), 0.0))  # (b, l, h)
        x = (encoded * mask.unsqueeze(-1)).sum(dim=1)  # (b, h): the segment sum over stores
        x = self.layer0(x) + x  # (b, h)
        x = self.layer1(x) + x  # (b, h)
        return self.decoder(x).squeeze(-1)  # (b,)
