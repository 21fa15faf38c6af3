"""`zoo:tiny-lvlm-reader`: the `hf` generator's frozen LVLM, a tiny Qwen2-VL fitted to answer from a picture
and the passages it is given.

Warm-started from `zoo:tiny-lvlm-captioner-v2`, whose vision tower already reads colour, texture and
background (kept frozen), and fitted by teacher forcing on the answer tokens (and end of turn) in the
generator's own chat format: `mmrag.models.lvlm_generator.generator_prompt`, evidence numbered and cut at
`generator.max_evidence_tokens`, exactly as the pipeline prompts it. The cases (`mmrag.zoo.reader_cases`)
come from a world v3 of its own (seed + 5000; entities of no dataset split), its questions (10 an entity,
each with its own view of the picture) and its KB's passages; the held-out behaviour table from another
(seed + 5500).

At this size and budget the reader answers in the asked form (a number for a year or a height, a name for an
architect or a city) and reads some pictures, but copies no value from its passages: zoo.json's
`heldout_behaviour` and benchmarks/generator_behaviour.py measure it. Copying is what the fit has not reached.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from mmrag.config import GeneratorConfig
from mmrag.model_refs import resolve
from mmrag.models.lvlm import generate_token_ids, decode_response, load_lvlm, response_token_ids, sequence_logprobs
from mmrag.models.lvlm_generator import bounded_evidence, generator_prompt
from mmrag.zoo.fitting import fit_report, run_fit
from mmrag.zoo.reader_behaviour import behaviour_table, summary_conditions
from mmrag.zoo.reader_cases import ReaderCase, ReaderWorld, drill_case, reader_world, sample_case

FIT_ENTITIES = 120
HELDOUT_ENTITIES = 60
WORLD_SEED_OFFSET = 5000
HELDOUT_SEED_OFFSET = 5500
STEPS = 1000
BATCH_SIZE = 8
LEARNING_RATE = 3e-3
DRILL_SHARE = 0.5
"""Share of the steps, first, on reading drills (`drill_case`: a direct fact beside its gold passage, a visual
question), the strongest signal for learning to copy a value."""
HELDOUT_CASES_PER_CONDITION = 40


def fitting_pair(cfg: GeneratorConfig, tokenizer, case: ReaderCase) -> tuple[str, str | None]:
    """(prompt, target): the generator's prompt for the case and the answer its visible passages state (None for a
    hidden look nothing visible states: what the picture shows instead is not recorded)."""
    visible = len(bounded_evidence(tokenizer, case.documents, cfg.max_evidence_tokens))
    return generator_prompt(cfg, tokenizer, case.question.question, case.documents), case.stated_answer(visible)


def fitting_batch(cfg: GeneratorConfig, tokenizer, world: ReaderWorld, size: int, rng: random.Random,
                  draw=sample_case) -> tuple[list[ReaderCase], list[str], list[str]]:
    """`size` (case, prompt, target) drawn with `draw`, leaving out cases without a target."""
    cases, prompts, targets = [], [], []
    while len(cases) < size:
        case = draw(world, rng)
        prompt, target = fitting_pair(cfg, tokenizer, case)
        if target is not None:
            cases.append(case)
            prompts.append(prompt)
            targets.append(target)
    return cases, prompts, targets


def fit(model, processor, cfg: GeneratorConfig, world, steps: int, seed: int, batch_size: int = BATCH_SIZE,
        learning_rate: float = LEARNING_RATE) -> list[float]:
    """Teacher forcing, vision tower frozen: mean negative log-likelihood of each answer's tokens and end of turn;
    the first `DRILL_SHARE` of the steps on reading drills (`drill_case`), the rest on the full mix."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model.model.visual.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate, total_steps=steps, pct_start=0.1)

    drill_steps = round(DRILL_SHARE * steps)
    step = iter(range(steps))

    def batch_loss() -> torch.Tensor:
        draw = drill_case if next(step) < drill_steps else sample_case
        cases, prompts, targets = fitting_batch(cfg, processor.tokenizer, world, batch_size, rng, draw)
        token_count = sum(len(response_token_ids(processor, t)) for t in targets)
        logprobs = sequence_logprobs(model, processor, [c.image for c in cases], prompts, targets)
        return -logprobs.sum() / token_count

    losses = run_fit(model, optimizer, schedule, steps, "tiny-lvlm-reader", batch_loss)
    model.requires_grad_(True)
    return losses


def greedy_answers(model, processor, cfg: GeneratorConfig, cases: list[ReaderCase], batch_size: int = 16) -> list[str]:
    """What the generator answers each case (greedy, its prompt and evidence bound)."""
    answers: list[str] = []
    for start in range(0, len(cases), batch_size):
        chunk = cases[start:start + batch_size]
        generated = generate_token_ids(model, processor, [c.image for c in chunk],
                                       [generator_prompt(cfg, processor.tokenizer, c.question.question, c.documents)
                                        for c in chunk], max_new_tokens=cfg.max_new_tokens, do_sample=False)
        answers += [decode_response(processor, ids) for ids in generated.token_ids]
    return answers


def build_tiny_lvlm_reader(out_dir: Path, cache_dir: str, seed: int, steps: int = STEPS) -> dict:
    """Fit from `zoo:tiny-lvlm-captioner-v2`, save model + processor, return fit and held-out behaviour figures."""
    model, processor = load_lvlm(resolve("zoo:tiny-lvlm-captioner-v2", cache_dir, seed), cache_dir)
    cfg = GeneratorConfig(backend="hf")
    started = time.perf_counter()
    world = reader_world(FIT_ENTITIES, seed + WORLD_SEED_OFFSET)
    losses = fit(model, processor, cfg, world, steps, seed)
    report = fit_report(losses, steps, started, FIT_ENTITIES, HELDOUT_ENTITIES)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    heldout = reader_world(HELDOUT_ENTITIES, seed + HELDOUT_SEED_OFFSET)
    table = behaviour_table(lambda cases: greedy_answers(model, processor, cfg, cases), heldout,
                            HELDOUT_CASES_PER_CONDITION, seed, summary_conditions())
    return {
        "heldout_behaviour": {row["condition"]: {k: row[k] for k in ("accuracy", "misled", "cases") if k in row}
                              for row in table},
        "max_evidence_tokens": cfg.max_evidence_tokens,
        "warm_start": "zoo:tiny-lvlm-captioner-v2",
        "batch_size": BATCH_SIZE,
        **report,
    }
