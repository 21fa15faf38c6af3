"""How much reward can training reach with this zoo? Retrieval recall and oracle rerankers, on val, per kind.

Not a test: `python -m research.zoo_ceilings.ceilings [--config CFG] [--set ...]` from the repository root, with a
world v2 dataset and its index built (`mmrag synth`, `mmrag index`). Eval-only, greedy, frozen models, on the
val split (the test split is never read). Two queries per question:

  greedy      the untrained translator's greedy query (where reward backprop starts)
  perfect     the pictured entity's true description in the captioner's own style (`CAPTIONER_WORDING`'s
              first form) followed by the question, as the query template writes it: the best query a
              translator that reads the picture perfectly, in the style it was fitted on, could write

For each: recall@K of the top `index.top_k` candidates (a fact question counts when all its gold passages
are among them, so a two-fact question needs both); the fixed pipelines (the top k in retrieval order,
k in `K_CHOICES`, and k = K: the generator reads the first passage that states the asked relation, so at
k = K ordering by relation cannot gain anything more, only ordering the pictured entity's passage above its
near-duplicates' can); entity identification on the fact questions whose own entity has a passage among the
candidates (is the entity of the best-scored candidate the pictured one; is the entity whose KB picture is
closest to the question image under the encoder's image tower the pictured one: what the reranker's frozen
features can tell apart); the kind oracle (nothing on visual questions, the top k in retrieval order otherwise:
what a perfect STOP alone gives); and the oracle reranker over the candidates (nothing on visual questions,
otherwise exactly the gold passages found among the candidates, in gold order, and nothing if none is
there). Reranker alone = oracle(greedy) - best fixed(greedy); translator alone = best fixed(perfect) -
best fixed(greedy); both = oracle(perfect) - best fixed(greedy). Prints the table, writes its section of
RESULTS.md and research/zoo_ceilings/results/ceilings.json.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from benchmarks.results import config_in_words, machine, markdown_table, portable_overrides, publish_figures
from mmrag.data.dataset import Question, load_questions
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import CAPTIONER_WORDING
from mmrag.data.world import Entity
from mmrag.models.translator import question_in_query
from mmrag.retrieval.hit import Hit
from mmrag.training.fixed_k import BATCH, K_CHOICES, choose_k, mean_reward_by_k, records_by_k
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
RESULTS_JSON = Path(__file__).resolve().parent / "results" / "ceilings.json"
KINDS = ("visual", "one-fact", "two-fact")


def world_entities(data_dir: str) -> dict[str, Entity]:
    """The dataset's entities, redrawn from its seed (`build_world` draws them first from `Random(seed)`)."""
    manifest = json.loads((Path(data_dir) / "dataset.json").read_text())
    if manifest.get("world") != "v2":
        raise ValueError(f"data.dir: {data_dir} holds world {manifest.get('world')!r}; the ceilings need world v2")
    entities = draw_entities_v2(manifest["counts"]["entities"], random.Random(manifest["seed"]))
    return {entity.entity_id: entity for entity in entities}


def perfect_query(question: Question, entity: Entity) -> str:
    description = CAPTIONER_WORDING.descriptions[0].format(colour=entity.colour, shape=entity.shape,
                                                           texture=entity.texture, background=entity.background)
    return f"{description} {question_in_query(question.question)}"


def greedy_queries(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    queries = []
    for start in range(0, len(questions), BATCH):
        queries.extend(pipeline.translate_greedy(QuestionTable.of(questions[start:start + BATCH])))
    return queries


def text_hits(pipeline: LocalPipeline, queries: list[str]) -> list[list[Hit]]:
    hits = []
    for start in range(0, len(queries), BATCH):
        hits.extend(pipeline.retrieve(queries[start:start + BATCH]))
    return hits


def oracle_selection(question: Question, row: list[Hit]) -> list[Hit]:
    """Nothing for a visual question; otherwise the gold passages among the candidates, in gold order."""
    by_id = {hit.doc_id: hit for hit in row}
    return [by_id[d] for d in question.gold_doc_ids if d in by_id]


def mean_by_kind(records: list[dict]) -> dict[str, float]:
    return {kind: statistics.fmean(r["reward"] for r in records if r["kind"] == kind)
            for kind in KINDS if any(r["kind"] == kind for r in records)} | {
        "all": statistics.fmean(r["reward"] for r in records)}


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True).clip(min=1e-12)


