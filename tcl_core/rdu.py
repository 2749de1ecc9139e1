"""The RDU sampler: which candidate programs are worth measuring.

Measuring is what tuning and data collection spend their time on, so TCL measures only the most
informative share of the candidates, scored jointly on three terms (each scaled to [0, 1] over
the pool, summed with `RDUWeights`):

* Representativeness: the candidate sits in a dense region of the student's embedding space
  (Gaussian kernel density over the pool, bandwidth = median pairwise distance), so what is
  learned from it holds for many others.
* Diversity: it is far from everything already picked or measured (distance to the nearest,
  updated after every pick, as in greedy k-center coverage), so picks do not pile up in one
  dense region.
* Uncertainty: Monte Carlo dropout passes of the student's head disagree on it (their standard
  deviation), so its measurement corrects the student where it is unsure.

Picks are greedy: at each step the unpicked candidate with the highest sum. Embeddings come
from a student (`Student.encode`); without one (a first platform) the raw features pooled over
the sequence stand in, and uncertainty is 0. `select_subset` applies the sampler task by task,
the unit the ranking loss learns from.

Shape letters: n candidates in the pool, m already measured, d embedding width.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from tcl_core.features import pad_batch
from tcl_core.records import TaskRecords
from tcl_core.student import Student, normalise_labels

__all__ = ["RDUWeights", "rdu_select", "embed_candidates", "subset_size", "select_subset"]


@dataclass(frozen=True)
class RDUWeights:
    """How much each term counts in a pick (0 turns a term off)."""

    representativeness: float = 1.0
    diversity: float = 1.0
    uncertainty: float = 1.0


def _unit_range(values: np.ndarray) -> np.ndarray:
    """Min-max scale to [0, 1]; a constant array becomes zeros (the term then decides nothing)."""
    spread = values.max() - values.min() if values.size else 0.0
    return (values - values.min()) / spread if spread > 0 else np.zeros_like(values)


def rdu_select(
    embeddings: np.ndarray, uncertainty: np.ndarray, k: int, *,
    measured: np.ndarray | None = None, weights: RDUWeights = RDUWeights(),
) -> np.ndarray:
    """Indices of k candidates of the pool, in pick order.

    embeddings: (n, d); uncertainty: (n,) (higher = less sure); measured: (m, d) embeddings of
    candidates already measured, which picks should stay away from (the diversity term).
    """
    n = embeddings.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    pool = torch.as_tensor(embeddings, dtype=torch.float64)  # (n, d)
    known = torch.as_tensor(measured, dtype=torch.float64) if measured is not None and len(measured) else pool[:0]
    both = torch.cat([pool, known])  # (n + m, d)
    scale = both.std(dim=0).clamp(min=1e-9)  # (d,): no single wide dimension dominates the distances
    pool, known = pool / scale, known / scale
    distance = torch.cdist(pool, pool)  # (n, n)
    off_diagonal = distance[~torch.eye(n, dtype=torch.bool)]
    bandwidth = off_diagonal.median().item() if off_diagonal.numel() else 1.0
    bandwidth = bandwidth if bandwidth > 0 else 1.0
    density = torch.exp(-((distance / bandwidth) ** 2)).mean(dim=1).numpy()  # (n,)
    representativeness = _unit_range(density)
    certainty_term = _unit_range(np.asarray(uncertainty, dtype=np.float64))  # (n,)
    # distance of each pool candidate to its nearest picked-or-measured one; inf: nothing yet
    nearest = torch.cdist(pool, known).min(dim=1).values.numpy() if len(known) else np.full(n, np.inf)  # (n,)
    base = weights.representativeness * representativeness + weights.uncertainty * certainty_term  # (n,)
    picked: list[int] = []
    free = np.ones(n, dtype=bool)
    for _ in range(k):
        finite = np.isfinite(nearest)
        diversity = np.ones(n) if not finite.any() else _unit_range(np.where(finite, nearest, nearest[finite].max()))
        total = np.where(free, base + weights.diversity * diversity, -np.inf)  # (n,)
        choice = int(np.argmax(total))
        picked.append(choice)
        free[choice] = False
        nearest = np.minimum(nearest, distance[choice].numpy())
    return np.asarray(picked, dtype=np.int64)


def embed_candidates(
    sequences: list[np.ndarray], student: Student | None, *, passes: int = 16, batch_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings (n, d), uncertainty (n,)) of feature sequences (each (l_i, f)).

    With a student: its pooled representation and the std of `passes` MC-dropout scores.
    Without: each sequence's mean and max over positions (2f wide) and zero uncertainty.
    """
    if student is None:
        pooled = np.stack([np.concatenate([s.mean(axis=0), s.max(axis=0)]) if len(s) else
                           np.zeros(2 * s.shape[1], dtype=np.float32) for s in sequences])  # (n, 2f)
        return pooled.astype(np.float64), np.zeros(len(sequences))
    embeddings, spread = [], []
    was_training = student.training
    student.eval()
    with torch.inference_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the dropout masks: the same pool gets the same picks
        for start in range(0, len(sequences), batch_size):
            features, mask = pad_batch(sequences[start:start + batch_size], student.config.max_len)
            pooled = student.encode(torch.from_numpy(features), torch.from_numpy(mask), sequential=True)  # (b, d)
            embeddings.append(pooled.double().numpy())
            spread.append(student.mc_dropout_scores(pooled, passes=passes).std(dim=0).double().numpy())  # (b,)
    student.train(was_training)
    return np.concatenate(embeddings), np.concatenate(spread)


def subset_size(candidates: int, fraction: float) -> int:
    """How many of a task's candidates a `fraction` budget measures: at least 2 (a ranking needs a pair)."""
    return min(candidates, max(2, round(fraction * candidates)))


def select_subset(
    tasks: list[TaskRecords], fraction: float, *, method: str = "rdu", student: Student | None = None,
    seed: int = 0, weights: RDUWeights = RDUWeights(),
) -> list[TaskRecords]:
    """Each task cut to `subset_size` of its candidates, chosen by "rdu" or "random".

    The result is what a learner gets to see when only those were measured: labels are
    renormalised over the kept candidates (best kept = 1). Choices never look at run times.
    """
    if method not in ("rdu", "random"):
        raise ValueError(f"method must be 'rdu' or 'random', got {method!r}")
    rng = np.random.default_rng(seed)
    kept = []
    for task in tasks:
        k = subset_size(task.size, fraction)
        if method == "random":
            chosen = np.sort(rng.choice(task.size, size=k, replace=False))
        else:
            embeddings, uncertainty = embed_candidates(list(task.features), student)
            chosen = np.sort(rdu_select(embeddings, uncertainty, k, weights=weights))
        seconds = task.run_seconds[chosen]
        kept.append(dataclasses.replace(
            task, features=tuple(task.features[i] for i in chosen), run_seconds=seconds,
            labels=normalise_labels(seconds).numpy(),
        ))
    return kept
