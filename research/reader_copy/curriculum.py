"""Does a copy curriculum make the zoo reader copy values from its passages?

Not a test: `python -m research.reader_copy.curriculum NAME [--layers 4] [--repeat-steps 1000] ...` from
the repository root, with `zoo:tiny-lvlm-captioner-v2` built in --cache-dir. Fits a reader like
`mmrag.zoo.fit_reader` does (teacher forcing on the generator's own prompts, vision tower frozen), in phases, each
with its own AdamW and one-cycle schedule:

1. repeat drills (no picture): the evidence is one line of words drawn from the fitting world's passages, the question
   "Repeat passage 1.", the answer that line: every answer token is a copy, so the signal for an induction head is
   dense;
2. copy drills (`mmrag.zoo.reader_cases.copy_drill_case`): a direct fact whose gold passage states a freshly drawn
   value, so only copying fits it;
3. reading drills (`drill_case`) and 4. the full mix (`sample_case`), as the zoo fit.

`--layers N` replaces the captioner's text model by a freshly initialised one of N layers (same widths; the vision
tower is kept). After phase 1 it reports the repeat accuracy; at the end the zoo build's summary rows of the held-out
behaviour table and the copy-drill accuracy on the held-out world. Writes research/reader_copy/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from transformers import Qwen2VLForConditionalGeneration

from mmrag.config import GeneratorConfig
from mmrag.metrics.answers import exact_match
from mmrag.model_refs import resolve
from mmrag.models.lvlm import decode_response, generate_token_ids, load_lvlm, response_token_ids, sequence_logprobs
from mmrag.models.lvlm_generator import generator_prompt
from mmrag.zoo import fit_reader
from mmrag.zoo.fitting import run_fit
from mmrag.zoo.reader_behaviour import behaviour_table, summary_conditions
from mmrag.zoo.reader_cases import copy_drill_case, drill_case, reader_world, sample_case

RESULTS_DIR = Path(__file__).with_name("results")
REPEAT_QUESTION = "Repeat passage 1."
REPEAT_WORDS = (3, 10)
EVAL_CASES = 40


def fresh_text_model(model, layers: int, seed: int):
    """`model`'s config with `layers` text layers, freshly initialised, carrying `model`'s vision tower."""
    config = model.config
    config.text_config.num_hidden_layers = layers
    config.text_config.layer_types = ["full_attention"] * layers
    torch.manual_seed(seed)
    fresh = Qwen2VLForConditionalGeneration(config)
    fresh.model.visual.load_state_dict(model.model.visual.state_dict())
    fresh.generation_config = model.generation_config
    return fresh


class Curriculum:
    def __init__(self, model, processor, seed: int):
        self.model, self.processor = model, processor
        self.cfg = GeneratorConfig(backend="hf")
        self.world = reader_world(fit_reader.FIT_ENTITIES, seed + fit_reader.WORLD_SEED_OFFSET)
        self.heldout = reader_world(fit_reader.HELDOUT_ENTITIES, seed + fit_reader.HELDOUT_SEED_OFFSET)
        self.words = sorted({word.strip(".,()") for doc in self.world.docs for word in doc.text.split()} - {""})
        self.rng = random.Random(seed)

    def repeat_drills(self, size: int, rng: random.Random) -> tuple[list[str], list[str]]:
        lines = [" ".join(rng.choice(self.words) for _ in range(rng.randint(*REPEAT_WORDS))) for _ in range(size)]
        return [generator_prompt(self.cfg, self.processor.tokenizer, REPEAT_QUESTION, [line]) for line in lines], lines

    def phase(self, steps: int, batch_size: int, learning_rate: float, draw) -> dict:
        """`steps` of teacher forcing on batches of `draw` (a case sampler, or None for repeat drills)."""
        model, processor = self.model, self.processor
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate, total_steps=steps,
                                                       pct_start=0.1)

        def batch_loss() -> torch.Tensor:
            if draw is None:
                prompts, targets = self.repeat_drills(batch_size, self.rng)
                images = [None] * batch_size
            else:
                cases, prompts, targets = fit_reader.fitting_batch(self.cfg, processor.tokenizer, self.world,
                                                                   batch_size, self.rng, draw)
                images = [c.image for c in cases]
            token_count = sum(len(response_token_ids(processor, t)) for t in targets)
            return -sequence_logprobs(model, processor, images, prompts, targets).sum() / token_count

        started = time.perf_counter()
        losses = run_fit(model, optimizer, schedule, steps, "reader curriculum", batch_loss)
        return {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate,
                "seconds": round(time.perf_counter() - started, 1), "first_loss": round(losses[0], 3),
                "final_loss": round(sum(losses[-20:]) / 20, 3),
                "loss_by_100_steps": [round(sum(losses[i:i + 100]) / len(losses[i:i + 100]), 3)
                                      for i in range(0, steps, 100)]}

    def repeat_accuracy(self) -> float:
        prompts, lines = self.repeat_drills(EVAL_CASES, random.Random(1))
        generated = generate_token_ids(self.model, self.processor, [None] * len(prompts), prompts,
                                       max_new_tokens=40, do_sample=False)
        answers = [decode_response(self.processor, ids) for ids in generated.token_ids]
        return round(sum(a == line for a, line in zip(answers, lines)) / len(lines), 3)

    def heldout_rows(self, seed: int) -> dict:
        def answer(cases):
            return fit_reader.greedy_answers(self.model, self.processor, self.cfg, cases)

        rows = {row["condition"]: {k: row[k] for k in ("accuracy", "misled") if k in row}
                for row in behaviour_table(answer, self.heldout, EVAL_CASES, seed, summary_conditions())}
        rng = random.Random(7)
        drills = [copy_drill_case(self.heldout, rng) for _ in range(EVAL_CASES)]
        copied = sum(exact_match(a, [c.truth]) for a, c in zip(answer(drills), drills)) / len(drills)
        rows["copy drill, fresh value, gold + 0..2 distractors"] = {"accuracy": round(copied, 3)}
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--cache-dir", default="~/.cache/mmrag/zoo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=0, help="a fresh text model of this many layers (0: warm start)")
    parser.add_argument("--learning-rate", type=float, default=fit_reader.LEARNING_RATE)
    parser.add_argument("--repeat-steps", type=int, default=0)
    parser.add_argument("--repeat-batch", type=int, default=32)
    parser.add_argument("--copy-steps", type=int, default=0)
    parser.add_argument("--drill-steps", type=int, default=0)
    parser.add_argument("--mix-steps", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cache_dir = str(Path(args.cache_dir).expanduser())
    model, processor = load_lvlm(resolve("zoo:tiny-lvlm-captioner-v2", cache_dir, args.seed), cache_dir)
    if args.layers:
        model = fresh_text_model(model, args.layers, args.seed)
    model.model.visual.requires_grad_(False)
    curriculum = Curriculum(model, processor, args.seed)
    record = {"args": vars(args), "parameters": sum(p.numel() for p in model.parameters()), "phases": {}}
    if args.repeat_steps:
        record["phases"]["repeat"] = curriculum.phase(args.repeat_steps, args.repeat_batch, args.learning_rate, None)
        record["repeat_accuracy"] = curriculum.repeat_accuracy()
    for name, steps, draw in (("copy", args.copy_steps, copy_drill_case), ("drill", args.drill_steps, drill_case),
                              ("mix", args.mix_steps, sample_case)):
        if steps:
            record["phases"][name] = curriculum.phase(steps, fit_reader.BATCH_SIZE, args.learning_rate, draw)
    record["heldout"] = curriculum.heldout_rows(args.seed)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
