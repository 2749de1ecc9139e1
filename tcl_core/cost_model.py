"""The thin MetaSchedule adapter: `PyCostModel` over the TCL student.

It converts and delegates: candidates -> trace feature sequences (`features.trace_features`),
runner results -> per-task labels (`student.normalise_labels`), then the student predicts or
takes a few gradient steps. `update` keeps each task's measurements of this search (labels are
only comparable within a task) and fine-tunes on them, so the search improves within a job.

Scores go back to MetaSchedule positive (`positive_scores`): its evolutionary search clips every
score below 0 to 0 and picks parents with probability proportional to the score. The student's
ranking scores carry no fixed offset (the loss sees only differences) and came out negative for
every candidate of the shipped students, so, passed raw, all tied at 0 and the search ran
unguided: the student's ranking reached only the eps-greedy share of the picks, by accident.

A search round (one task's evolutionary search, ended by an update or by the search moving to
another task) predicts its population once per generation, and much of it comes back: unmutated
survivors as the same trace object, mutations that land on an already seen program as equal
features. So within a round each trace object is featurised once (`_features`) and each distinct
feature sequence scored once (`_score`); both caches are dropped when the round ends, which keeps
them to one round's population (MetaSchedule's task scheduler searches every task once before
it joins any measurement, so updates alone would let them grow over all tasks). In a real
search (ViT block, 64 trials, population 512; research/search_round_cost.py) 36% of the
candidates handed to `predict` were a trace object already seen in the round and only 38% were
sequences not yet scored. Exact: the student reads nothing but the features.
"""

from __future__ import annotations

import copy
import hashlib
import math
from pathlib import Path

import numpy as np
import torch

from tcl_core import tvm_api
from tcl_core.features import TRACE_FEATURE_DIM, pad_batch, trace_features
from tcl_core.records import mean_seconds
from tcl_core.student import Student, StudentConfig, load_student, normalise_labels, predict, save_student, train_steps


def _run_seconds(result) -> float:
    """Mean measured seconds as the offline records compute them; inf for a failed build or run."""
    if result.error_msg is not None:
        return math.inf
    return mean_seconds([float(seconds) for seconds in result.run_secs or []])


