"""The student cost network: a candidate program's feature sequence -> one score, and its training.

A task's candidates are only ever compared with each other, so the network is trained to rank,
not to regress: labels are throughput normalised per task (`normalise_labels`, best = 1) and the
losses (`lambda_rank_loss`, `pairwise_rank_loss`, `listwise_loss`) look only at orderings within one group.
Higher score = predicted faster.

Shape letters: b batch of candidates, l sequence length, f feature_dim, d d_model, g group size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tcl_core.mamba import MambaConfig, ResidualMamba

__all__ = [
    "StudentConfig", "Student", "parameter_count", "normalise_labels", "SCHEDULES", "GAIN_SCALE", "LOSSES",
    "lambda_rank_loss", "pairwise_rank_loss", "listwise_loss", "LISTWISE_TEMPERATURE", "pairwise_accuracy",
    "train_steps", "predict", "save_student", "load_student",
]

_FILE_FORMAT = "tcl-student/1"  # bump when the saved layout or the architecture changes

Group = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # features (g, l, f), mask (g, l), labels (g,)


@dataclass(frozen=True)
class StudentConfig:
    """Everything needed to rebuild a Student; saved beside its weights."""

    feature_dim: int            # f: features per sequence element (set by tcl_core.features)
    d_model: int = 64           # D: width of the residual stream
    n_layers: int = 2           # number of ResidualMamba layers
    d_state: int = 16           # N: SSM state size per channel
    d_conv: int = 4             # causal conv kernel width
    expand: int = 2             # E: d_inner = E * d_model
    dt_rank: int | None = None  # R: Δ projection rank; None -> ceil(d_model / 16)
    dropout: float = 0.0        # on each residual branch; 0 because in-search updates see few samples
    max_len: int = 64           # longer sequences keep their first max_len elements, the rest is dropped

    @property
    def mamba(self) -> MambaConfig:
        """The per-layer block config these fields describe."""
        return MambaConfig(
            d_model=self.d_model, d_state=self.d_state, d_conv=self.d_conv,
            expand=self.expand, dt_rank=self.dt_rank,
        )


class Student(nn.Module):
    """Embed -> n_layers x ResidualMamba -> RMSNorm -> masked mean pool -> MLP -> score.

    Pooling is the mean over valid positions, not the last valid state: a program's run time is
    close to a sum of its loop nests' costs, which a mean reads off every position directly (and
    every position gets gradient), while the last state would have to carry the whole program
    through the SSM's forgetting. The mean, not the sum, keeps the scale independent of length.
    """

    def __init__(self, config: StudentConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Linear(config.feature_dim, config.d_model)
        self.layers = nn.ModuleList(
            ResidualMamba(config.mamba, dropout=config.dropout) for _ in range(config.n_layers)
        )
        self.norm = nn.RMSNorm(config.d_model, eps=1e-5)
        self.head = nn.Sequential(
            nn.Linear(config.d_model, config.d_model), nn.SiLU(), nn.Linear(config.d_model, 1)
        )

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor | None = None, *, sequential: bool | None = None
    ) -> torch.Tensor:
        """features: (b, l, f) float, mask: (b, l) bool, True = valid, right-padded -> scores (b,).

        `sequential` overrides the blocks' scan choice (None: each block's own, parallel by default).
        """
        return self.head(self.encode(features, mask, sequential=sequential)).squeeze(-1)  # (b,)

    def encode(
        self, features: torch.Tensor, mask: torch.Tensor | None = None, *, sequential: bool | None = None
    ) -> torch.Tensor:
        """The pooled representation the head scores: (b, l, f), (b, l) -> (b, d).

        The RDU sampler measures representativeness and diversity in this space (tcl_core.rdu).
        """
        cfg = self.config
        if mask is None:
            mask = torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)  # (b, l)
        features, mask = features[:, : cfg.max_len], mask[:, : cfg.max_len].bool()  # (b, l', f), (b, l')
        keep = mask.unsqueeze(-1)  # (b, l', 1)
        x = self.embed(features.masked_fill(~keep, 0.0))  # (b, l', d); padding may hold NaN
        for layer in self.layers:
            x = layer(x, mask, sequential=sequential)  # (b, l', d)
        x = self.norm(x).masked_fill(~keep, 0.0)  # (b, l', d)
        count = mask.sum(dim=1, keepdim=True).clamp(min=1)  # (b, 1); empty sequences pool to 0
        return x.sum(dim=1) / count  # (b, d)

    def mc_dropout_scores(self, pooled: torch.Tensor, *, passes: int = 16, p: float = 0.2) -> torch.Tensor:
        """(b, d) pooled embeddings -> (passes, b) scores with dropout on the head's input.

        Monte Carlo dropout as the uncertainty signal of the RDU sampler: where the passes
        disagree, the head leans on few directions of the embedding, which is where the student
        has seen little. Dropout sits only before the head so the trunk runs once per candidate.
        """
        stacked = pooled.unsqueeze(0).expand(passes, *pooled.shape)  # (passes, b, d)
        return self.head(F.dropout(stacked, p=p, training=True)).squeeze(-1)  # (passes, b)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters (the student is meant to stay small enough for CPU search)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def normalise_labels(run_seconds: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Per-task label: min_time / time, so the fastest candidate is 1; failures (inf, NaN, <= 0) are 0.

    Dividing by the task's best makes labels comparable across tasks of very different sizes.
    """
    t = torch.as_tensor(run_seconds, dtype=torch.float32)  # (g,)
    ok = torch.isfinite(t) & (t > 0)  # (g,)
    if not ok.any():
        return torch.zeros_like(t)
    best = t[ok].min()
    return torch.where(ok, best / t.where(ok, torch.ones_like(t)), torch.zeros_like(t))  # (g,)


