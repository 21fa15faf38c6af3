"""Typed configuration: one dataclass per pipeline stage, loaded strictly from YAML.

Every entry point reads a `Config` with `load_config(path, overrides)`. The defaults
written here are the local scenario (mmrag/configs/local.yaml adds only its paths). Pydantic
validates the plain dataclasses: unknown keys, wrong types and values outside a field's
allowed set are rejected with the full key path (`train.dpo_beta: expected float, got
'abc'`), so a typo never silently falls back to a default. `--set a.b=value` overrides
are parsed as YAML scalars; "3e-4" is a float, as in YAML 1.2.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml


NonNegativeInt = Annotated[int, pydantic.Field(ge=0)]
"""A count that may be 0 (a negative one is refused naming its key)."""
NonNegativeFloat = Annotated[float, pydantic.Field(ge=0)]
"""A price or weight that may be 0 (a negative one is refused naming its key)."""
OpenProbability = Annotated[float, pydantic.Field(gt=0, lt=1)]
"""A probability strictly between 0 and 1 (one at either end is refused naming its key)."""


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a `Config`."""


@dataclass
class DataConfig:
    dir: str = "runs/data"
    """Dataset directory: kb.parquet and questions_{train,val,test}.parquet."""
    world: Literal["v1", "v2", "v3"] = "v2"
    """Synthetic generator: `v2` (varying knowledge demand, a KB in its own wording), `v3` (demand the question's
    wording does not reveal, misleading passages; mmrag/configs/local-v3.yaml) or `v1` (the old figures' world)."""
    entities: int = 320
    """Synthetic generator: number of entities (local mode); 320 gives 650 test questions from 65 entities in v2
    (195 visual, 325 one-fact, 130 two-fact), 520 one-fact ones from 65 entities in v1."""
    seed: int = 0
    """Synthetic generator: seed; the same seed writes byte-identical data."""
    image_size: int = 64
    """Synthetic generator: side of the square images, in pixels."""


@dataclass
class ZooConfig:
    cache_dir: str = "~/.cache/mmrag/zoo"
    """Where tiny offline models are built once and reused (`zoo:NAME` references)."""
    seed: int = 0
    """Seed for building and fitting the tiny models."""


@dataclass
class EncoderConfig:
    model_name: str = "mmrag-tiny-clip"
    """open_clip model name (a registered config, e.g. ViT-L-14 or the zoo's tiny one)."""
    pretrained: str = "zoo:tiny-clip-v2"
    """open_clip pretrained tag, a checkpoint path, or `zoo:NAME`."""
    batch_size: int = 64
    """Texts or images encoded per forward pass."""
    num_gpus: float = 0.0
    """GPUs for each encoder actor (fractions allowed); 0 runs on CPU."""
    num_replicas: int = 1
    """Query encoder actors in distributed mode."""


@dataclass
class IndexConfig:
    dir: str = "runs/index"
    """Where the FAISS shards, doc stores and manifest are written."""
    num_shards: int = 2
    """Number of FAISS shards (one RetrievalShard actor each)."""
    index_type: Literal["flat", "ivf", "hnsw", "ivfpq"] = "flat"
    """FAISS index per shard; inner product over normalised vectors (ivfpq: IVF with product-quantised codes)."""
    ivf_nlist: int = 64
    """IVF, IVF-PQ: clusters per shard (fewer when the shard has under 39 training vectors per cluster)."""
    ivf_nprobe: int = 8
    """IVF, IVF-PQ: clusters visited per query."""
    hnsw_m: int = 32
    """HNSW: graph degree."""
    hnsw_ef_search: int = 64
    """HNSW: search beam width."""
    fusion: Literal["mean", "text", "image"] = "mean"
    """Embedding of a document with both text and image: normalised mean, or one side only."""
    on_bad_row: Literal["error", "skip"] = "error"
    """A KB row with a missing field or undecodable image: fail naming it, or skip and count it."""
    part_rows: int = 4096
    """`mmrag index`: KB rows per part, the unit a worker embeds and persists (whole Parquet row groups)."""
    use_gpu: bool = True
    """Move shards to GPU FAISS when faiss sees a GPU (ignored on CPU-only faiss)."""
    top_k: int = 50
    """Candidates returned by the router for each query. 50 on world v2: the untrained query finds the gold passage
    of 88 % of val's one-fact questions in the top 20 and 95 % in the top 50, both of a two-fact question's for 69 %
    and 84 %; once the reranker can tell the pictured entity's passages apart (`mmrag.models.word_match`) recall is
    what limits it (val 0.80-0.83 at 20, 0.83-0.86 at 50; docs/LEARNING.md)."""
    shard_num_cpus: float = 0.5
    """CPUs reserved by each RetrievalShard actor."""
    shard_replicas: int = 1
    """RetrievalShard actors per shard in distributed training, each loading the whole shard: with 2, a shard's
    searches go to the sibling while Ray restarts a dead or hung one."""
    shard_num_gpus: float = 0.0
    """GPUs for each RetrievalShard actor (fractions allowed); with use_gpu its index moves to GPU FAISS."""
    pq_m: int = 16
    """IVF-PQ: sub-quantizers per vector (code bytes per vector at 8 bits); must divide the vector dimension."""
    pq_nbits: int = 8
    """IVF-PQ: bits per sub-quantizer code (lowered on shards too small to train 2**bits centroids)."""
    train_sample: int = 100000
    """IVF / IVF-PQ: vectors per shard, spread evenly over it, that train the clusters and codebooks."""
    num_workers: int = 2
    """`mmrag index`: encoder workers embedding the KB (a Ray Data actor pool; `--local` embeds in-process)."""
    worker_num_cpus: float = 1.0
    """`mmrag index`: CPUs reserved by each encoder worker and each shard-writing task (GPUs: encoder.num_gpus)."""
    keep_embeddings: bool = True
    """`mmrag index`: keep the per-part embeddings after a build, so new index settings need no re-embedding."""


