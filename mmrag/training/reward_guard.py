"""RewardGuard: stop a run whose reward service is broken, instead of training on garbage.

It watches the last `reward.guard_window` rewards the score stage was asked for: when fewer than
`reward.min_answered` of them came back finite (the rest failed with their call or are NaN/inf), or when rewards
that varied earlier in the run are all the same over the whole window (a scorer answering a constant), it raises
`RewardServiceFailed`, whose message is the one line that names the reward pool and the figure. A run whose rewards
never varied (every answer wrong at the start) is not stopped for it: that is a hard task, not a broken service.
"""

from __future__ import annotations

import math
from collections import deque

from mmrag.config import RewardConfig

REWARD_POOL = "score"
"""The stage (and, distributed, the actor pool) that computes rewards."""


class RewardServiceFailed(RuntimeError):
    """The reward service failed or stopped varying past `reward.min_answered` / `reward.guard_window`."""


class RewardGuard:
    def __init__(self, cfg: RewardConfig):
        if not 0.0 <= cfg.min_answered <= 1.0:
            raise ValueError(f"reward.min_answered: expected a share in [0, 1], got {cfg.min_answered}")
        if cfg.guard_window < 0:
            raise ValueError(f"reward.guard_window: expected >= 0 (0: off), got {cfg.guard_window}")
        self.window, self.min_answered = cfg.guard_window, cfg.min_answered
        self.recent: deque[float] = deque(maxlen=max(cfg.guard_window, 1))
        """The latest rewards, NaN for each one whose call failed."""
        self.varied = False
        """Whether two different finite rewards were seen in the run."""
        self.first: float | None = None

    def scored(self, rewards: list[float]) -> None:
        """Rewards came back (some may be non-finite)."""
        for reward in rewards:
            reward = float(reward)
            if math.isfinite(reward):
                self.first = reward if self.first is None else self.first
                self.varied = self.varied or reward != self.first
            self.recent.append(reward)
        self._check()

    def failed(self, count: int) -> None:
        """A score call asking for `count` rewards failed for good."""
        self.recent.extend([math.nan] * count)
        self._check()

    def _check(self) -> None:
        if not self.window or len(self.recent) < self.window:
            return
        finite = [r for r in self.recent if math.isfinite(r)]
        answered = len(finite) / len(self.recent)
        if answered < self.min_answered:
            raise RewardServiceFailed(
                f"reward pool '{REWARD_POOL}': only {answered:.1%} of the last {self.window} rewards were answered "
                f"and finite (reward.min_answered {self.min_answered:.0%}); stopping rather than training on them")
        if self.varied and finite and min(finite) == max(finite):
            raise RewardServiceFailed(
                f"reward pool '{REWARD_POOL}': the last {self.window} rewards are all {finite[0]:g} after varying "
                f"earlier in the run (reward.guard_window); stopping rather than training on a constant")