def _ordered_pairs(labels: torch.Tensor) -> torch.Tensor:
    """(g, g) bool: True where candidate i should rank above j (strictly; ties give no pair)."""
    return labels.unsqueeze(1) > labels.unsqueeze(0)  # (g, g)


def pairwise_rank_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss log(1 + exp(-(s_i - s_j))) over pairs with label_i > label_j.

    0 (with a graph, so backward works) for a group of one or an all-tied group.
    """
    pairs = _ordered_pairs(labels)  # (g, g)
    if not pairs.any():
        return scores.sum() * 0.0
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)  # (g, g): s_i - s_j
    return F.softplus(-diff[pairs]).mean()


# LambdaRank's gains are 2^(GAIN_SCALE * label) - 1. At 1 (TLP's 2^label - 1 on labels in [0, 1])
# the best candidate's gain is 1 and one at 80% of its speed still 0.74, so near-best pairs weigh
# little; at 4 they are 15 and 8.2. On the rocketlake data (held-out MobileNetV2 + ViT block, 3
# seeds) 4 lifted top-1 from 0.688 to 0.737 at the same top-5 (docs/cost_model.md, "Sharper gains").
GAIN_SCALE = 4.0


def lambda_rank_loss(scores: torch.Tensor, labels: torch.Tensor, *, sigma: float = 1.0,
                     gain_scale: float = GAIN_SCALE) -> torch.Tensor:
    """LambdaRank (as TLP/TenSet use it): pairwise logistic loss weighted by each pair's |ΔNDCG|.

    Gains are 2^(gain_scale * label) - 1 with labels in [0, 1] (see GAIN_SCALE); discounts
    1 / log2(1 + rank) under the current scores. Weighting by how much swapping i and j would
    change NDCG focuses training on the top of the list, which is what the search consumes.
    Summed over pairs, as in TLP, so the gradient per pair is exactly its lambda. 0 for groups of
    one, all-tied groups and all-zero labels.
    """
    g = scores.shape[0]
    pairs = _ordered_pairs(labels)  # (g, g)
    gains = torch.pow(2.0, gain_scale * labels.float()) - 1.0  # (g,)
    positions = torch.arange(1, g + 1, dtype=torch.float32, device=scores.device)  # (g,)
    ideal_dcg = (gains.sort(descending=True).values / torch.log2(1.0 + positions)).sum()
    if not pairs.any() or ideal_dcg <= 0:
        return scores.sum() * 0.0
    with torch.no_grad():  # the weights are the lambdas' magnitudes, not something to differentiate
        rank = torch.empty_like(positions)  # (g,): 1-based rank of each candidate under the scores
        rank[scores.argsort(descending=True)] = positions
        discount = 1.0 / torch.log2(1.0 + rank)  # (g,)
        delta_ndcg = (gains.unsqueeze(1) - gains.unsqueeze(0)).abs() * (
            discount.unsqueeze(1) - discount.unsqueeze(0)
        ).abs() / ideal_dcg  # (g, g)
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)  # (g, g)
    return (delta_ndcg[pairs] * F.softplus(-sigma * diff[pairs])).sum()


# Softmax temperature of the listwise loss's target, on labels in [0, 1]: at 0.05 a candidate at
# 90% of the best's speed gets e^-2 = 0.14 of the best's share, one at 80% e^-4 = 0.02.
LISTWISE_TEMPERATURE = 0.05


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor, *,
                  temperature: float = LISTWISE_TEMPERATURE) -> torch.Tensor:
    """ListNet's top-one loss: cross-entropy from softmax(labels / temperature) to softmax(scores).

    Every candidate's gradient pushes towards the target's share of the group, and a low
    temperature puts nearly all of it on the few fastest, which is what TenSet's top-k scores
    (and the search) consume. 0 for groups of one, all-tied groups and all-zero labels. On the
    znver4 records it ranked held-out models below LambdaRank at every temperature tried
    (docs/cost_model.md, "A listwise loss"), so it is a sweep option, not the default.
    """
    labels = labels.float()
    if scores.shape[0] < 2 or not (labels > 0).any() or (labels == labels[0]).all():
        return scores.sum() * 0.0
    target = torch.softmax(labels / temperature, dim=0)  # (g,)
    return -(target * torch.log_softmax(scores, dim=0)).sum()


def pairwise_accuracy(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of strictly ordered pairs the scores put the right way round (nan if there are none)."""
    pairs = _ordered_pairs(labels)  # (g, g)
    if not pairs.any():
        return math.nan
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)  # (g, g)
    return (diff[pairs] > 0).float().mean().item()