def entity_pictures(pipeline: LocalPipeline) -> dict[str, np.ndarray]:
    """Entity id -> the encoder's unit image vector of its KB picture (the KB document that has an image)."""
    table = pq.read_table(Path(pipeline.cfg.data.dir) / "kb.parquet", columns=["entity_id", "image"]).to_pylist()
    pictured = [(row["entity_id"], Image.open(io.BytesIO(row["image"]))) for row in table if row["image"]]
    vectors = unit_rows(np.asarray(pipeline.encoder.encode_images([image for _, image in pictured])))
    return {entity: vector for (entity, _), vector in zip(pictured, vectors)}


def entity_identification(pipeline: LocalPipeline, questions: list[Question], hits: list[list[Hit]],
                          pictures: dict[str, np.ndarray]) -> dict[str, float]:
    """On fact questions whose entity is among the candidates' entities: how often the best-scored candidate's
    entity, and the entity whose KB picture is nearest the question image, is the pictured one."""
    rows = [(q, row) for q, row in zip(questions, hits)
            if q.gold_doc_ids and q.entity_id in {h.entity_id for h in row}]
    images = unit_rows(np.asarray(pipeline.encoder.encode_images([q.image for q, _ in rows])))
    by_score, by_picture, entities = [], [], []
    for (q, row), image in zip(rows, images):
        candidates = sorted({h.entity_id for h in row})
        nearest = max(candidates, key=lambda entity: float(pictures[entity] @ image))
        by_score.append(float(row[0].entity_id == q.entity_id))
        by_picture.append(float(nearest == q.entity_id))
        entities.append(len(candidates))
    return {"questions": len(rows), "candidate_entities_mean": statistics.fmean(entities),
            "best_scored_candidate": statistics.fmean(by_score), "nearest_kb_picture": statistics.fmean(by_picture)}


def ceilings_of(pipeline: LocalPipeline, questions: list[Question], hits: list[list[Hit]],
                pictures: dict[str, np.ndarray]) -> dict:
    """Recall@K, fixed k (K included), entity identification, the kind oracle and the oracle reranker, per kind,
    for one query's candidates."""
    recall = {kind: statistics.fmean(float(set(q.gold_doc_ids) <= {h.doc_id for h in row})
                                     for q, row in zip(questions, hits) if q.kind == kind)
              for kind in KINDS[1:]}
    every = pipeline.cfg.index.top_k
    fixed = records_by_k(pipeline, questions, hits, ks=(*K_CHOICES, every))
    read_all = mean_by_kind(fixed.pop(every))
    val_by_k = mean_reward_by_k(fixed)
    best_k = choose_k(val_by_k)
    kind_oracle = {k: [records[i] if q.kind != "visual" else fixed[0][i] for i, q in enumerate(questions)]
                   for k, records in fixed.items()}
    kind_oracle_by_k = mean_reward_by_k(kind_oracle)
    kind_oracle_k = choose_k(kind_oracle_by_k)
    selections = [oracle_selection(q, row) for q, row in zip(questions, hits)]
    longest = max(len(s) for s in selections)
    oracle = records_by_k(pipeline, questions, selections, ks=(longest,))[longest]
    return {"recall_at_top_k": recall,
            "fixed_by_k": {k: mean_by_kind(rows) for k, rows in fixed.items()},
            "best_fixed_k": best_k, "best_fixed": mean_by_kind(fixed[best_k]), "fixed_all_candidates": read_all,
            "entity_identification": entity_identification(pipeline, questions, hits, pictures),
            "kind_oracle_k": kind_oracle_k, "kind_oracle": mean_by_kind(kind_oracle[kind_oracle_k]),
            "oracle_reranker": mean_by_kind(oracle)}


