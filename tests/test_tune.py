"""deploy.tune's budget check: when the trials cannot give every task to tune one round."""

from __future__ import annotations

from deploy.tune import budget_shortfall


def test_a_budget_of_one_round_per_task_or_more_is_enough():
    assert budget_shortfall(16, 256, 16) is None
    assert budget_shortfall(16, 300, 16) is None
    assert budget_shortfall(0, 8, 16) is None  # every task reused from the database


def test_untuned_builds_are_asked_for_and_not_warned_about():
    assert budget_shortfall(16, 0, 16) is None


def test_a_short_budget_says_how_many_tasks_it_may_miss_and_what_reaches_them_all():
    assert budget_shortfall(16, 64, 16) == (
        "trials 64 cannot give each of the 16 tasks to tune a round of 16: up to 12 may keep untuned "
        "default schedules; trials >= 256 reaches every task")
    # a partial last round still reaches its task
    assert budget_shortfall(5, 9, 4).startswith("trials 9 cannot give each of the 5 tasks to tune a round of 4: up to 2 ")