@dataclass
class LoraConfig:
    enabled: bool = False
    """Train a PEFT LoRA adapter instead of the full model."""
    rank: int = 8
    """LoRA rank r."""
    alpha: int = 16
    """LoRA scaling alpha."""
    dropout: float = 0.0
    """LoRA dropout."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    """Module names that receive adapters."""


@dataclass
class TranslatorConfig:
    model: str = "zoo:tiny-lvlm-captioner-v2"
    """HF id, local path or `zoo:NAME` of the LVLM that writes search queries."""
    prompt_template: str = "{question} Search query:"
    """User prompt; `{question}` is replaced by the question."""
    query_template: str = "{seen} {response} {question}"
    """The search query built from the LVLM's response: `{response}` is what the LVLM writes (what DPO trains),
    `{question}` the question lower-cased without its trailing "?", `{seen}` what `visual_reader` sees in the
    question image, in words. "{response}" makes the response the query. `{seen}` first: the reader's eye starts
    the query and the translator's response extends it. World v2's val (640 questions), untrained, top 5 reordered
    by sight: 0.652 for this template, 0.659 with `{seen}` after the response, 0.556 for the template before it
    ("{response} {question}"), 0.686 for `{seen} {question}` with no response (docs/LEARNING.md)."""
    visual_reader: str = "zoo:visual-reader"
    """Frozen eye whose reading fills the query template's `{seen}` (the grounded generator's,
    `generator.visual_reader`); loaded only for a template with `{seen}`, which needs one."""
    train_vision_tower: bool = False
    """Fine-tune the LVLM's vision tower too (full fine-tuning only; LoRA never adapts it). Off by default: DPO on
    query rewards alone made the tiny translator lose its eye (measured, see benchmarks/RESULTS.md)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Optional LoRA adapter."""
    num_samples: int = 4
    """N: queries sampled per question during training. 8 on world v2 (60 steps, 320 val questions, seeds 0 / 1):
    val 0.525 / 0.484 against 0.491 / 0.481, recall@K 0.566 / 0.572 against 0.544 / 0.559, but seed 1 kept 3
    documents on every visual question; not a clear win at 2 seeds, about 1.6x a step: 4 stays (docs/LEARNING.md)."""
    empty_sibling: bool = True
    """During training, the last of each question's `num_samples` responses is the empty one (the query template
    without the LVLM's words), scored as a sample: DPO can then prefer writing nothing, which the tiny translator
    never samples (an empty response has log-prob -13 against -3 for the greedy one). With lr 3e-4 the translator
    alone then gains +0.06 on val (its queries fall from 17 to 12 words), without it nothing (docs/LEARNING.md).
    Its log-prob is not that of a draw: nothing weighs the translator's samples by an importance ratio."""
    temperature: float = 0.5
    """Sampling temperature during training. At 1.0 the tiny v2 translator writes token salad: its sampled queries
    found a gold passage in the top 20 for 26 % of fact questions against 70-75 % for its greedy query (0.48 at 0.7,
    0.66 at 0.5, 0.71 at 0.3; best of 4 samples 0.84 at 0.5), so rollouts trained the reranker on candidates it never
    sees at inference (docs/LEARNING.md, world v2). World v1's preset keeps 1.0, where its figures were measured."""
    max_new_tokens: int = 16
    """Longest query, in tokens."""
    lr: float = 3e-4
    """Learning rate. 3e-4 with `empty_sibling` (the default): the translator learns to write less. Without it, at
    3e-4 DPO's full fine-tuning of the tiny translator lost 0.10 val reward in 10 steps on world v1 (whose preset
    keeps 3e-5), and on world v2 1e-4 reached 0.419 against 0.491 at 3e-5 (60 steps, 320 val questions;
    docs/LEARNING.md)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype (bf16 on GPU presets)."""
    num_gpus: float = 0.0
    """GPUs for each translator replica."""
    num_replicas: int = 1
    """Translator policy replicas (actors) sampling queries in distributed mode."""


