"""Tiny zoo models (tcl_core.zoo.ZooModel) for tests that collect or tune real candidates."""

from __future__ import annotations

from torch import nn

from tcl_core.zoo import ZooModel

# Two dense layers: two or more tasks, so a round has tasks to rank and to validate on.
TWO_TASKS = ZooModel("two", lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)), (2, 16), "train")
