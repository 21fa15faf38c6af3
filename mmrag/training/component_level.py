"""Component-level training, the paper's contrast to reward backpropagation: each component fitted on its own labels.

`mmrag train --set train.method=component-level`. Labels the reward-backprop trainer never sees:

* translator: supervised (teacher forcing, mean token negative log-likelihood) to write the text of one
  gold passage of the question (drawn at random among its gold passages, cut to
  `translator.max_new_tokens`) as its response; questions without gold passages (visual ones) have no
  target and are skipped;
* reranker: a classifier of gold passages among the retrieved candidates (those of the translator's
  current greedy query): softmax over the candidate logits (retrieval score / temperature + head),
  cross-entropy on each gold candidate (offset-free, as the retrieval term makes logits large). The
  STOP scorer is not trained.

The components then run with a fixed number of documents: the reranker's top k by logit, k from
`K_CHOICES` chosen on the val questions of `train.eval_questions` (never on test), as a practitioner
would tune a fixed pipeline. The export is a normal one (`mmrag eval --checkpoint` loads it): its
reranker's STOP scorer is pinned far below every candidate and its `reranker.max_docs` is the chosen k,
so greedy selection keeps exactly the top k. The val curve in metrics.jsonl is the val reward at the
best k on those questions at each evaluation; `train.export` applies as to reward backprop (`best_val`:
the best of those evaluations is exported, step 0 included). Runs in this process; not resumable
(SIGTERM ends it at the next step boundary, evaluated).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
from tqdm import tqdm

from mmrag.config import Config
from mmrag.data.dataset import KB_FILE, Question, load_questions
from mmrag.models.lvlm import decode_response, response_token_ids, sequence_logprobs
from mmrag.models.reranker import candidates_of
from mmrag.retrieval.hit import Hit
from mmrag.training.evaluate import held_out_sample
from mmrag.training.export import save_export
from mmrag.training.export_choice import best_validation_step
from mmrag.training.fixed_k import BATCH, choose_k, mean_reward_by_k, records_by_k
from mmrag.training.metrics_log import MetricsLog
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.run import QuestionCursor, prepare_run_dir
from mmrag.training.stages import QuestionTable

NEVER_STOP = -1.0e4
"""The exported STOP scorer's bias: far below any candidate logit, so greedy selection keeps max_docs."""


def gold_response(question: Question, kb_text: dict[str, str], processor, max_new_tokens: int,
                  rng: random.Random) -> str | None:
    """One gold passage's text, cut to fit the translator's response length (end of turn included)."""
    if not question.gold_doc_ids:
        return None
    ids = response_token_ids(processor, kb_text[rng.choice(question.gold_doc_ids)])[:-1]
    return decode_response(processor, ids[:max_new_tokens - 1])


def translator_loss(pipeline: LocalPipeline, questions: list[Question], targets: list[str | None]) -> torch.Tensor:
    """Mean negative log-likelihood per target token of the gold responses (questions with one)."""
    kept = [(q, t) for q, t in zip(questions, targets) if t is not None]
    translator = pipeline.translator
    if not kept:
        return torch.zeros((), requires_grad=True)
    questions, targets = [q for q, _ in kept], [t for _, t in kept]
    tokens = sum(len(response_token_ids(translator.processor, t)) for t in targets)
    translator.model.train()
    try:
        logprobs = sequence_logprobs(translator.model, translator.processor, [q.image for q in questions],
                                     translator.prompts([q.question for q in questions]), targets)
    finally:
        translator.model.eval()
    return -logprobs.sum() / tokens


def candidate_logits(pipeline: LocalPipeline, questions: list[Question], queries: list[str],
                     hits: list[list[Hit]]) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, K] candidate logits with gradients to the head, [B, K] mask of real candidates)."""
    reranker = pipeline.reranker
    batch = reranker.featurize([q.image for q in questions], [q.question for q in questions], queries,
                               candidates_of(hits))
    return reranker.logits(batch)[:, :-1], batch.mask


def gold_candidates(questions: list[Question], hits: list[list[Hit]], num_slots: int) -> torch.Tensor:
    """[B, K] bool: which candidates are gold passages of their question."""
    gold = torch.zeros(len(questions), num_slots, dtype=torch.bool)
    for i, (question, row) in enumerate(zip(questions, hits)):
        for j, hit in enumerate(row):
            gold[i, j] = hit.doc_id in question.gold_doc_ids
    return gold


def gold_classifier_loss(logits: torch.Tensor, mask: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Softmax classifier over each row's candidates (logits, mask, gold [B, K]): mean -log p(gold candidate) over
    every gold candidate (zero, with a gradient path, when there is none)."""
    log_p = torch.log_softmax(logits, dim=-1)
    if not gold.any():
        return log_p[mask].sum() * 0.0
    return -log_p[gold].mean()


def reranker_loss(pipeline: LocalPipeline, questions: list[Question], queries: list[str],
                  hits: list[list[Hit]]) -> torch.Tensor:
    """The gold classifier loss of the reranker's candidate logits for these questions' candidates."""
    logits, mask = candidate_logits(pipeline, questions, queries, hits)
    return gold_classifier_loss(logits, mask, gold_candidates(questions, hits, mask.shape[1]).to(mask.device))


