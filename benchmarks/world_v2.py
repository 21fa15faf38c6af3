"""World v2 at the default size, before any training: what the data holds and what the untrained zoo gets.

Prints and records (benchmarks/results/world_v2.json, a section of RESULTS.md):
* questions and entities per split and kind;
* the untrained zoo's held-out figures (captioner-v2, tiny-clip-v2, visual-reader, from their zoo.json);
* retrieval recall@k on a split with caption + question queries (the untrained translator's greedy
  caption, then the question lower-cased), every gold passage within the top k (visual questions
  have none and are left out);
* the grounded generator's rule reward per kind for never-retrieve, always-retrieve-top-2 (in
  retrieval order) and the oracle (exactly the gold passages; none for a visual question).

    python -m benchmarks.world_v2 --data DIR [--zoo DIR] [--split test]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.config import Config, GeneratorConfig, TranslatorConfig
from mmrag.data.dataset import KINDS, SPLITS, VISUAL, load_kb, load_questions
from mmrag.data.synth import generate_dataset
from mmrag.model_refs import ensure_built, resolve
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.models.generator import build_generator
from mmrag.models.lvlm import fill_prompt, generate, load_lvlm
from mmrag.models.reward import RuleReward

RESULTS_JSON = Path(__file__).with_name("results") / "world_v2.json"
RECALL_AT = (1, 2, 5, 10)
ZOO_FIGURES = ("tiny-lvlm-captioner-v2", "tiny-clip-v2", "visual-reader")


def counts_by_kind(data_dir: Path) -> dict:
    table = {}
    for split in SPLITS:
        questions = load_questions(data_dir, split)
        row = {"questions": len(questions), "entities": len({q.entity_id for q in questions})}
        row.update({kind: sum(q.kind == kind for q in questions) for kind in KINDS})
        table[split] = row
    return table


def greedy_captions(model_ref: str, zoo: str, questions) -> list[str]:
    """The untrained translator's greedy query for each question (its prompt, its image)."""
    model, processor = load_lvlm(resolve(model_ref, zoo), zoo)
    template = TranslatorConfig().prompt_template
    captions: list[str] = []
    for start in range(0, len(questions), 32):
        chunk = questions[start:start + 32]
        prompts = [fill_prompt(template, "translator.prompt_template", question=q.question) for q in chunk]
        captions += generate(model, processor, [q.image for q in chunk], prompts, max_new_tokens=24,
                             do_sample=False)[0]
    return captions


def rewards_by_kind(questions, answers: list[str], scorer: RuleReward) -> dict[str, float]:
    scores = scorer.score([q.question for q in questions], answers, [q.answers for q in questions])
    by_kind = defaultdict(list)
    for question, score in zip(questions, scores):
        by_kind[question.kind].append(score)
    return {"all": round(float(np.mean(scores)), 3),
            **{kind: round(float(np.mean(by_kind[kind])), 3) for kind in KINDS if by_kind[kind]}}


def measure(data_dir: Path, zoo: str, split: str) -> dict:
    cfg = Config()
    figures = {name: ensure_built(name, zoo).manifest["figures"] for name in ZOO_FIGURES}
    kb = load_kb(data_dir)
    questions = load_questions(data_dir, split)
    encoder = ClipEncoder(cfg.encoder.model_name, cfg.encoder.pretrained, zoo)
    doc_vectors = encoder.encode_documents([d.text for d in kb], [d.image for d in kb], cfg.index.fusion)
    captions = greedy_captions(cfg.translator.model, zoo, questions)
    queries = [f"{caption} {q.question.lower().rstrip('?.')}" for caption, q in zip(captions, questions)]
    ranked = np.argsort(-(encoder.encode_texts(queries) @ doc_vectors.T), axis=1)[:, :max(RECALL_AT)]
    doc_ids = np.array([d.doc_id for d in kb])
    recall = defaultdict(dict)
    for k in RECALL_AT:
        hits = [(q.kind, set(q.gold_doc_ids) <= set(doc_ids[row[:k]])) for q, row in zip(questions, ranked)
                if q.gold_doc_ids]
        recall["all"][k] = round(float(np.mean([hit for _, hit in hits])), 3)
        for kind in KINDS:
            if kind != VISUAL:
                recall[kind][k] = round(float(np.mean([hit for kd, hit in hits if kd == kind])), 3)
    text_of = {d.doc_id: d.text for d in kb}
    generator = build_generator(GeneratorConfig(), zoo)
    scorer = RuleReward("exact_match")
    images = [q.image for q in questions]
    selections = {
        "never-retrieve": [[] for _ in questions],
        "always-retrieve-top-2": [[text_of[i] for i in doc_ids[row[:2]]] for row in ranked],
        "oracle": [[text_of[i] for i in q.gold_doc_ids] for q in questions],
    }
    rewards = {name: rewards_by_kind(questions, generator.answer(images, [q.question for q in questions], docs),
                                     scorer)
               for name, docs in selections.items()}
    return {"split": split, "counts": counts_by_kind(data_dir), "zoo": figures,
            "recall_at_k_caption_plus_question": recall, "reward_by_kind": rewards,
            "query_samples": queries[:3]}


def report(result: dict, seconds: float) -> str:
    counts = result["counts"]
    lines = ["## World v2 at the default size, untrained (benchmarks/world_v2.py)", "",
             f"Machine: {machine()}. `mmrag synth` defaults (320 entities, seed 0); zoo seed 0; "
             f"split `{result['split']}`; {seconds:.0f} s.", "",
             markdown_table(["split", "questions", "entities", *KINDS],
                            [[s, *(str(counts[s][c]) for c in ("questions", "entities", *KINDS))] for s in SPLITS]),
             ""]
    zoo = result["zoo"]
    captioner, clip, reader = (zoo[name] for name in ZOO_FIGURES)
    lines += [f"Zoo, held out: captioner-v2 describes {captioner['heldout_greedy_description_accuracy']:.3f} of "
              f"images fully right (per attribute {captioner['heldout_attribute_accuracy']}); tiny-clip-v2 "
              f"image->caption top-1 {clip['heldout_image_to_caption_top1']:.3f}, query->passage top-1 "
              f"{clip['heldout_query_to_passage_top1']:.3f} on its own generic world; visual reader "
              f"{reader['heldout_attribute_accuracy']}.", ""]
    recall = result["recall_at_k_caption_plus_question"]
    lines += [markdown_table(["recall@k (caption + question)", *(f"@{k}" for k in RECALL_AT)],
                             [[kind, *(f"{recall[kind][k]:.3f}" for k in RECALL_AT)] for kind in recall]), ""]
    rewards = result["reward_by_kind"]
    lines += [markdown_table(["selection (grounded generator, exact match)", "all", *KINDS],
                             [[name, *(f"{row.get(c, 0):.3f}" for c in ("all", *KINDS))]
                              for name, row in rewards.items()])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="dataset dir (world v2 is written there if absent)")
    parser.add_argument("--zoo", default=Config().zoo.cache_dir)
    parser.add_argument("--split", default="test", choices=SPLITS)
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    started = time.perf_counter()
    if not (args.data / "dataset.json").is_file():
        generate_dataset(args.data, Config().data.entities, Config().data.seed)
    result = measure(args.data, args.zoo, args.split)
    publish_figures(report(result, time.perf_counter() - started), result, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