@dataclass
class RerankerConfig:
    backbone_name: str = "mmrag-tiny-clip"
    """open_clip model whose features the reranker head reads."""
    backbone_pretrained: str = "zoo:tiny-clip-v2"
    """Checkpoint of that backbone (tag, path or `zoo:NAME`). The retriever's (`encoder.pretrained`): the reranker
    reads the KB's wording with a model fitted on its world's vocabulary. Until 2026-12-01 world v2 kept v1's
    `zoo:tiny-clip`, never fitted on v2's synonyms (on v2's held-out wording it matched a query to its passage 26 %
    of the time, against 98 % for tiny-clip-v2). Switching (60 steps, val 320 questions, seeds 0-3, paired): val
    +0.014 +- 0.012; gold-label top-1 (`benchmarks/reranker_heads.py`) 0.377 -> 0.404 (docs/LEARNING.md)."""
    visual_reader: str = "zoo:visual-reader"
    """Frozen eye the reranker reads the question image with (the grounded generator's, `generator.visual_reader`;
    empty: none). What it sees, described in the backbone's wording and embedded by its text tower, is compared
    with each candidate (`mmrag.models.similarity_head`): near-duplicates differ only in texture, which tiny-clip's
    image tower barely tells apart. On val's fact questions (60 steps' worth of candidates, greedy query), the
    candidate closest to that description belongs to the pictured entity for 72 % of them, the retriever's first
    for 42 %, the candidate closest to the question image for 47 % (docs/LEARNING.md)."""
    backbone: Literal["frozen", "lora"] = "frozen"
    """Keep the CLIP backbone frozen, or tune LoRA adapters on it. Frozen by default: fitted on gold labels on world
    v2 (the similarity head, lr 6e-3), LoRA on the text tower reached val top-1 0.395 after 200 steps against the
    frozen backbone's 0.377 after 300 (retrieval order 0.300), at several times the cost (docs/LEARNING.md)."""
    head: Literal["similarity", "mlp", "cross_attention"] = "similarity"
    """Trainable scoring head. `similarity` (`mmrag.models.similarity_head`) reads only relations (query-document
    similarities, score gap, rank, redundancy) and the question text, and its STOP scorer reads the question
    text alone; `mlp` and `cross_attention` read the raw CLIP vectors (they memorise entities) and their STOP
    scorer is linear in the three query vectors."""
    hidden_dim: int = 128
    """Width of the head."""
    score_temperature: float = 0.05
    """Retrieval scores are divided by this (about 1 / CLIP logit scale) before the head's correction is added."""
    lora_rank: int = 8
    """`backbone: lora`: LoRA rank r on the text tower's MLP layers (c_fc, c_proj)."""
    lora_alpha: int = 16
    """`backbone: lora`: LoRA scaling alpha."""
    max_docs: int = 8
    """Most documents a selection may keep (STOP is forced after this many). 8 on world v2: an entity has 6 KB
    documents, and a reranker that finds the pictured entity but not yet the asked relation's passage can keep
    all of them (val 0.82-0.84 against 0.80-0.83 at 5, 120 steps; at 3 against 5 before the word match: 0.555 /
    0.570 against 0.600 / 0.610; docs/LEARNING.md). The fixed pipelines read at most 5 (`K_CHOICES`)."""
    gate: bool = True
    """A retrieval gate ahead of the ranking (`mmrag.models.reranker_head.RetrievalGate`): greedy keeps nothing
    where its skip probability exceeds 1/2, else the ranking's selection. Training takes both of its arms on every
    query (the empty selection and `num_samples` - 1 ranking draws) and fits it to the better one
    (`mmrag.rl.losses.gate_loss`). Off: STOP alone decides how many documents to keep, also none; on world v2
    (300 steps, 5 seeds, test) visual questions then keep nothing on 45 % (26-73 % over seeds), against 100 % on
    every seed with the gate, `gate_lr` 0.03 and `train.gate_gap_unit` 0.02, at the same reward (0.884 ± 0.008
    against 0.881 ± 0.010; docs/LEARNING.md, "What steadies the gate")."""
    gate_skip_prior: OpenProbability = 0.15
    """`gate`: the untrained gate's probability of keeping nothing, whatever the question. Below 1/2, so an
    untrained reranker's greedy selection is the same with a gate as without."""
    gate_lr: pydantic.PositiveFloat | None = 0.03
    """`gate`: the gate's own learning rate; None: `lr`. On world v2 (one seed, val) its mean skip probability on
    visual / one-fact questions after 80 steps: 0.12 / 0.04 at `lr`, 0.25 / 0.02 at 0.03; after 150 steps at
    0.01, 0.44 / 0.04. Visual questions then kept nothing on up to 93 % of val at some evaluations
    (docs/LEARNING.md, "The retrieval gate trained on both of its arms")."""
    num_samples: int = 8
    """M: selections sampled per translator query during training. 8 on world v2: val 0.855 / 0.865 at best
    against 0.83 / 0.84 with 4 (seed 0, 200 and 120 steps; docs/LEARNING.md)."""
    temperature: float = 1.0
    """Plackett-Luce sampling temperature during training."""
    lr: float = 6e-3
    """Learning rate. With the similarity head on world v2 (60 steps, 2 seeds, 320 val questions): 6e-3 reached
    val 0.494 / 0.481 and learned to keep nothing on visual questions (0.14 / 0.00 kept), 3e-3 0.487 / 0.459
    (0.84 / 1.77 kept); 1e-2 (an earlier variant of the head) 0.497 / 0.466, one seed collapsed to keeping 3
    everywhere (docs/LEARNING.md).
    On world v1 3e-3 overrode a good retrieval order within 50 steps (val 0.695 -> 0.562): its preset keeps 3e-4."""
    num_gpus: float = 0.0
    """GPUs for each reranker replica."""
    num_replicas: int = 1
    """Reranker policy replicas (actors) sampling selections in distributed mode."""


