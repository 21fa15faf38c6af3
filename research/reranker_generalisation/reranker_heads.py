"""Does a reranker head generalise across entities? Each head fitted on gold labels on train, measured on val.

Not a test: `python -m research.reranker_generalisation.reranker_heads [--config CFG] [--set ...] [--heads similarity
mlp]` from the repository root, with the config's dataset and index built. The cheap check before any reward-backprop
run: a head that cannot learn, from labels, to pick the gold passage of an unseen entity cannot learn it from reward.
For the fact questions (one-fact, two-fact) of train and val: the untrained translator's greedy query, its top
`index.top_k` candidates, the reranker's features (frozen backbone) computed once. Each head is then fitted as
component-level training fits it (`gold_classifier_loss`: softmax over the candidate logits, cross-entropy on the gold
candidates) with Adam at `reranker.lr`, on minibatches of train rows, and measured before (retrieval order: every head
starts there) and after, on train and val: top-1 (the highest candidate logit is gold) and gold kept (the fraction of
gold passages among the top n, n = the question's number of gold passages), over the rows with a gold passage among
their candidates. Prints the table and writes its section of RESULTS.md and
research/reranker_generalisation/results/reranker_heads.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import random
import time
from pathlib import Path

import torch

from benchmarks.results import config_in_words, machine, markdown_table, portable_overrides, publish_figures
from mmrag.data.dataset import Question, load_questions
from mmrag.models.reranker import AdaptiveReranker, RerankBatch, candidates_of
from mmrag.training.component_level import gold_candidates, gold_classifier_loss
from mmrag.training.fixed_k import BATCH
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
RESULTS_JSON = Path(__file__).resolve().parent / "results" / "reranker_heads.json"


@dataclasses.dataclass
class Featurized:
    """One split's fact questions with a gold passage among their candidates, featurized in chunks."""

    batches: list[RerankBatch]
    gold: list[torch.Tensor]
    """Per chunk, [B, K] bool."""
    questions: list[Question]


def featurize(pipeline: LocalPipeline, questions: list[Question]) -> Featurized:
    batches, gold, kept = [], [], []
    for start in range(0, len(questions), BATCH):
        chunk = questions[start:start + BATCH]
        queries = pipeline.translate_greedy(QuestionTable.of(chunk))
        hits = pipeline.retrieve(queries)
        rows = [i for i, (q, row) in enumerate(zip(chunk, hits)) if any(h.doc_id in q.gold_doc_ids for h in row)]
        if not rows:
            continue
        chunk, queries, hits = [chunk[i] for i in rows], [queries[i] for i in rows], [hits[i] for i in rows]
        batch = pipeline.reranker.featurize([q.image for q in chunk], [q.question for q in chunk], queries,
                                            candidates_of(hits))
        batches.append(batch)
        gold.append(gold_candidates(chunk, hits, batch.mask.shape[1]))
        kept.extend(chunk)
    return Featurized(batches, gold, kept)


@torch.no_grad()
def measure(reranker: AdaptiveReranker, split: Featurized) -> dict[str, float]:
    """top-1 and gold kept over the split's rows."""
    top1, kept_fraction = [], []
    for batch, gold in zip(split.batches, split.gold):
        logits = reranker.logits(batch)[:, :-1]
        order = logits.argsort(dim=1, descending=True)
        for row in range(len(batch)):
            num_gold = int(gold[row].sum())
            ranked_gold = gold[row][order[row]]
            top1.append(float(ranked_gold[0]))
            kept_fraction.append(float(ranked_gold[:num_gold].sum()) / num_gold)
    return {"top1": sum(top1) / len(top1), "gold_kept": sum(kept_fraction) / len(kept_fraction), "rows": len(top1)}


def fit(reranker: AdaptiveReranker, train: Featurized, steps: int, lr: float, seed: int) -> None:
    """Adam on the gold classifier loss, one train chunk (BATCH rows) a step, chunks in a seeded random order."""
    optimizer = torch.optim.Adam(reranker.head.parameters(), lr=lr)
    rng = random.Random(seed)
    for _ in range(steps):
        index = rng.randrange(len(train.batches))
        batch = train.batches[index]
        optimizer.zero_grad()
        gold_classifier_loss(reranker.logits(batch)[:, :-1], batch.mask, train.gold[index]).backward()
        optimizer.step()


def report(records: list[dict], train: Featurized, val: Featurized, args, steps: int, lr: float,
           minutes: float) -> str:
    rows = [[r["head"], r["when"], f"{r['train']['top1']:.3f}", f"{r['train']['gold_kept']:.3f}",
             f"{r['val']['top1']:.3f}", f"{r['val']['gold_kept']:.3f}"] for r in records]
    return (f"## Reranker heads fitted on gold labels: do they generalise across entities? ({datetime.date.today()})"
            f"\n\nMachine: {machine()}; {minutes:.1f} min. Config {config_in_words(args.config, args.overrides)}. "
            f"Fact questions (one-fact, two-fact) whose untrained greedy query retrieves a gold passage: "
            f"{len(train.questions)} train rows from {len({q.entity_id for q in train.questions})} entities, "
            f"{len(val.questions)} val rows from {len({q.entity_id for q in val.questions})} entities (no entity "
            f"shared). Each head fitted as component-level training fits it (softmax cross-entropy on the gold "
            f"candidates), Adam lr {lr}, {steps} steps of {BATCH} rows, seed {args.seed}; 'start' is every "
            f"head's untrained ranking (the prior: the retrieval score, plus sight with a visual reader). top-1: the highest candidate is gold; gold kept: the "
            f"fraction of gold passages among the top n (n = the question's gold passages).\n\n"
            + markdown_table(["head", "when", "train top-1", "train gold kept", "val top-1", "val gold kept"], rows)
            + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--heads", nargs="+", default=["similarity", "mlp"], help="values of reranker.head")
    parser.add_argument("--steps", type=int, default=300, help="Adam steps per head")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="where the figures go")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    cfg = config_from_args(args)
    started = time.perf_counter()
    pipeline = LocalPipeline.from_config(cfg)
    fact = [[q for q in load_questions(cfg.data.dir, split) if q.gold_doc_ids] for split in ("train", "val")]
    train, val = (featurize(pipeline, questions) for questions in fact)
    records = []
    for head in args.heads:
        torch.manual_seed(args.seed)
        reranker = AdaptiveReranker(pipeline.reranker.encoder, dataclasses.replace(cfg.reranker, head=head),
                                    pipeline.reranker.visual_reader)
        records.append({"head": head, "when": "start", "train": measure(reranker, train), "val": measure(reranker, val)})
        fit(reranker, train, args.steps, cfg.reranker.lr, args.seed)
        records.append({"head": head, "when": f"fitted ({args.steps} steps)", "train": measure(reranker, train),
                        "val": measure(reranker, val)})
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config or "(embedded defaults)",
               "sets": portable_overrides(args.overrides), "steps": args.steps, "lr": cfg.reranker.lr,
               "seed": args.seed, "records": records}
    publish_figures(report(records, train, val, args, args.steps, cfg.reranker.lr,
                           (time.perf_counter() - started) / 60), figures, args.json, write=not args.print_only,
                    results=RESULTS_MD)


if __name__ == "__main__":
    main()
