"""RDU inside tuning: part of each measured batch goes to informative candidates, not only the best-predicted.

MetaSchedule's evolutionary search measures the candidates its cost model ranks highest. Early
in a search, and on a platform the student has not seen, those are where the student is
confidently wrong as often as right, and they tend to be near-copies of each other. `RDUSearch`
wraps the evolutionary search: it asks it for `pool_factor` times the batch, measures the
best-predicted `1 - fraction` of the batch as before, and fills the rest with `rdu_select` over
the remaining proposals: representative, far from what this task has already measured or is
about to measure, and where the student's MC-dropout passes disagree (tcl_core.rdu). Those
measurements are what `TclCostModel.update` learns the most from.

The wrapped search marks every proposal as measured (TVM's PickWithEpsGreedy does so when it
hands them out), so the proposals left unpicked are not proposed again for this task; its
evolution keeps finding their neighbours. Its trial count follows what is actually measured
(`notify_runner_results`), so the task's budget is spent exactly.
"""

from __future__ import annotations

import numpy as np

from tcl_core import tvm_api
from tcl_core.cost_model import TclCostModel
from tcl_core.features import pad_batch, trace_features
from tcl_core.rdu import RDUWeights, embed_candidates, rdu_select
from tcl_core.student import predict

__all__ = ["RDUSearch", "choose_batch"]


def choose_batch(
    scores: np.ndarray, embeddings: np.ndarray, uncertainty: np.ndarray, k: int, fraction: float, *,
    measured: np.ndarray | None = None, weights: RDUWeights = RDUWeights(),
) -> np.ndarray:
    """Indices of the k proposals to measure: the best-scored k - round(fraction k), then RDU picks.

    scores, uncertainty: (n,); embeddings: (n, d); measured: (m, d) embeddings of candidates this
    task measured before. The RDU picks stay away from those and from this batch's best picks.
    """
    k = min(k, len(scores))
    n_rdu = min(round(fraction * k), k)
    order = np.argsort(-np.asarray(scores), kind="stable")  # (n,): best predicted first
    best, rest = order[: k - n_rdu], order[k - n_rdu:]
    if n_rdu == 0 or len(rest) == 0:
        return best
    known = [embeddings[best]] + ([measured] if measured is not None and len(measured) else [])
    picks = rdu_select(embeddings[rest], uncertainty[rest], n_rdu, measured=np.concatenate(known), weights=weights)
    return np.concatenate([best, rest[picks]])


@tvm_api.derived_object
class RDUSearch(tvm_api.ms.search_strategy.PySearchStrategy):
    """A MetaSchedule search strategy: the wrapped one's proposals, chosen from with `choose_batch`."""

    def __init__(self, inner, cost_model: TclCostModel, *, fraction: float = 0.25, pool_factor: int = 2,
                 weights: RDUWeights = RDUWeights()) -> None:
        super().__init__()
        if not 0.0 <= fraction <= 1.0 or pool_factor < 1:
            raise ValueError(f"need 0 <= fraction <= 1 and pool_factor >= 1, got {fraction}, {pool_factor}")
        self.inner = inner  # a tvm SearchStrategy, usually EvolutionarySearch
        self.cost_model = cost_model  # the same object the task scheduler updates: its student is current
        self.fraction, self.pool_factor, self.weights = fraction, pool_factor, weights
        self.batch = 0
        self._measured: list[np.ndarray] = []  # feature sequences (l_i, f) this task has measured

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.batch = num_trials_per_iter
        self._measured = []
        self.inner.pre_tuning(max_trials, num_trials_per_iter * self.pool_factor, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        proposals = self.inner.generate_measure_candidates()
        if proposals is None:
            return None
        proposals = list(proposals)
        if len(proposals) <= self.batch or self.fraction == 0.0:
            return proposals[: self.batch]
        student = self.cost_model.student
        sequences = [trace_features(candidate.sch.trace) for candidate in proposals]
        features, mask = pad_batch(sequences, student.config.max_len)
        scores = predict(student, features, mask, sequential=True)  # (n,)
        embeddings, uncertainty = embed_candidates(sequences, student)  # (n, d), (n,)
        measured = embed_candidates(self._measured, student)[0] if self._measured else None  # (m, d)
        chosen = choose_batch(scores, embeddings, uncertainty, self.batch, self.fraction,
                              measured=measured, weights=self.weights)
        return [proposals[i] for i in chosen]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self._measured.extend(trace_features(candidate.sch.trace) for candidate in measure_candidates)
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return RDUSearch(self.inner.clone(), self.cost_model, fraction=self.fraction,
                         pool_factor=self.pool_factor, weights=self.weights)