_LOSSES = {"lambda": lambda_rank_loss, "pairwise": pairwise_rank_loss, "listwise": listwise_loss}
LOSSES = tuple(_LOSSES)  # the ranking losses train_steps knows
SCHEDULES = ("constant", "cosine")  # learning-rate schedules train_steps knows (see there)


def train_steps(
    model: Student, groups: list[Group], *, steps: int, lr: float, loss: str = "lambda",
    sequential: bool | None = None, optimiser: torch.optim.Optimizer | None = None,
    extra_loss: Callable[[], torch.Tensor] | None = None, schedule: str = "constant",
    gain_scale: float = GAIN_SCALE, temperature: float = LISTWISE_TEMPERATURE,
) -> list[float]:
    """Run `steps` Adam steps, one group (one task's candidates) per step; return each step's loss.

    Groups are visited in a fresh random order on each pass, so no task dominates a stretch of
    steps. Used for offline training and for the cost model's in-search `update` alike. The model
    is left in eval mode. `sequential` picks the scan as in `Student.forward` (on CPU the
    step-by-step one measured about 1.7x faster per training step). `optimiser` carries Adam's
    state across calls (the in-search updates); None makes a fresh one with `lr`. `extra_loss`,
    called once per step, is added to the ranking loss (continual distillation's term towards
    the teacher, tcl_core.distill); the returned losses include it. `schedule` "cosine" warms the
    learning rate up over the first 5% of the steps to `lr` and anneals it to ~0 by the last
    (one-cycle); offline training on the znver4 data measured it about 2 points of held-out
    top-5 above a constant rate at the same 2,400 steps (0.911 vs 0.890, 3 seeds). "constant" keeps `lr` (the in-search updates).
    `gain_scale` sharpens LambdaRank's gains (GAIN_SCALE); `temperature` is the listwise loss's
    (LISTWISE_TEMPERATURE); the pairwise loss has neither.
    """
    if loss not in _LOSSES:
        raise ValueError(f"loss must be one of {sorted(_LOSSES)}, got {loss!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not groups:
        return []
    settings = {"lambda": {"gain_scale": gain_scale}, "listwise": {"temperature": temperature}}.get(loss, {})
    loss_fn = functools.partial(_LOSSES[loss], **settings)
    optimiser = optimiser or torch.optim.Adam(model.parameters(), lr=lr)
    # The warm-up lasts at least 2 steps: OneCycleLR divides by (warm-up steps - 1), so at 20 steps
    # 5% crashed with ZeroDivisionError. Below 3 steps there is no cycle to run.
    scheduler = (torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=lr, total_steps=steps,
                                                     pct_start=max(0.05, 2.0 / steps))
                 if schedule == "cosine" and steps > 2 else None)
    model.train()
    losses: list[float] = []
    order: list[int] = []
    for _ in range(steps):
        if not order:
            order = torch.randperm(len(groups)).tolist()
        features, mask, labels = groups[order.pop()]
        value = loss_fn(model(features, mask, sequential=sequential), labels)
        if extra_loss is not None:
            value = value + extra_loss()
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        optimiser.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(value.item())
    model.eval()
    return losses