@dataclass
class GeneratorConfig:
    backend: Literal["grounded", "extractive", "hf"] = "grounded"
    """`hf`: a frozen LVLM; `grounded`: world v2's reader, answering from the image (its visual reader) and the
    given documents, evidence first (local mode); `extractive`: world v1's reader, documents only."""
    visual_reader: str = "zoo:visual-reader"
    """`grounded` backend: `zoo:NAME` or path of its visual reader."""
    model: str = ""
    """HF id or path of the LVLM (`hf` backend)."""
    prompt_template: str = "Evidence:\n{evidence}\nQuestion: {question}\nAnswer briefly."
    """User prompt; `{evidence}` and `{question}` are filled in."""
    max_evidence_tokens: int = 192
    """`hf` backend: evidence budget in tokens; passages past it are left out of the prompt (0: no bound)."""
    max_new_tokens: int = 16
    """Longest answer, in tokens."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype (bf16 on GPU)."""
    batch_size: int = 16
    """Prompts per generate call."""
    num_replicas: int = 1
    """GeneratorActor pool size."""
    num_gpus: float = 0.0
    """GPUs for each generator replica."""


@dataclass
class RewardConfig:
    backend: Literal["rule", "hf_classifier", "lvlm_judge"] = "rule"
    """How answers are scored; every backend returns floats in [0, 1]."""
    metric: Literal["vqa_accuracy", "exact_match", "token_f1", "relaxed"] = "exact_match"
    """`rule` backend: which answer metric."""
    model: str = ""
    """HF id or path (`hf_classifier`, `lvlm_judge`)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype of a model backend (bf16 on GPU presets)."""
    batch_size: int = 32
    """Examples scored per forward pass."""
    num_replicas: int = 1
    """RewardActor pool size."""
    num_gpus: float = 0.0
    """GPUs for each reward replica."""


