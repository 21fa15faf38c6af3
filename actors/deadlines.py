"""RecentAnswers: a call's deadline from how long recent calls of its kind took.

`factor` times the median of the latest answers, within [`floor_s`, `ceiling_s`]; `ceiling_s` while there is none
(or `factor` is 0). The median, not the slowest: one slow answer (a loaded moment) would hold the deadline up for
the next many calls. The stage pools (`mmrag.actors.pool`) and the learner group (`mmrag.actors.learner`) set their
deadlines with it, so a hung replica or rank is found within a few multiples of what a call usually takes.
"""

from __future__ import annotations

import statistics
from collections import deque

RECENT_ANSWERS = 32
"""Answer times kept: the deadline follows a slowdown within about half as many calls."""


class RecentAnswers:
    def __init__(self, ceiling_s: float, factor: float = 0.0, floor_s: float = 0.0, keep: int = RECENT_ANSWERS):
        self.ceiling_s, self.factor, self.floor_s = ceiling_s, factor, floor_s
        self.seconds: deque[float] = deque(maxlen=keep)

    def add(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def __bool__(self) -> bool:
        return bool(self.seconds)

    def median(self) -> float:
        return statistics.median(self.seconds)

    def deadline(self) -> float:
        """Seconds the next call may take before it counts as hung."""
        if not (self.factor and self.seconds):
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.factor * self.median()))