def predict(
    model: Student,
    features: torch.Tensor | np.ndarray,
    mask: torch.Tensor | np.ndarray,
    *,
    batch_size: int = 128,
    sequential: bool | None = None,
) -> np.ndarray:
    """Scores (b,) float32 for many candidates, `batch_size` at a time so memory stays bounded.

    Candidates are scored in order of length and each batch is cut to its longest sequence, so
    short programs do not pay for the padding of long ones (exact: the blocks are causal and the
    pooling ignores padding). The parallel scan materialises (batch, l, d_inner, d_state) floats
    several times over, and on CPU 512 at a time measured about 3x slower than 64 (the big
    tensors fall out of cache). `sequential=True` uses the step-by-step scan, which on 2 CPU
    cores measured 3-10x faster still, as it holds one step's state at a time (128 per batch
    was its best); the parallel scan's short depth pays off on accelerators.
    """
    device = next(model.parameters()).device
    features = torch.as_tensor(features, dtype=torch.float32)  # (b, l, f)
    mask = torch.as_tensor(mask, dtype=torch.bool)  # (b, l)
    lengths = mask.sum(dim=1)  # (b,)
    order = torch.argsort(lengths, stable=True)  # (b,): shortest first
    scores = torch.empty(features.shape[0], dtype=torch.float32)  # (b,)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, features.shape[0], batch_size):
            rows = order[start:start + batch_size]  # (<= batch_size,)
            length = max(int(lengths[rows].max()), 1)
            chunk_features = features[rows, :length].to(device)  # (<= batch_size, length, f)
            chunk_mask = mask[rows, :length].to(device)  # (<= batch_size, length)
            scores[rows] = model(chunk_features, chunk_mask, sequential=sequential).float().cpu()
    model.train(was_training)
    return scores.numpy()  # (b,)


def save_student(model: Student, path: str | Path) -> None:
    """One file with the config (a plain dict) and the weights, so the file alone rebuilds the model."""
    torch.save(
        {"format": _FILE_FORMAT, "config": asdict(model.config), "state_dict": model.state_dict()},
        Path(path),
    )


def load_student(path: str | Path) -> Student:
    """Rebuild a Student from `save_student`'s file (weights_only: no code runs from the file)."""
    blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    if blob.get("format") != _FILE_FORMAT:
        raise ValueError(f"{path}: not a {_FILE_FORMAT} file (format={blob.get('format')!r})")
    model = Student(StudentConfig(**blob["config"]))
    model.load_state_dict(blob["state_dict"])
    model.eval()
    return model