@dataclass
class TrainConfig:
    mode: Literal["local-reference", "distributed"] = "distributed"
    """`distributed`: stage actor pools and a DeepSpeed learner group on Ray (a local single-node Ray if no cluster);
    `local-reference`: the same loop in one process, no Ray (the yardstick)."""
    run_dir: str = "runs/local"
    """Where metrics.jsonl, TensorBoard events, checkpoints and exports go: a path (local or NFS) or a URI,
    s3://bucket/prefix or gs://bucket/prefix (`mmrag.storage`); on a cluster, storage every node reaches."""
    resume: Literal["never", "auto", "required"] = "never"
    """Start from run_dir's latest checkpoint: never, auto (when there is one: a retried job resumes), required."""
    steps: int = 200
    """Optimiser steps."""
    questions_per_step: int = 8
    """Questions rolled out per step (each becomes N x M leaves)."""
    seed: int = 0
    """Seed for sampling, data order and initialisation."""
    train_translator: bool = True
    """Update the query translator."""
    train_reranker: bool = True
    """Update the adaptive reranker."""
    aggregate: Literal["mean", "max"] = "mean"
    """How a translator node's value aggregates its reranker children."""
    credit: Literal["tree", "shared"] = "tree"
    """Credit assignment: `tree`, reward backpropagation up the rollout tree (each node against its siblings);
    `shared`, the ablation where every component gets its leaves' raw reward minus the batch mean
    (`mmrag.rl.rollout.shared_reward_credit`; `aggregate` is then unused). On world v2 (5 seeds, 300 steps, test)
    shared ends 0.016 ± 0.005 below tree, paired, from the ranking's batch baseline (`benchmarks.credit_signal`);
    with `gate_learns_from_misses` on, level (docs/LEARNING.md)."""
    method: Literal["reward-backprop", "component-level"] = "reward-backprop"
    """`reward-backprop`: the rollout-tree trainer (`train.mode` chooses where it runs); `component-level`: the
    paper's contrast, each component fitted on its own gold labels (`mmrag.training.component_level`: the
    translator on the gold passages' texts, the reranker as a classifier of gold passages), then the number of
    documents kept chosen on val; it runs in one process whatever `train.mode` says."""
    translator_loss: Literal["dpo", "dpo_reference_free"] = "dpo"
    """Local loss for the translator."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    pair_margin: float = 0.0
    """Keep a preference pair only when the value gap exceeds this."""
    max_pairs_per_question: int = 4
    """At most this many translator pairs per question."""
    reranker_loss: Literal["pl_policy", "pairwise"] = "pl_policy"
    """Local loss for the reranker."""
    shuffle_rewards: bool = False
    """Control experiment: permute rewards across the batch before backprop."""
    doc_cost: NonNegativeFloat = 0.02
    """Price of each document a selection keeps, subtracted from its leaf's reward in credit assignment (not in
    any reported reward): with it, keeping evidence that does not change the answer loses to keeping none, as a
    generator's context costs time. 0.02 on world v2: once the reranker keeps the pictured entity's passages,
    they no longer mislead a visual question, and only the price teaches it to keep none there (val: visual
    questions keep 0.2-0.6 documents after 200 steps, against 4.8 without; docs/LEARNING.md)."""
    gate_gap_unit: pydantic.PositiveFloat | None = 0.02
    """With `reranker.gate`: a gap between the gate's arms' values of this much or more weighs fully in its loss, a
    smaller one in proportion (`mmrag.rl.losses.gate_loss`); None weighs each query by its regret, the gap. 0.02,
    one document's price (`doc_cost`): on world v2 (val, 2 seeds, 120 steps) it keeps nothing on 86-100 % of
    visual questions at every evaluation from step 20 on, where the regret's fraction swings between evaluations
    and the best-val export lands anywhere (test, 5 seeds, 300 steps: 79-100 % against 100 % on every seed). Early
    on it skips some two-fact questions too, whose every ranking draw fails; that cost is gone by 300 steps
    (docs/LEARNING.md, "What steadies the gate")."""
    gate_learns_from_misses: bool = False
    """With `reranker.gate`: whether a query none of whose leaves earns any reward gives the gate a signal. There
    both arms fail and their gap is the documents' price alone, which says nothing of which arm answers; when the
    ranking goes through a bad patch, every fact question is such a query and the gate learns to skip them (as
    DAPO drops groups whose rewards are all equal, off: those queries leave the gate alone). Off, on world v2 (5
    seeds paired, `benchmarks.gate_misses`): fact questions keeping nothing on val, at most over evaluations, 26-27 %
    -> 2 %, test +0.009 ± 0.006 (one process, 120 steps); at lag 4 (60 steps) 46-50 % -> 2-7 %, test +0.060 ±
    0.021. Off by default since 2026-12-07, with the learning benchmark re-run (5 seeds, 300 steps): test 0.902,
    every target met, two-fact questions keeping two documents on 100 % of test (96 % counted), val at the last
    step 0.862 ± 0.008 (docs/LEARNING.md, "The misses ignored by default")."""
    max_policy_lag: int = 1
    """Most policy versions a rollout may lag the learner; 0 is synchronous. With L, up to L batches are rolled
    out while the learner trains (distributed mode; `local-reference` always runs with 0)."""
    micro_batch_size: int = 2
    """Questions per rollout micro-batch: the unit that streams through the stage pools."""
    off_policy_correction: bool = True
    """Weight reranker examples drawn by an older policy version by their importance ratio min(pi_now / pi_behaviour, importance_ratio_cap); false for the ablation."""
    importance_ratio_cap: float = 2.0
    """Truncation constant of the off-policy importance weight (>= 1; on-policy examples always weigh 1)."""
    behaviour_kl_coef: NonNegativeFloat = 0.03
    """Weight of a trust region on the reranker's off-policy updates: the mean over its examples of
    (log pi_now - log pi_behaviour)^2 / 2 (`mmrag.rl.losses.behaviour_kl_penalty`), added to its loss. Exactly 0,
    gradient included, on experience drawn by the weights being trained, so synchronous and `local-reference` runs
    are unchanged by it; 0 turns it off. Chosen on val at lag 8 among 0.03, 0.1 and 1 (5 seeds, 60 steps): 0.03
    keeps every window's median ratio above 0.6, val at the last step +0.08 / +0.18 (corrected / not), test +0.006
    / +0.061; 0.1 costs 0.04 on test; 1 stops the reranker learning. At lag 4 (5 seeds): val at the last step +0.19 /
    +0.13, test +0.031 / +0.036, no collapse (4 of 30 windows without); at lag 1, the default (5 seeds): val at the
    last step +0.18 / +0.05, test +0.031 / +0.033, no collapse (3 of 30 windows without). docs/LEARNING.md, "A
    trust region against the drift"."""
    checkpoint_every: int = 50
    """Save a resumable checkpoint every this many steps (0: only at the end)."""
    eval_every: int = 25
    """Evaluate greedily on held-out questions every this many steps."""
    preemption_grace_s: float = 120.0
    """After SIGTERM (a node about to be reclaimed), how long `mmrag train` may take to reach the next step boundary
    and checkpoint there; past it, it exits on the latest complete checkpoint. Either way with status 0."""
    export: Literal["last", "best_val"] = "best_val"
    """What RUN_DIR/export holds: the last step's weights, or (`best_val`) those of the evaluation with the best
    held-out (val) reward, step 0 included, written whenever an evaluation beats every earlier one; export.json's
    `version` and `mmrag train`'s summary name the step exported. Default best_val: on world v2 a run at the default
    rates peaked at 0.448 (step 150, all 640 val questions) and was back at 0.391, the untrained figure, by step 200
    (docs/LEARNING.md). World v1's preset (and so the tests' tiny config) exports the last step, as its figures did."""
    eval_questions: int = 64
    """Held-out (val) questions per evaluation, taken at even strides over the split (so from many entities)."""
    loggers: list[Literal["tensorboard", "wandb", "mlflow"]] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers beside metrics.jsonl: each gets every step's scalars and, at each evaluation, a sample of
    held-out rollouts (`trackers` section). wandb and mlflow need the extras `mmrag[wandb]`, `mmrag[mlflow]`."""


@dataclass
class TrackersConfig:
    rollout_samples: int = 8
    """Held-out rollouts (question, query, selected titles, answer, reward) each tracker gets per evaluation."""
    wandb_project: str = "mmrag"
    """W&B project; the run is named after `train.run_dir`, and a resumed run continues the same W&B run."""
    wandb_entity: str = ""
    """W&B entity (team or user); empty: the account's default."""
    wandb_mode: Literal["", "online", "offline"] = ""
    """W&B mode; empty: $WANDB_MODE, else online. `offline` writes under RUN_DIR/wandb for `wandb sync`."""
    mlflow_tracking_uri: str = ""
    """MLflow tracking URI; empty: $MLFLOW_TRACKING_URI, else a file store in RUN_DIR/mlruns."""
    mlflow_experiment: str = "mmrag"
    """MLflow experiment the run is logged under (created when missing)."""


