"""Roll out one batch of questions through the pipeline stages and record the trees.

For each question: N sampled queries (translator nodes) -> top-K retrieval each -> M
sampled selections per query (reranker nodes) -> one answer per selection, scored by
the reward model (leaf reward). Stages run batched across the whole batch, so each
stage is one call whether it is a local model or a pool of actors. Also the greedy
path used at inference and evaluation (N = M = 1, both components acting greedily).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from mmrag.data.dataset import Question
from mmrag.rl.rollout import Node


@dataclass
class StageTimer:
    """Wall seconds spent in each stage, accumulated over a batch."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def _repeat(items: list, times: int) -> list:
    return [item for item in items for _ in range(times)]


def rollout_batch(pipeline, questions: list[Question], n: int, m: int, version: int,
                  timer: StageTimer | None = None) -> list[Node]:
    """One rollout tree per question; leaves carry rewards, nothing is backpropagated yet."""
    timer = timer or StageTimer()
    images = [q.image for q in questions]
    texts = [q.question for q in questions]
    with timer.stage("translate"):
        samples = pipeline.translate(images, texts, n)
    queries = [s.text for row in samples for s in row]
    q_images, q_texts = _repeat(images, n), _repeat(texts, n)
    with timer.stage("retrieve"):
        hits = pipeline.retrieve(queries)
    with timer.stage("rerank"):
        selections, sel_logprobs = pipeline.rerank(q_images, q_texts, queries, hits, m)
    evidence = [[hits[row][j].text for j in sel] for row, drawn in enumerate(selections) for sel in drawn]
    with timer.stage("generate"):
        answers = pipeline.answer(_repeat(q_images, m), _repeat(q_texts, m), evidence)
    with timer.stage("reward"):
        rewards = pipeline.score(_repeat(q_texts, m), answers, _repeat(_repeat([q.answers for q in questions], n), m))

    roots = []
    for qi, question in enumerate(questions):
        root = Node("root", output=question.id, policy_version=version, payload={"question": question})
        for si, sample in enumerate(samples[qi]):
            row = qi * n + si
            t_node = root.add(Node("translator", output=sample.text, logprob=sample.logprob, policy_version=version,
                                   payload={"row": row, "hits": hits[row]}))
            for mi, selection in enumerate(selections[row]):
                leaf = row * m + mi
                t_node.add(Node("reranker", output=tuple(selection), logprob=sel_logprobs[row][mi],
                                policy_version=version, reward=float(rewards[leaf]),
                                payload={"answer": answers[leaf],
                                         "doc_ids": [hits[row][j].doc_id for j in selection]}))
        roots.append(root)
    return roots


def greedy_batch(pipeline, questions: list[Question]) -> list[dict]:
    """The inference path: greedy query, top-K, greedy selection, answer, reward."""
    images = [q.image for q in questions]
    texts = [q.question for q in questions]
    queries = pipeline.translate_greedy(images, texts)
    hits = pipeline.retrieve(queries)
    selections = pipeline.rerank_greedy(images, texts, queries, hits)
    evidence = [[row[j].text for j in sel] for row, sel in zip(hits, selections)]
    answers = pipeline.answer(images, texts, evidence)
    rewards = pipeline.score(texts, answers, [q.answers for q in questions])
    return [
        {"id": q.id, "question": q.question, "query": query, "answer": answer, "reward": float(reward),
         "retrieved": [h.doc_id for h in row], "selected": [row[j].doc_id for j in sel],
         "gold": list(q.gold_doc_ids)}
        for q, query, row, sel, answer, reward in zip(questions, queries, hits, selections, answers, rewards)
    ]
