"""Training-free pipelines a strong practitioner builds from the same frozen parts, every choice made on val.

Every baseline is a fixed ranking of each question's documents, of which the frozen generator reads
the top k. k is chosen on the val split's mean reward among 0..`max_k` (`reranker.max_docs` by default;
k = 0 is never retrieving), either once (`FixedBaseline.k`) or once per question kind predicted by a
bag-of-words classifier fitted on the train split's questions (`FixedBaseline.k_per_kind`,
`mmrag.evaluation.kind_classifier`); the test split is then read at that choice. As everywhere
(`mmrag.training.evaluate`): every choice reads the config's reward, as training does; every test figure
is exact match, with the reward's test score beside it (`Choice.test_reward_model`). The rankings:

  dense: FORM        the query form through the encoder's text tower against the KB index
  bm25: FORM         the same query text through BM25 over the KB passages (`mmrag.retrieval.bm25`)
  rrf: FORM          reciprocal-rank fusion of the two
  image              the question image through the encoder's image tower against the KB index
  ground then rank   identify what is pictured, then rerank the candidates of the best retrieval and of the
                     best dense retrieval by their text match with it (below), w chosen on val with k

The text query forms: `question` alone; `caption`, the untrained translator's response (for the zoo,
a description of the picture); `caption+question`; and, with a reranker that reads with a visual reader
(`reranker.visual_reader`), `sight+question`: what that frozen eye sees (`seen_description`) followed
by the question. Grounding, with the eye: prior (retrieval score + cosine of the passage with what the
eye sees) + w x the summed word match of the read attribute words (`mmrag.models.word_match`); with the
image embedding: retrieval score + w x the share of the name words of the KB entry the question image
retrieves first (`image`'s top hit) that the passage contains. Besides them: never- and
always-retrieve (the best retrieval at k = `max_k`) and the oracle, the gold documents exactly.

Each question is translated and retrieved once per ranking; only the generator and the reward run
once per k. Nothing about a test question moves a choice: k, the per-kind ks, w and the best
pipeline (`best_training_free`) are all read from val records. Nothing here depends on how a world
words its texts: it reads questions, the KB and its index and the gold ids only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from mmrag.data.dataset import Question
from mmrag.evaluation.kind_classifier import KindClassifier
from mmrag.evaluation.settings import gold_doc_hits
from mmrag.models.translator import question_in_query
from mmrag.retrieval.bm25 import BM25Index, reciprocal_rank_fusion, tokens
from mmrag.retrieval.hit import Hit
from mmrag.training.evaluate import CHOICE_FIELD, TEST_FIELD, summarize_by_kind
from mmrag.training.fixed_k import BATCH, choose_k, mean_of, records_by_k
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.stages import QuestionTable

TEXT_FORMS = ("question", "caption", "caption+question")
SIGHT_FORM = "sight+question"
GROUNDING_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 5.0)
"""Weights of the text match with what was identified, chosen on val with k (0: the prior alone)."""
ORACLE = "oracle"


@dataclass(frozen=True)
class FixedBaseline:
    """One fixed ranking read at every evaluated k: per k, one record per question (`records_by_k`, plus the
    question's `predicted_kind`), on val and on test. k is chosen on val among the evaluated ks up to `max_k`."""

    name: str
    val: dict[int, list[dict]]
    test: dict[int, list[dict]]
    max_k: int | None = None
    """Most documents a choice may hand the generator (None: every evaluated k); the oracle's -1 is "all gold"."""

    @property
    def ks(self) -> list[int]:
        return sorted(k for k in self.val if self.max_k is None or k <= self.max_k)

    @property
    def val_by_k(self) -> dict[int, float]:
        """k -> the val reward (`CHOICE_FIELD`): what k is chosen on."""
        return {k: mean_of(self.val[k], CHOICE_FIELD) for k in self.ks}

    @property
    def test_by_k(self) -> dict[int, float]:
        """k -> the test figure (`TEST_FIELD`)."""
        return {k: mean_of(self.test[k], TEST_FIELD) for k in self.ks}

    @property
    def k(self) -> int:
        return choose_k(self.val_by_k)

    @property
    def val_reward(self) -> float:
        return self.val_by_k[self.k]

    @property
    def test_reward(self) -> float:
        return self.test_by_k[self.k]

    @property
    def k_per_kind(self) -> dict[str, int]:
        """Predicted kind -> the k with the best val reward over the val questions predicted of that kind."""
        kinds = dict.fromkeys(r["predicted_kind"] for r in self.val[self.ks[0]])
        return {kind: choose_k({k: mean_of([r for r in self.val[k] if r["predicted_kind"] == kind], CHOICE_FIELD)
                                for k in self.ks}) for kind in kinds}

    def per_kind_records(self, split: str) -> list[dict]:
        """Each question's record at the k of its predicted kind (the single k for a kind val never predicted)."""
        records, ks = getattr(self, split), self.k_per_kind
        return [records[ks.get(r["predicted_kind"], self.k)][i] for i, r in enumerate(records[self.ks[0]])]

    def choices(self) -> list[Choice]:
        """The single-k choice, then the one-k-per-predicted-kind choice."""
        return [Choice.of(self.name, self.k, self.val[self.k], self.test[self.k]),
                Choice.of(f"{self.name}, k per predicted kind", self.k_per_kind, self.per_kind_records("val"),
                          self.per_kind_records("test"))]

    def as_dict(self) -> dict:
        single, per_kind = self.choices()
        return {**single.as_dict(), "val_by_k": self.val_by_k, "test_by_k": self.test_by_k,
                "k_per_kind": per_kind.as_dict()}


@dataclass(frozen=True)
class Choice:
    """A baseline at its val-chosen k (an int, or predicted kind -> k): its val reward (what it was chosen on), its
    test figure (`test_reward`: exact match), the reward's test score beside it and its test figures per question
    kind (`summarize_by_kind`)."""

    name: str
    k: int | dict[str, int]
    val_reward: float
    test_reward: float
    test_reward_model: float
    """The config's reward on test (under a reward model, its score; `reward_model_gap` is this - `test_reward`)."""
    by_kind: dict[str, dict[str, float]]

    @classmethod
    def of(cls, name: str, k: int | dict[str, int], val: list[dict], test: list[dict]) -> Choice:
        """The choice read from its val and test records."""
        return cls(name, k, mean_of(val, CHOICE_FIELD), mean_of(test, TEST_FIELD), mean_of(test, CHOICE_FIELD),
                   summarize_by_kind(test))

    @property
    def reward_model_gap(self) -> float:
        return self.test_reward_model - self.test_reward

    def as_dict(self) -> dict:
        return {"name": self.name, "k": self.k, "val_reward": self.val_reward, "test_reward": self.test_reward,
                "test_reward_model": self.test_reward_model, "by_kind": self.by_kind}


def best_fixed(baselines: Sequence[FixedBaseline]) -> FixedBaseline:
    """The baseline with the best val reward at its single chosen k (the first on a tie)."""
    return max(baselines, key=lambda b: b.val_reward)


def best_training_free(baselines: Sequence[FixedBaseline]) -> Choice:
    """The choice (single k or k per predicted kind) with the best val reward over every baseline but the
    oracle: the pipeline a practitioner would ship. On a tie the first, the single k before the per-kind ks."""
    return max((c for b in baselines if b.name != ORACLE for c in b.choices()), key=lambda c: c.val_reward)


@dataclass(frozen=True)
class Rankings:
    """Per split, each question's ranked documents, for one baseline."""

    name: str
    hits: dict[str, list[list[Hit]]]


@dataclass(frozen=True)
class TrainingFree:
    """Every baseline of this module, ground then rank at every weight (per grounding and candidates), and each
    text query form's query for every test question (question id -> query)."""

    baselines: list[FixedBaseline]
    grounded: list[FixedBaseline]
    test_queries: dict[str, dict[str, str]]


def training_free_baselines(pipeline: LocalPipeline, train: list[Question], val: list[Question],
                            test: list[Question], max_k: int | None = None,
                            evaluated_k: int | None = None) -> TrainingFree:
    """Every baseline of this module with k chosen among 0..`max_k` (default `reranker.max_docs`). Records are kept
    for every k up to `evaluated_k` (default `max_k`), so a wider choice (`FixedBaseline.max_k`) can be read
    without running again."""
    max_k = pipeline.cfg.reranker.max_docs if max_k is None else max_k
    ks = tuple(range(max(max_k, evaluated_k or 0) + 1))
    splits = {"val": decoded(val), "test": decoded(test)}
    predicted = kind_predictions(train, splits)
    read: dict[tuple, dict[str, float]] = {}
    score = lambda rankings: scored(pipeline, rankings, splits, predicted, ks, max_k, read)  # noqa: E731
    responses = {split: captions(pipeline, questions) for split, questions in splits.items()}
    sighted = pipeline.reranker.visual_reader is not None
    sights = {split: sight_descriptions(pipeline, qs) for split, qs in splits.items()} if sighted else {}
    bm25 = BM25Index.from_kb(pipeline.cfg.data.dir)
    top_k = pipeline.cfg.index.top_k
    retrieved: list[Rankings] = []
    test_queries = {}
    for form in (*TEXT_FORMS, SIGHT_FORM) if sighted else TEXT_FORMS:
        texts = {split: query_texts(form, questions, (sights if form == SIGHT_FORM else responses)[split])
                 for split, questions in splits.items()}
        test_queries[form] = {q.id: text for q, text in zip(splits["test"], texts["test"])}
        dense = {split: dense_hits(pipeline, texts[split]) for split in splits}
        lexical = {split: bm25.search(texts[split], top_k) for split in splits}
        fused = {split: [reciprocal_rank_fusion(pair, top_k) for pair in zip(dense[split], lexical[split])]
                 for split in splits}
        retrieved += [Rankings(f"dense: {form}", dense), Rankings(f"bm25: {form}", lexical),
                      Rankings(f"rrf: {form}", fused)]
    pictured = {split: image_hits(pipeline, questions) for split, questions in splits.items()}
    retrieved.append(Rankings("image", pictured))
    baselines = [score(rankings) for rankings in retrieved]
    shipped = best_fixed(baselines)
    rankings_of = {b.name: r for b, r in zip(baselines, retrieved)}
    dense_best = best_fixed([b for b in baselines if b.name.startswith("dense: ")])
    grounded = []
    for candidates in (rankings_of[name] for name in dict.fromkeys([shipped.name, dense_best.name])):
        grounded += ground_by_image(score, candidates, pictured)
        if sighted:
            grounded += ground_by_eye(pipeline, score, candidates, splits, sights)
    by_grounding: dict[str, list[FixedBaseline]] = {}
    for baseline in grounded:
        by_grounding.setdefault(baseline.name.split(",")[0], []).append(baseline)
    oracle = {split: oracle_records(pipeline, questions, predicted[split]) for split, questions in splits.items()}
    return TrainingFree([*baselines, *(best_fixed(family) for family in by_grounding.values()),
                         fixed_at(shipped, 0, "never-retrieve"),
                         fixed_at(shipped, max_k, f"always-retrieve ({shipped.name}, top {max_k})"),
                         FixedBaseline(ORACLE, oracle["val"], oracle["test"])], grounded, test_queries)


def decoded(questions: list[Question]) -> list[Question]:
    """The questions with their images decoded once: every ranking and k reads them again."""
    return [replace(q, image_source=q.image) for q in questions]


def kind_predictions(train: list[Question], splits: dict[str, list[Question]]) -> dict[str, list[str]]:
    """Per split, each question's kind as predicted by a `KindClassifier` fitted on `train`."""
    classifier = KindClassifier(train)
    return {split: classifier.predict([q.question for q in questions]) for split, questions in splits.items()}


def scored(pipeline: LocalPipeline, rankings: Rankings, splits: dict[str, list[Question]],
           predicted: dict[str, list[str]], ks: Sequence[int], max_k: int,
           read: dict[tuple, dict[str, float]]) -> FixedBaseline:
    """The top k of each ranking for every k of `ks`, on val and test, each record with its predicted kind (`read`:
    the scores of evidence already read, `records_by_k`)."""
    records = {}
    for split, questions in splits.items():
        records[split] = records_by_k(pipeline, questions, rankings.hits[split], ks, read)
        for rows in records[split].values():
            for row, kind in zip(rows, predicted[split]):
                row["predicted_kind"] = kind
    return FixedBaseline(rankings.name, records["val"], records["test"], max_k)


def ground_by_eye(pipeline: LocalPipeline, score: Callable[[Rankings], FixedBaseline], candidates: Rankings,
                  splits: dict[str, list[Question]], sights: dict[str, list[str]]) -> list[FixedBaseline]:
    """`candidates` reranked by the prior (retrieval score + cos(passage, what the eye sees)) plus w x the summed
    word match of the attribute words the eye reads, one baseline per w of `GROUNDING_WEIGHTS`."""
    readings = {split: visual_readings(pipeline, questions) for split, questions in splits.items()}
    priors = {split: sight_scores(pipeline, candidates.hits[split], sights[split]) for split in splits}
    matches = {split: word_match_scores(pipeline, candidates.hits[split], readings[split]) for split in splits}
    return [score(Rankings(f"ground (eye) then rank {candidates.name}, w {weight:g}", {
        split: reorder(candidates.hits[split], [p + weight * m for p, m in zip(priors[split], matches[split])])
        for split in splits})) for weight in GROUNDING_WEIGHTS]


def ground_by_image(score: Callable[[Rankings], FixedBaseline], candidates: Rankings,
                    pictured: dict[str, list[list[Hit]]]) -> list[FixedBaseline]:
    """`candidates` reranked by retrieval score + w x the share of the identified entry's name words (the title
    of the question image's top image-retrieval hit) each passage contains, one baseline per w."""
    matches = {split: [name_match(row, image_row[0].title if image_row else "")
                       for row, image_row in zip(candidates.hits[split], pictured[split])] for split in pictured}
    return [score(Rankings(f"ground (image embedding) then rank {candidates.name}, w {weight:g}", {
        split: reorder(candidates.hits[split], [np.array([h.score for h in row]) + weight * match
                                                for row, match in zip(candidates.hits[split], matches[split])])
        for split in pictured})) for weight in GROUNDING_WEIGHTS]


def name_match(row: list[Hit], name: str) -> np.ndarray:
    """Per hit, the share of `name`'s words found among the hit's title and text words."""
    wanted = set(tokens(name))
    if not wanted:
        return np.zeros(len(row))
    return np.array([len(wanted & set(tokens(f"{hit.title} {hit.text}"))) / len(wanted) for hit in row])


def captions(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    """The untrained translator's greedy response to each question (its query without the template)."""
    responses = []
    for start in range(0, len(questions), BATCH):
        batch = questions[start:start + BATCH]
        queries = pipeline.translate_greedy(QuestionTable.of(batch))
        responses.extend(pipeline.translator.responses([q.image for q in batch], [q.question for q in batch], queries))
    return responses


def query_texts(form: str, questions: list[Question], responses: list[str]) -> list[str]:
    """The text query of a form, one per question; `responses` are the captions, or for `sight+question` the
    `sight_descriptions`."""
    forms: dict[str, Callable[[Question, str], str]] = {
        "question": lambda q, caption: q.question,
        "caption": lambda q, caption: caption,
        "caption+question": lambda q, caption: f"{caption} {question_in_query(q.question)}",
        "sight+question": lambda q, sight: f"{sight} {question_in_query(q.question)}",
    }
    if form not in forms:
        raise ValueError(f"query form {form!r}: expected one of {sorted(forms)}")
    return [forms[form](q, caption) for q, caption in zip(questions, responses)]


def sight_descriptions(pipeline: LocalPipeline, questions: list[Question]) -> list[str]:
    """What the reranker's visual reader sees in each question image, in its backbone's wording."""
    descriptions = []
    for start in range(0, len(questions), BATCH):
        descriptions.extend(pipeline.reranker.seen_descriptions([q.image for q in questions[start:start + BATCH]]))
    return descriptions


def dense_hits(pipeline: LocalPipeline, texts: list[str]) -> list[list[Hit]]:
    """The top-K documents (`index.top_k`) of each text query through the encoder's text tower."""
    return _searched(pipeline, pipeline.encoder.encode_texts, texts)


def image_hits(pipeline: LocalPipeline, questions: list[Question]) -> list[list[Hit]]:
    """The top-K documents of each question image through the encoder's image tower."""
    return _searched(pipeline, pipeline.encoder.encode_images, [q.image for q in questions])


def _searched(pipeline: LocalPipeline, encode: Callable, queries: list) -> list[list[Hit]]:
    hits = []
    for start in range(0, len(queries), BATCH):
        hits.extend(pipeline.retriever.search(encode(queries[start:start + BATCH]), pipeline.cfg.index.top_k))
    return hits


def sight_scores(pipeline: LocalPipeline, hits: list[list[Hit]], sights: list[str]) -> list[np.ndarray]:
    """Per row, the untrained reranker's prior of each hit: retrieval score + cos(document text, sight)."""
    encoder = pipeline.reranker.encoder
    scores = []
    for row, sight in zip(hits, encoder.encode_texts(sights)):
        texts = encoder.encode_texts([hit.text for hit in row]) if row else np.zeros((0, len(sight)))
        scores.append(np.array([hit.score for hit in row]) + texts @ sight)
    return scores


def visual_readings(pipeline: LocalPipeline, questions: list[Question]) -> list[dict[str, str]]:
    """What the reranker's visual reader reads in each question image."""
    readings = []
    for start in range(0, len(questions), BATCH):
        readings.extend(pipeline.reranker.visual_reader.read([q.image for q in questions[start:start + BATCH]]))
    return readings


def word_match_scores(pipeline: LocalPipeline, hits: list[list[Hit]],
                      readings: list[dict[str, str]]) -> list[np.ndarray]:
    """Per row, each hit's word match (`mmrag.models.word_match`) summed over the attributes."""
    matcher = pipeline.reranker.word_matcher
    return [matcher.match([reading], [[hit.text for hit in row]], len(row))[0].sum(dim=-1).numpy()
            for row, reading in zip(hits, readings)]


def reorder(hits: list[list[Hit]], scores: list[np.ndarray]) -> list[list[Hit]]:
    """Each row by descending score (ties in retrieval order)."""
    return [[row[j] for j in np.argsort(-score, kind="stable")] for row, score in zip(hits, scores)]


def fixed_at(baseline: FixedBaseline, k: int, name: str) -> FixedBaseline:
    """`baseline` with its k fixed (no choice left to val)."""
    return replace(baseline, name=name, val={k: baseline.val[k]}, test={k: baseline.test[k]}, max_k=None)


def oracle_records(pipeline: LocalPipeline, questions: list[Question], predicted: list[str]) -> dict[int, list[dict]]:
    """Records with exactly the gold documents as evidence, under k = -1 ("all the gold ones")."""
    gold = gold_doc_hits(pipeline.cfg.data.dir, {d for q in questions for d in q.gold_doc_ids})
    hits = [[gold[d] for d in q.gold_doc_ids] for q in questions]
    longest = max((len(row) for row in hits), default=0)
    records = records_by_k(pipeline, questions, hits, ks=(longest,))[longest]
    return {-1: [{**record, "predicted_kind": kind} for record, kind in zip(records, predicted)]}