def report(figures: dict, args, minutes: float) -> str:
    def cells(by_kind: dict[str, float]) -> list[str]:
        return [f"{by_kind['all']:.3f}", *(f"{by_kind[kind]:.3f}" for kind in KINDS)]

    rows = []
    for query, f in figures["queries"].items():
        rows.append([query, f"recall@{figures['top_k']}", "-", f"{f['recall_at_top_k']['one-fact']:.3f}",
                     f"{f['recall_at_top_k']['two-fact']:.3f}", "-"])
        rows.append([query, f"best fixed (top {f['best_fixed_k']})", *cells(f["best_fixed"])[1:], cells(f["best_fixed"])[0]])
        rows.append([query, f"top {figures['top_k']} (every candidate)", *cells(f["fixed_all_candidates"])[1:],
                     cells(f["fixed_all_candidates"])[0]])
        rows.append([query, f"kind oracle (0 on visual, else top {f['kind_oracle_k']})",
                     *cells(f["kind_oracle"])[1:], cells(f["kind_oracle"])[0]])
        rows.append([query, "oracle reranker", *cells(f["oracle_reranker"])[1:], cells(f["oracle_reranker"])[0]])
    identified = [[query, str(f["entity_identification"]["questions"]),
                   f"{f['entity_identification']['candidate_entities_mean']:.1f}",
                   f"{f['entity_identification']['best_scored_candidate']:.3f}",
                   f"{f['entity_identification']['nearest_kb_picture']:.3f}"] for query, f in figures["queries"].items()]
    gaps = figures["reachable"]
    return (f"## Ceilings: what training can reach with this zoo ({datetime.date.today()})\n\n"
            f"Machine: {machine()}; {minutes:.1f} min. Config {config_in_words(args.config, args.overrides)}. "
            f"Val split only ({figures['questions']} questions from {figures['entities']} entities), greedy, "
            f"frozen untrained zoo models. 'greedy': the untrained translator's greedy query; 'perfect': the "
            f"entity's true description in the captioner's own style + the question. recall@{figures['top_k']}: "
            f"all gold passages among the {figures['top_k']} candidates (two-fact: both). Kind oracle: nothing on "
            f"visual questions, the top k in retrieval order on fact questions. Oracle reranker: nothing on visual "
            f"questions, exactly the gold passages among the candidates otherwise.\n\n"
            + markdown_table(["query", "pipeline", "visual", "one-fact", "two-fact", "all"], rows)
            + "\n\nEntity identification (fact questions whose entity has a passage among the candidates): is the "
            "pictured entity that of the best-scored candidate, or the one whose KB picture is nearest the question "
            "image (the encoder's image tower)?\n\n"
            + markdown_table(["query", "questions", "entities among the candidates", "best-scored candidate",
                              "nearest KB picture"], identified)
            + f"\n\nOver the best fixed pipeline with the greedy query ({gaps['best_fixed_greedy']:.3f}), reachable "
            f"by a perfect reranker alone **{gaps['reranker_alone']:+.3f}** (of which a perfect STOP alone "
            f"{gaps['stop_alone']:+.3f}), by a perfect translator alone (its best fixed k) "
            f"**{gaps['translator_alone']:+.3f}**, by both **{gaps['both']:+.3f}**.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="where the figures go")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    cfg = config_from_args(args)
    started = time.perf_counter()
    try:
        pipeline = LocalPipeline.from_config(cfg)
        val = load_questions(cfg.data.dir, "val")
        entities = world_entities(cfg.data.dir)
    except (FileNotFoundError, ValueError) as exc:
        sys.exit(f"ceilings: {exc}")
    queries = {"greedy": greedy_queries(pipeline, val),
               "perfect": [perfect_query(q, entities[q.entity_id]) for q in val]}
    pictures = entity_pictures(pipeline)
    per_query = {name: ceilings_of(pipeline, val, text_hits(pipeline, texts), pictures)
                 for name, texts in queries.items()}
    base = per_query["greedy"]["best_fixed"]["all"]
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config or "(embedded defaults)",
               "sets": portable_overrides(args.overrides), "split": "val", "questions": len(val),
               "entities": len({q.entity_id for q in val}), "top_k": cfg.index.top_k, "queries": per_query,
               "examples": {name: texts[:3] for name, texts in queries.items()},
               "reachable": {"best_fixed_greedy": base,
                             "reranker_alone": per_query["greedy"]["oracle_reranker"]["all"] - base,
                             "stop_alone": per_query["greedy"]["kind_oracle"]["all"] - base,
                             "translator_alone": per_query["perfect"]["best_fixed"]["all"] - base,
                             "both": per_query["perfect"]["oracle_reranker"]["all"] - base}}
    publish_figures(report(figures, args, (time.perf_counter() - started) / 60), figures, args.json,
                    write=not args.print_only, results=RESULTS_MD)


if __name__ == "__main__":
    main()
