"""The zoo reader's behaviour table: accuracy on held-out cases under controlled evidence.

Each condition fixes one thing about what the `hf` generator is handed (how many distractors,
where the gold passage sits, whether a superseded statement comes before or after it, a fact or look
that needs two passages, no evidence at all) and draws cases of a held-out world v3. Accuracy is exact match against the entity's true answer;
`misled` is the share of answers that are the superseded statement's value. The zoo build records a
small table in zoo.json; `benchmarks/generator_behaviour.py` measures the full one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from mmrag.data.dataset import ONE_FACT, TWO_FACT, VISUAL, Question
from mmrag.data.question_kinds import demand_of
from mmrag.metrics.answers import exact_match
from mmrag.zoo.reader_cases import ReaderCase, ReaderWorld, build_case, misleading_passages

GOLD_POSITIONS = (0, 1, 2, 3, 4)
DISTRACTOR_COUNTS = (0, 1, 2, 4, 6)
DIRECT_FACT = "direct fact"
LINKED_FACT = "linked fact"
HIDDEN_LOOK = "hidden look"
VISUAL_LOOK = "visual"
MISLEADABLE_FACT = "fact with a superseded statement"


def _is(question: Question, world: ReaderWorld, sort: str) -> bool:
    fact = demand_of(question.question).attribute is None
    return {
        DIRECT_FACT: fact and question.kind == ONE_FACT,
        LINKED_FACT: fact and question.kind == TWO_FACT,
        HIDDEN_LOOK: not fact and question.kind == ONE_FACT,
        VISUAL_LOOK: question.kind == VISUAL,
        MISLEADABLE_FACT: fact and question.kind == ONE_FACT and bool(misleading_passages(world, question)),
    }[sort]


@dataclass(frozen=True)
class Condition:
    name: str
    group: str
    sort: str
    """Which questions it asks (DIRECT_FACT, ...)."""
    options: dict

    def make(self, world: ReaderWorld, rng: random.Random) -> ReaderCase:
        questions = [q for q in world.questions if _is(q, world, self.sort)]
        return build_case(world, rng.choice(questions), rng, **self.options)


CONDITIONS: tuple[Condition, ...] = (
    *(Condition(f"direct fact, gold + {n} distractors", "distractors", DIRECT_FACT, dict(distractors=n))
      for n in DISTRACTOR_COUNTS),
    *(Condition(f"direct fact, gold at position {p + 1} of 5", "gold position", DIRECT_FACT,
                dict(distractors=4, gold_position=p)) for p in GOLD_POSITIONS),
    Condition("superseded statement just before gold", "misleading", MISLEADABLE_FACT,
              dict(distractors=2, misleading=True, misleading_first=True)),
    Condition("superseded statement just after gold", "misleading", MISLEADABLE_FACT,
              dict(distractors=2, misleading=True, misleading_first=False)),
    Condition("superseded statement, no gold", "misleading", MISLEADABLE_FACT,
              dict(distractors=2, gold=False, misleading=True)),
    Condition("linked fact, link + anchor + 2 distractors", "two passages", LINKED_FACT, dict(distractors=2)),
    Condition("hidden look, describing passage + 2 distractors", "two passages", HIDDEN_LOOK, dict(distractors=2)),
    Condition("direct fact, 3 distractors, no gold", "no gold", DIRECT_FACT, dict(distractors=3, gold=False)),
    Condition("direct fact, no evidence", "no evidence", DIRECT_FACT, dict(distractors=0, gold=False)),
    Condition("hidden look, no evidence", "no evidence", HIDDEN_LOOK, dict(distractors=0, gold=False)),
    Condition("visual, no evidence", "no evidence", VISUAL_LOOK, dict(distractors=0)),
    Condition("visual, 3 distractors", "no gold", VISUAL_LOOK, dict(distractors=3)),
)
SUMMARY_CONDITIONS = ("direct fact, gold + 0 distractors", "direct fact, gold + 4 distractors",
                      "superseded statement just before gold", "linked fact, link + anchor + 2 distractors",
                      "visual, no evidence", "direct fact, no evidence")
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
        misleading = [(a, c.misleading_value) for a, c in zip(answers, cases) if c.misleading_value]
        if misleading:
            row["misled"] = round(sum(exact_match(a, [m]) for a, m in misleading) / len(misleading), 3)
        row["examples"] = [{"question": c.question.question, "truth": c.truth, "answer": a} for a, c in zip(answers[:2], cases)]
        rows.append(row)
    return rows


def summary_conditions() -> tuple[Condition, ...]:
    return tuple(c for c in CONDITIONS if c.name in SUMMARY_CONDITIONS)