@dataclass
class LearnerConfig:
    num_workers: int = 1
    """Learner ranks: Ray actors, each with one DeepSpeed engine per trainable component."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage (0-3)."""
    use_gpu: bool = False
    """One GPU per learner worker."""
    num_cpus_per_worker: float = 1.0
    """CPUs reserved by each learner worker."""
    strict_pack: bool = False
    """Reserve the ranks' placement group STRICT_PACK (all on one node) rather than PACK (one node if it fits)."""
    startup_timeout_s: float = 300.0
    """Seconds a learner rank may take to be placed, then to load its models, before the group fails naming it."""
    call_timeout_s: float = 600.0
    """Deadline of every learner call after start-up (update, save, load, export, publishing weights), and the
    timeout of the ranks' process-group collectives: past it a rank counts as hung, and the group is restored."""
    durable_weights: bool = True
    """Also write every version rank 0 publishes to RUN_DIR/weights (the newest train.max_policy_lag + 2 kept), so a
    policy replica that cannot fetch it from the object store (the node holding it was lost) reads it there
    (`mmrag.training.published_weights`); off, such a call fails as if its replica were lost."""
    weight_sync: Literal["object_store", "broadcast"] = "object_store"
    """How a published version reaches the policy replicas: "object_store" (each replica fetches rank 0's copy when
    a call names the version) or "broadcast" (rank 0 also sends it, bucket by bucket, over a process group of its
    own with the translator's and the reranker's replicas, each installing it before its next call; the object
    store stays the fallback of a replica that missed it). Measured with LoRA off in benchmarks/weight_sync.py."""
    sync_bucket_mb: int = 256
    """Bucket size of the "broadcast" weight sync."""
    sync_timeout_s: float = 60.0
    """Deadline of joining a weight-sync group or of one version's broadcast, and the groups' collective timeout:
    a replica restarted since the group was built leaves rank 0 waiting this long, then the group is rebuilt."""
    spare_ranks: NonNegativeInt = 0
    """Rank processes started ahead, each holding a bundle as a rank does (`learner.num_cpus_per_worker`, a GPU with
    `use_gpu`), imported and idle: a restore takes them as its new ranks instead of waiting for new processes to
    import torch, DeepSpeed and the models' code (a restore 7.1 s -> 1.9 s, benchmarks/learner_restart.py). With
    `num_workers` of them no rank of a restore starts a process; the spares are started again after it."""
    max_restores: int = 3
    """Restores of the learner from its latest checkpoint in a row without a completed step before the run stops,
    naming the rank, the call and the last error (a failure that recurs, e.g. a batch that always runs out of
    memory, is not worth redoing forever)."""