@tvm_api.derived_object
class TclCostModel(tvm_api.ms.cost_model.PyCostModel):
    """Scores candidates with a Student; `update` fine-tunes it on the job's fresh measurements."""

    def __init__(self, student: Student | None = None, *, update_steps: int = 8, lr: float | None = None,
                 update_gain_scale: float = 1.0, update_scope: str = "job", sequential_scan: bool = True) -> None:
        super().__init__()
        self.student = student or Student(StudentConfig(feature_dim=TRACE_FEATURE_DIM))
        self.update_steps = update_steps  # gradient steps per measured batch: cheap next to measuring
        # A trained student is nudged, an untrained one has everything to learn. Adam's steps are
        # about lr per parameter whatever the gradient's size, so 1e-3 over a few hundred
        # in-search steps can walk a trained student far from what it learned offline.
        self.lr = lr if lr is not None else (1e-3 if student is None else 1e-4)
        self._optimiser: torch.optim.Optimizer | None = None  # one Adam for the whole search
        # TLP's gains (scale 1), not offline training's 4: every tuning result was measured with
        # these updates at 1, and a few labels of one search are a different regime.
        self.update_gain_scale = update_gain_scale
        # "job": one student fine-tuned on every task's measurements, a step per task group drawn
        # at random, so with n tasks measured the task just measured gets about steps/n of them.
        # "task": each task gets its own copy of the offline student, fine-tuned on that task's
        # measurements alone (labels are only comparable within a task anyway); tasks not yet
        # measured are ranked by the untouched offline student. "job" replayed better (docs/
        # cost_model.md, "Search replay"): what one task teaches carries over to the job's others.
        if update_scope not in ("job", "task"):
            raise ValueError(f"update_scope must be 'job' or 'task', got {update_scope!r}")
        self.update_scope = update_scope
        self._task_students: dict[str, tuple[Student, torch.optim.Optimizer]] = {}  # scope "task" only
        self.sequential_scan = sequential_scan  # the step-by-step scan measured faster on CPU
        self._measured: dict[str, tuple[list[np.ndarray], list[float]]] = {}  # task -> (features, seconds)
        # Per search round (see the module docstring), reset by _start_round:
        self._anchor: float | None = None  # the score mapped to 1
        self._scores: dict[bytes, float] = {}  # digest of a feature sequence -> its score
        self._traces: dict[object, tuple[int, np.ndarray]] = {}  # trace (by handle) -> (instructions, features)
        self._round_task: str | None = None  # the task whose round the caches hold

    def load(self, path: str) -> None:
        self.student = load_student(Path(path))
        self._optimiser = None
        self._task_students.clear()
        self._start_round()

    def save(self, path: str) -> None:
        save_student(self.student, Path(path))

    def update(self, context, candidates, results) -> None:
        task = str(context.task_name)
        sequences, seconds = self._measured.setdefault(task, ([], []))
        sequences.extend(self._features(candidate.sch.trace) for candidate in candidates)
        seconds.extend(_run_seconds(result) for result in results)
        tasks = [task] if self.update_scope == "task" else list(self._measured)
        groups = []
        for name in tasks:
            task_sequences, task_seconds = self._measured[name]
            if len(task_sequences) < 2:
                continue  # one candidate has no order to learn
            features, mask = pad_batch(task_sequences, self.student.config.max_len)
            labels = normalise_labels(np.asarray(task_seconds))
            groups.append((torch.from_numpy(features), torch.from_numpy(mask), torch.as_tensor(labels).float()))
        if groups:
            student, optimiser = self._learner(task)
            train_steps(student, groups, steps=self.update_steps, lr=self.lr, sequential=self.sequential_scan,
                        optimiser=optimiser, gain_scale=self.update_gain_scale)
        self._start_round()

    def _learner(self, task: str) -> tuple[Student, torch.optim.Optimizer]:
        """The student an update of `task` trains, and its Adam (kept across the search's updates)."""
        if self.update_scope == "task":
            if task not in self._task_students:
                student = copy.deepcopy(self.student)
                self._task_students[task] = (student, torch.optim.Adam(student.parameters(), lr=self.lr))
            return self._task_students[task]
        if self._optimiser is None:
            self._optimiser = torch.optim.Adam(self.student.parameters(), lr=self.lr)
        return self.student, self._optimiser

    def predict(self, context, candidates) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype="float64")
        task = str(context.task_name)
        if task != self._round_task:
            self._start_round()
            self._round_task = task
        scores = self._score([self._features(c.sch.trace) for c in candidates])  # (b,)
        # One anchor per round: a search round scores its population in several calls and keeps
        # the best across them, so the calls must share one scale.
        if self._anchor is None:
            self._anchor = float(scores.max())
        return positive_scores(scores, self._anchor)

    def _score(self, sequences: list[np.ndarray]) -> np.ndarray:
        """The student's scores (b,) for (l_i, f) sequences, running it only on those not yet scored in this round."""
        keys = [hashlib.blake2b(sequence.tobytes(), digest_size=16).digest() for sequence in sequences]
        fresh: dict[bytes, np.ndarray] = {}  # key -> sequence, each unscored one once
        for key, sequence in zip(keys, sequences):
            if key not in self._scores and key not in fresh:
                fresh[key] = sequence
        if fresh:
            if len(self._scores) + len(fresh) > _MAX_CACHED:
                self._scores.clear()  # a bound for very large populations; costs only recomputation
            student = self._task_students.get(self._round_task, (self.student,))[0]  # a task's own, once it has one
            features, mask = pad_batch(list(fresh.values()), student.config.max_len)
            scored = predict(student, features, mask, sequential=self.sequential_scan)  # (fresh,)
            self._scores.update(zip(fresh, scored.tolist()))
        return np.fromiter((self._scores[key] for key in keys), dtype=np.float32, count=len(keys))  # (b,)

    def _features(self, trace) -> np.ndarray:
        """`trace_features(trace)`, computed once per trace object in a round (the object is kept alive, so its handle is not reused)."""
        length = len(trace.insts)  # a trace only ever grows in place; a longer one is featurised anew
        cached = self._traces.get(trace)
        if cached is None or cached[0] != length:
            if len(self._traces) >= _MAX_CACHED:
                self._traces.clear()
            cached = self._traces[trace] = (length, trace_features(trace))
        return cached[1]

    def _start_round(self) -> None:
        """Forget the last round: after an update its scores and scale are stale, and a new round brings new objects."""
        self._anchor = None
        self._scores.clear()
        self._traces.clear()
        self._round_task = None


# Per cache. A round of population p holds about 5 p entries (1,280 at the daemon's 256), a feature
# sequence about 6 KB, so this caps the trace cache near 100 MB for populations past 3,000.
_MAX_CACHED = 1 << 14


def positive_scores(scores: np.ndarray, anchor: float) -> np.ndarray:
    """exp(score - anchor), float64 and > 0: the same order, and what the search needs (module docstring).

    A score one higher is e times as likely to be picked as a parent: LambdaRank's scores are
    pairwise log-odds (sigma 1), so that reads as "as likely as it is to be the faster one".
    Clipped to ±60 so nothing overflows or ties at 0 (e^-60 is still above 0).
    """
    return np.exp(np.clip(scores.astype("float64") - anchor, -60.0, 60.0))
