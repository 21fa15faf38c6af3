"""Generator behaviour: what the `hf` generator (`zoo:tiny-lvlm-reader`) answers under controlled evidence, and how
the `hf_classifier` reward (`zoo:reward-classifier`) departs from exact match.

The reader is run through `build_generator` exactly as a training job runs it (`generator.backend: hf`, its
prompt, its evidence bound) on cases of a world v3 neither model was fitted on (`mmrag.zoo.reader_behaviour`):
accuracy (exact match against the entity's true answer) against the number of distractors, the gold passage's
position, a misleading passage before or after the gold one or alone, and no evidence. The reward model scores
the reader's own answers to a mixed sample of cases and labelled paraphrases and wrong answers of a held-out
world; its agreement with exact match is reported on both. Results: benchmarks/results/generator_behaviour.json,
a section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import random
from pathlib import Path

import numpy as np
import torch

from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.config import GeneratorConfig, RewardConfig
from mmrag.metrics.answers import exact_match
from mmrag.models.generator import build_generator
from mmrag.models.reward import build_reward
from mmrag.zoo.fit_reward_classifier import HELDOUT_ENTITIES, agreement_figures, judged_examples
from mmrag.zoo.reader_behaviour import behaviour_table
from mmrag.zoo.reader_cases import reader_world, sample_case

RESULTS_JSON = Path(__file__).with_name("results") / "generator_behaviour.json"
WORLD_SEED = 9100
"""The held-out world's seed: neither model's fitting world nor its build's held-out one."""
REWARD_SEED = 9200
HELD_OUT_ENTITIES = 40


def measure(cache_dir: str, cases_per_condition: int, mixed_cases: int, seed: int) -> dict:
    generator_cfg = GeneratorConfig(backend="hf", model="zoo:tiny-lvlm-reader")
    generator = build_generator(generator_cfg, cache_dir)
    reward = build_reward(RewardConfig(backend="hf_classifier", model="zoo:reward-classifier"), cache_dir)
    world = reader_world(HELD_OUT_ENTITIES, WORLD_SEED + seed)

    def answer(cases):
        return generator.answer([c.image for c in cases], [c.question.question for c in cases],
                                [c.documents for c in cases])

    table = behaviour_table(answer, world, cases_per_condition, seed)
    rng = random.Random(seed)
    mixed = [sample_case(world, rng) for _ in range(mixed_cases)]
    answers = answer(mixed)
    scores = reward.score([c.question.question for c in mixed], answers, [[c.truth] for c in mixed])
    exact = [exact_match(a, [c.truth]) for a, c in zip(answers, mixed)]
    accepted = [s >= 0.5 for s in scores]
    judged = judged_examples(HELDOUT_ENTITIES, REWARD_SEED + seed, 1000)
    judged_scores = reward.score([j.question for j in judged], [j.candidate for j in judged],
                                 [[j.reference] for j in judged])
    return {
        "date": datetime.date.today().isoformat(), "machine": machine(), "seed": seed,
        "max_evidence_tokens": generator_cfg.max_evidence_tokens,
        "behaviour": table,
        "reward_on_reader_answers": {
            "cases": len(mixed),
            "exact_match": round(float(np.mean(exact)), 3),
            "reward_mean": round(float(np.mean(scores)), 3),
            "reward_accepts": round(float(np.mean(accepted)), 3),
            "disagreement": round(float(np.mean([a != bool(e) for a, e in zip(accepted, exact)])), 3),
        },
        "reward_on_labelled_candidates": agreement_figures(judged_scores, judged),
    }


def report(figures: dict) -> str:
    rows = [[row["group"], row["condition"], str(row["cases"]), f"{row['accuracy']:.2f}",
             f"{row['misled']:.2f}" if "misled" in row else "-"] for row in figures["behaviour"]]
    on_answers = figures["reward_on_reader_answers"]
    labelled = figures["reward_on_labelled_candidates"]
    reward_rows = [
        ["reader's answers to mixed cases", str(on_answers["cases"]), f"{on_answers['exact_match']:.3f}",
         f"{on_answers['reward_mean']:.3f}", f"{on_answers['disagreement']:.3f}", "-", "-"],
        ["labelled candidates", str(labelled["heldout_examples"]), "-", "-",
         f"{labelled['exact_match_disagreement']:.3f}", f"{labelled['false_accept_rate']:.3f}",
         f"{labelled['false_reject_rate']:.3f}"],
    ]
    return "\n\n".join([
        f"## Generator behaviour: the zoo reader and the reward classifier ({figures['date']})",
        f"Machine: {figures['machine']}. `python -m benchmarks.generator_behaviour`: `generator.backend: hf` with "
        f"`zoo:tiny-lvlm-reader` (evidence bound {figures['max_evidence_tokens']} tokens) on held-out cases of a world "
        "neither model was fitted on; accuracy is exact match against the true answer, `misled` the share of "
        "answers that are the superseded statement's value.",
        markdown_table(["group", "condition", "cases", "accuracy", "misled"], rows),
        "`reward.backend: hf_classifier` with `zoo:reward-classifier`: its accept decision (score >= 0.5) against "
        "exact match; on the labelled candidates also its errors against the labels (paraphrases count as right; "
        f"paraphrases accepted {labelled['paraphrase_accept_rate']:.3f}).",
        markdown_table(["scored", "n", "exact match", "reward mean", "disagreement", "false accept", "false reject"],
                       reward_rows),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default="~/.cache/mmrag/zoo", help="zoo cache (models built there if missing)")
    parser.add_argument("--cases", type=int, default=40, help="held-out cases per condition")
    parser.add_argument("--mixed-cases", type=int, default=160, help="fitting-mix cases the reward model scores")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    torch.set_num_threads(1)
    figures = measure(str(Path(args.cache_dir).expanduser()), args.cases, args.mixed_cases, args.seed)
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