@dataclass
class PoolsConfig:
    """The stage actors' pools (translator, encoder, retrieval shards, reranker, generator, reward)."""

    actor_num_cpus: float = 0.5
    """CPUs reserved by each translator, reranker, encoder, generator and reward actor the driver places."""
    calls_per_replica: int = 2
    """Rollout calls each stage actor holds at once (one running, the next queued behind it)."""
    max_restarts: int = -1
    """Times Ray restarts a dead stage actor (reloading its model, shard or weights); -1: always. A run stops
    anyway after `max_failed_batches` rollout batches in a row fail."""
    max_failed_batches: int = 3
    """Rollout batches failing in a row that stop the run (an actor that cannot work, not a bad batch)."""
    call_retries: int = 3
    """Times a stage call whose actor died or hung is re-dispatched (to a live replica) before its batch counts as
    failed."""
    call_timeout_s: float = 300.0
    """Deadline of one stage call: past it the replica counts as hung, is killed (Ray restarts it) and the call is
    re-dispatched; two timeouts in a row take a replica out of its pool until it answers a health check."""
    call_timeout_factor: float = 3.0
    """Tighter deadline for a replica that has answered since it (re)started: this many times its pool's median
    recent answer, at least `min_call_timeout_s` and at most `call_timeout_s` (a hung replica is found in
    seconds, not minutes); 0: always `call_timeout_s`. A replica that is starting gets `call_timeout_s`. Past it
    the replica is probed first (`probe_timeout_s`), so a tight deadline costs a busy replica a probe, not its call."""
    min_call_timeout_s: float = 2.0
    """Floor of the tighter deadline (`call_timeout_factor`)."""
    probe_timeout_s: float = 2.0
    """Past the tighter deadline a replica is probed in a thread of its own: answered within this many seconds,
    it is busy, not hung, and keeps its call (probed again a tighter deadline later, up to `call_timeout_s`); not
    answered, it is hung. 0: no probe, hung at the tighter deadline."""
    hedge_factor: float = 3.0
    """A call unanswered after this many times its pool's median recent answer is sent to a second replica too
    (one with room that has not just lost a call); the first answer wins, the slower replica is left to its
    deadline. 0: never. Needs 2 or more serving replicas (a pool of one never hedges; nor to a standby)."""
    standby_replicas: NonNegativeInt = 0
    """Extra actors per stage pool (`num_replicas` serve) and per retrieval shard (`index.shard_replicas` serve),
    started and loaded but sent no call while the serving ones are healthy: one takes a lost or hung replica's place
    at once (a promotion instead of a process start), and the lost one, once Ray has restarted it, stands by. They
    cost memory and placement, not CPU (no hedge goes to one: `mmrag.actors.pool`)."""


@dataclass
class RayConfig:
    address: str = ""
    """Cluster address; empty joins $RAY_ADDRESS when set (a `ray job submit` job), else starts a local Ray."""
    num_cpus: int = 8
    """CPUs declared to a local Ray (may exceed the cores, to place more actors)."""


@dataclass
class ServingConfig:
    host: str = "127.0.0.1"
    """Interface the HTTP front of `mmrag serve` binds."""
    port: int = 8000
    """Port of the HTTP front of `mmrag serve`."""
    max_image_bytes: int = 4_000_000
    """Largest accepted encoded image (after base64 decoding), in bytes; larger is a 413."""
    max_image_side: int = 2048
    """Largest accepted image width or height, in pixels; larger is a 413."""
    max_question_chars: int = 1000
    """Longest accepted question, in characters."""
    max_top_k: int = 50
    """Largest `options.top_k` a request may ask for (the default is `index.top_k`)."""
    snippet_chars: int = 240
    """Evidence snippets are the document text cut to this many characters."""
    translator_replicas: int = 1
    """Replicas of the deployment running `translate` (a stage group takes the largest of its stages')."""
    encoder_replicas: int = 1
    """Replicas of the deployment running `encode` (a stage group takes the largest of its stages')."""
    shard_replicas: int = 1
    """Replicas of the deployment running `retrieve` (of each shard's, when `retrieve` is a group alone)."""
    reranker_replicas: int = 1
    """Replicas of the deployment running `rerank` (a stage group takes the largest of its stages')."""
    generator_replicas: int = 1
    """Replicas of the deployment running `generate` (a stage group takes the largest of its stages')."""
    ingress_replicas: int = 1
    """Replicas of the ingress deployment (calls to the stage groups, no model; the HTTP API behind Serve's proxy)."""
    replica_num_cpus: float = 0.5
    """CPUs reserved by each replica of every deployment."""
    max_ongoing_requests: int = 96
    """Requests one replica holds at once (at least `max_batch_size`); beyond, callers queue (measured: costly)."""
    max_batch_size: int = 32
    """Most requests one `@serve.batch` call of a model deployment groups together."""
    batch_wait_timeout_s: float = 0.0
    """How long a model deployment waits to fill a batch before running a partial one (0: run what is queued)."""
    stage_groups: list[list[Literal["translate", "encode", "retrieve", "rerank", "generate"]]] = field(
        default_factory=lambda: [["translate", "encode", "retrieve", "rerank", "generate"]])
    """Stages sharing one deployment, in inference order (a group of only `retrieve`: one deployment per shard)."""
    first_group_in_ingress: bool = False
    """Run the first stage group in the ingress replicas: one hop less (`mmrag serve` retries them like any)."""
    image_reference_min_bytes: int = 102400
    """Encoded bytes from which an image several deployments read goes to the object store once (else, with each call)."""
    max_queued_requests: int = 32
    """Requests held for the ingress beyond those its replicas work on (per caller: the front, each proxy); then 503."""
    retry_after_s: int = 1
    """`Retry-After` seconds sent with every 503 (queue full, or the pipeline unavailable)."""
    request_timeout_s: float = 30.0
    """Longest a request may take past its body (retries after a replica failure included); past it, a 503."""
    body_timeout_s: float = 10.0
    """Longest the API waits for a request body to arrive in full; slower is a 408."""
    health_check_period_s: float = 2.0
    """Seconds between Serve's health checks of each replica (how soon a dead replica is replaced)."""
    graceful_shutdown_timeout_s: float = 2.0
    """Longest a stopping replica waits for its requests in flight (Serve takes it all from a model replica)."""
    api_key: str = ""
    """Bearer token every route but /healthz requires ("": $MMRAG_API_KEY if set, else none is required)."""
    model_name: str = "mmrag"
    """The model id of the OpenAI-compatible routes (`GET /v1/models`; a chat request must name it)."""


