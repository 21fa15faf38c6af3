"""The zoo reader's behaviour table: accuracy on held-out cases under controlled evidence.

Each condition fixes one thing about what the `hf` generator is handed (how many distractors,
where the gold passage sits, whether a misleading passage comes before or after it, no evidence at
all) and draws cases of a held-out world. Accuracy is exact match against the entity's true answer;
`misled` is the share of answers that are the misleading passage's value. The zoo build records a
small table in zoo.json; `benchmarks/generator_behaviour.py` measures the full one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from mmrag.data.dataset import ONE_FACT, TWO_FACT, VISUAL
from mmrag.metrics.answers import exact_match
from mmrag.zoo.reader_cases import ReaderCase, ReaderWorld, build_case

GOLD_POSITIONS = (0, 1, 2, 3, 4)
DISTRACTOR_COUNTS = (0, 1, 2, 4, 6)


@dataclass(frozen=True)
class Condition:
    name: str
    group: str
    make: Callable[[ReaderWorld, random.Random], ReaderCase]


def _case(kind: str, **options) -> Callable[[ReaderWorld, random.Random], ReaderCase]:
    def make(world: ReaderWorld, rng: random.Random) -> ReaderCase:
        return build_case(world, rng.choice(world.entities), kind, rng, **options)
    return make


CONDITIONS: tuple[Condition, ...] = (
    *(Condition(f"one-fact, gold + {n} distractors", "distractors", _case(ONE_FACT, distractors=n))
      for n in DISTRACTOR_COUNTS),
    *(Condition(f"one-fact, gold at position {p + 1} of 5", "gold position",
                _case(ONE_FACT, distractors=4, gold_position=p)) for p in GOLD_POSITIONS),
    Condition("one-fact, misleading before gold", "misleading",
              _case(ONE_FACT, distractors=2, misleading=True, misleading_first=True)),
    Condition("one-fact, misleading after gold", "misleading",
              _case(ONE_FACT, distractors=2, misleading=True, misleading_first=False)),
    Condition("one-fact, misleading, no gold", "misleading",
              _case(ONE_FACT, distractors=2, gold=False, misleading=True)),
    Condition("one-fact, distractors only", "no gold", _case(ONE_FACT, distractors=3, gold=False)),
    Condition("one-fact, no evidence", "no evidence", _case(ONE_FACT, distractors=0, gold=False)),
    Condition("visual, no evidence", "no evidence", _case(VISUAL, distractors=0)),
    Condition("visual, 3 distractors", "visual", _case(VISUAL, distractors=3)),
    Condition("two-fact, both gold + 2 distractors", "two-fact", _case(TWO_FACT, distractors=2)),
)
SUMMARY_CONDITIONS = ("one-fact, gold + 0 distractors", "one-fact, gold + 4 distractors",
                      "one-fact, misleading before gold", "visual, no evidence", "one-fact, no evidence")
"""The rows a zoo build records (the benchmark measures every condition)."""


def behaviour_table(answer: Callable[[list[ReaderCase]], list[str]], world: ReaderWorld, cases_per_condition: int,
                    seed: int, conditions: tuple[Condition, ...] = CONDITIONS) -> list[dict]:
    """One row per condition: name, group, cases, accuracy and (where a misleading passage is given) misled."""
    rows = []
    for index, condition in enumerate(conditions):
        rng = random.Random(seed * 1000 + index)
        cases = [condition.make(world, rng) for _ in range(cases_per_condition)]
        answers = answer(cases)
        row = {"condition": condition.name, "group": condition.group, "cases": len(cases),
               "accuracy": round(sum(exact_match(a, [c.truth]) for a, c in zip(answers, cases)) / len(cases), 3)}
        misleading = [(a, c.misleading_answer()) for a, c in zip(answers, cases) if c.misleading_answer()]
        if misleading:
            row["misled"] = round(sum(exact_match(a, [m]) for a, m in misleading) / len(misleading), 3)
        row["examples"] = [{"question": c.question, "truth": c.truth, "answer": a} for a, c in zip(answers[:2], cases)]
        rows.append(row)
    return rows


def summary_conditions() -> tuple[Condition, ...]:
    return tuple(c for c in CONDITIONS if c.name in SUMMARY_CONDITIONS)