@torch.no_grad()
def reranked_hits(pipeline: LocalPipeline, questions: list[Question]) -> list[list[Hit]]:
    """Each question's top-K retrieval of its greedy query, reordered by the reranker's candidate logits."""
    ordered = []
    for start in range(0, len(questions), BATCH):
        batch = questions[start:start + BATCH]
        queries = pipeline.translate_greedy(QuestionTable.of(batch))
        hits = pipeline.retrieve(queries)
        logits, _ = candidate_logits(pipeline, batch, queries, hits)
        for row, row_logits in zip(hits, logits):
            order = sorted(range(len(row)), key=lambda j: -float(row_logits[j]))
            ordered.append([row[j] for j in order])
    return ordered


def val_reward_by_k(pipeline: LocalPipeline, questions: list[Question]) -> dict[int, float]:
    """Val reward when the generator reads the reranker's top k, for every k of `K_CHOICES`."""
    return mean_reward_by_k(records_by_k(pipeline, questions, reranked_hits(pipeline, questions)))


def evaluation(pipeline: LocalPipeline, questions: list[Question]) -> dict:
    by_k = val_reward_by_k(pipeline, questions)
    k = choose_k(by_k)
    return {"reward_mean": by_k[k], "k": k, "reward_by_k": {str(key): value for key, value in by_k.items()}}


def pin_top_k(pipeline: LocalPipeline, cfg: Config, k: int) -> Config:
    """Make greedy selection keep exactly the reranker's top k; the config to export with it."""
    pipeline.reranker.stop_scorer.pin(NEVER_STOP)
    pipeline.reranker.max_docs = k
    return dataclasses.replace(cfg, reranker=dataclasses.replace(cfg.reranker, max_docs=k))


def train_component_level(cfg: Config, progress: bool = True, device: str = "cpu",
                          stop: threading.Event | None = None) -> dict:
    """Fit both components on their labels for `train.steps` steps, choose k on val, export; returns the first
    and last val evaluations as `mmrag train` prints them."""
    run_dir = prepare_run_dir(cfg)
    torch.manual_seed(cfg.train.seed)
    pipeline = LocalPipeline.from_config(cfg, device)
    kb = pq.read_table(Path(cfg.data.dir) / KB_FILE, columns=["doc_id", "text"]).to_pydict()
    kb_text = dict(zip(kb["doc_id"], kb["text"]))
    cursor = QuestionCursor(load_questions(cfg.data.dir, "train"), cfg.train.seed)
    held_out = held_out_sample(load_questions(cfg.data.dir, "val"), cfg.train.eval_questions)
    rng = random.Random(cfg.train.seed)
    translator_optimizer = torch.optim.AdamW(pipeline.translator.trainable_parameters(), lr=cfg.translator.lr)
    reranker_optimizer = torch.optim.AdamW(pipeline.reranker.head.parameters(), lr=cfg.reranker.lr)
    metrics = MetricsLog(run_dir)
    evaluations: dict[int, dict] = {}
    exported_step = None

    def evaluate_and_export(step: int) -> None:
        """Evaluate on val; export this step (its k pinned) when it is the last or, with best_val, the best yet."""
        nonlocal exported_step
        evaluations[step] = evaluation(pipeline, held_out)
        metrics.log(step, {"eval": evaluations[step]})
        if cfg.train.export == "last" or best_validation_step(evaluations) == step:
            exported = pin_top_k(pipeline, cfg, evaluations[step]["k"])  # STOP is never trained: pinning is final
            save_export(run_dir / "export", pipeline.translator, pipeline.reranker, step, exported)
            exported_step = step

    evaluate_and_export(0)
    for step in tqdm(range(1, cfg.train.steps + 1), desc="train (component-level)", disable=not progress):
        started = time.perf_counter()
        batch = cursor.next_batch(cfg.train.questions_per_step)
        queries = pipeline.translate_greedy(QuestionTable.of(batch))
        hits = pipeline.retrieve(queries)
        targets = [gold_response(q, kb_text, pipeline.translator.processor, cfg.translator.max_new_tokens, rng)
                   for q in batch]
        losses = {}
        for name, optimizer, loss in (
                ("translator", translator_optimizer, lambda: translator_loss(pipeline, batch, targets)),
                ("reranker", reranker_optimizer, lambda: reranker_loss(pipeline, batch, queries, hits))):
            optimizer.zero_grad()
            value = loss()
            value.backward()
            optimizer.step()
            losses[name] = {"loss": value.item()}
        metrics.log(step, {**losses, "gold_targets": sum(t is not None for t in targets),
                           "step_seconds": time.perf_counter() - started})
        stopping = stop is not None and stop.is_set()
        if step % cfg.train.eval_every == 0 or step == cfg.train.steps or stopping:
            evaluate_and_export(step)
        if stopping:
            break
    metrics.close()
    summary = {key: evaluations[0][key] for key in ("reward_mean", "k")}
    return {"initial": summary, "exported": {key: evaluations[exported_step][key] for key in summary},
            "exported_step": exported_step, "evaluations": evaluations, "run_dir": str(run_dir),
            "preempted_at": None, "chosen_k": evaluations[exported_step]["k"]}