@dataclass
class Config:
    offline: bool = True
    """Set HF_HUB_OFFLINE=1: nothing is downloaded (local mode)."""
    data: DataConfig = field(default_factory=DataConfig)
    zoo: ZooConfig = field(default_factory=ZooConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    translator: TranslatorConfig = field(default_factory=TranslatorConfig)
    reranker: RerankerConfig = field(default_factory=RerankerConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    trackers: TrackersConfig = field(default_factory=TrackersConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    pools: PoolsConfig = field(default_factory=PoolsConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's YAML 1.1, which reads "3e-4" (no dot in the mantissa) as a string, plus
    YAML 1.2's rule that it is a float: a learning rate written the short way stays a number."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789."))


def _sections(cls: type) -> Iterator[type]:
    """`cls` and every section dataclass nested in it."""
    yield cls
    for hint in typing.get_type_hints(cls).values():
        if dataclasses.is_dataclass(hint):
            yield from _sections(hint)


def _section_schema(cls, source, handler):
    # Pydantic's strict mode would take only instances for a dataclass; a section read
    # from YAML is a mapping, so the section itself is lax while its fields stay strict.
    schema = handler(source)
    schema["strict"] = False
    return schema


for _section in _sections(Config):
    # Strict fields: no "7" -> 7, "yes" -> True or 2.0 -> 2; an int still widens to float.
    _section.__pydantic_config__ = pydantic.ConfigDict(extra="forbid", strict=True)
    _section.__get_pydantic_core_schema__ = classmethod(_section_schema)
_VALIDATOR = pydantic.TypeAdapter(Config)


def _annotation_at(loc: tuple) -> Any:
    """The annotation a pydantic error location points at (None if it is not a field)."""
    annotation: Any = Config
    for part in loc:
        if isinstance(part, int) and typing.get_origin(annotation) is list:
            (annotation,) = typing.get_args(annotation)
        elif isinstance(part, str) and dataclasses.is_dataclass(annotation):
            annotation = typing.get_type_hints(annotation).get(part)
        else:
            return None
    return annotation


def _expected(annotation: Any) -> str:
    if dataclasses.is_dataclass(annotation):
        return f"a mapping of keys for {annotation.__name__}"
    if typing.get_origin(annotation) is Literal:
        return f"one of {list(typing.get_args(annotation))}"
    if typing.get_origin(annotation) is list:
        return "a list"
    return getattr(annotation, "__name__", str(annotation))


def _describe(error: dict) -> str:
    """One pydantic error as `key.path: what was expected, got what`."""
    loc = error["loc"]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "config"
    if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        names = [f.name for f in dataclasses.fields(_annotation_at(loc[:-1]))]
        return f"{path}: unknown key (valid keys here: {', '.join(names)})"
    if error["type"] == "greater_than_equal":  # a bound (`NonNegativeInt`), not a type
        return f"{path}: expected at least {error['ctx']['ge']}, got {error['input']!r}"
    annotation = _annotation_at(loc)
    expected = error["msg"] if annotation is None else f"expected {_expected(annotation)}"
    return f"{path}: {expected}, got {error['input']!r}"


def _set_override(tree: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY.PATH=VALUE")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{key}: {part} is not a section")
        node = child
    try:
        node[parts[-1]] = yaml.load(raw, Loader=_YamlLoader) if raw != "" else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from None


MOVED_KEYS = {f"learner.{key}": f"pools.{key}" for key in
              ("actor_num_cpus", "calls_per_replica", "max_restarts", "max_failed_batches", "call_retries")}
"""Keys that moved to another section: a config still using the old one is refused, naming the new one."""


def _refuse_moved_keys(tree: dict) -> None:
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if isinstance(tree.get(section), dict) and key in tree[section]:
            raise ConfigError(f"{old}: moved to {new}")


def config_from_dict(data: dict, overrides: list[str] = ()) -> Config:
    """Build a `Config` from a plain mapping plus `a.b=value` overrides (`data` is left as it was)."""
    tree = copy.deepcopy(data)
    for assignment in overrides:
        _set_override(tree, assignment)
    _refuse_moved_keys(tree)
    try:
        return _VALIDATOR.validate_python(tree)
    except pydantic.ValidationError as exc:
        first, *others = exc.errors()
        more = f" (and {len(others)} more)" if others else ""
        raise ConfigError(_describe(first) + more) from None


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (None: all defaults) and apply `--set` overrides."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
        try:
            data = yaml.load(text, Loader=_YamlLoader) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or exc.__class__.__name__
            raise ConfigError(f"{path}:{where} is not valid YAML: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return config_from_dict(data, overrides)
    except ConfigError as exc:
        raise ConfigError(f"{path or 'defaults'}: {exc}") from None


def config_to_dict(cfg: Any) -> dict:
    """Plain mapping of a config, e.g. the RUN_DIR/config.json saved beside a run."""
    return dataclasses.asdict(cfg)
