"""The reward-service guard: a reward service that fails, answers NaN, or answers a constant stops the run in one
line naming the reward pool and the figure (`mmrag.training.reward_guard`)."""

from __future__ import annotations

import math

import pytest

from mmrag.config import RewardConfig
from mmrag.training.reward_guard import RewardGuard, RewardServiceFailed


def _guard(window: int = 10, min_answered: float = 0.95) -> RewardGuard:
    return RewardGuard(RewardConfig(guard_window=window, min_answered=min_answered))


def test_failed_calls_past_the_share_stop_the_run_naming_the_pool_and_the_share():
    guard = _guard(window=20)
    guard.scored([0.0, 1.0] * 9)
    with pytest.raises(RewardServiceFailed, match=r"^reward pool 'score': only 90\.0% of the last 20 rewards were "
                                                  r"answered and finite \(reward\.min_answered 95%\)"):
        guard.failed(2)


def test_one_failure_in_a_full_window_is_within_the_default_share():
    guard = _guard(window=20)
    guard.scored([0.0, 1.0] * 9 + [1.0])
    guard.failed(1)
    guard.scored([0.5])


def test_non_finite_rewards_count_as_unanswered():
    guard = _guard(window=4, min_answered=0.5)
    guard.scored([1.0, math.nan])
    with pytest.raises(RewardServiceFailed, match=r"only 25\.0% of the last 4"):
        guard.scored([math.inf, -math.inf])


def test_rewards_that_stop_varying_for_a_window_stop_the_run():
    guard = _guard(window=5)
    guard.scored([0.0, 1.0, 0.0])
    guard.scored([0.3] * 4)
    with pytest.raises(RewardServiceFailed, match=r"^reward pool 'score': the last 5 rewards are all 0\.3 after "
                                                  r"varying earlier in the run \(reward\.guard_window\)"):
        guard.scored([0.3])


def test_rewards_that_never_varied_do_not_stop_the_run():
    """Every answer wrong at the start is a hard task, not a broken service."""
    guard = _guard(window=5)
    guard.scored([0.0] * 50)


def test_a_zero_window_turns_the_guard_off():
    _guard(window=0).failed(100)


def test_a_share_outside_0_to_1_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"reward\.min_answered: expected a share in \[0, 1\], got 95"):
        _guard(min_answered=95)
