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
    """Synthetic generator: `v2` (knowledge demand varying by question kind), `v3` (demand set by the pictured
    entity, not the question's wording; misleading passages; the `local-v3` preset) or `v1` (one-fact questions)."""
    entities: int = 320
    """Synthetic generator: number of entities; a tenth of them, with their questions, form each held-out split."""
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
    """Candidates the retrieval router returns per query, merged over shards (what the reranker chooses from)."""
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
    `{question}` the question lower-cased, `{seen}` what `visual_reader` reads in the question image, in words."""
    visual_reader: str = "zoo:visual-reader"
    """Frozen eye whose reading fills the query template's `{seen}` (the grounded generator's,
    `generator.visual_reader`); loaded only for a template with `{seen}`, which needs one."""
    train_vision_tower: bool = False
    """Fine-tune the LVLM's vision tower too (full fine-tuning only; LoRA never adapts it)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Optional LoRA adapter."""
    num_samples: int = 4
    """N: queries sampled per question during training."""
    empty_sibling: bool = True
    """During training, make each question's last sampled response the empty one, so DPO can prefer the query
    template without the LVLM's words (which a small translator rarely samples)."""
    temperature: float = 0.5
    """Sampling temperature of the translator's queries during training."""
    max_new_tokens: int = 16
    """Longest query, in tokens."""
    lr: float = 3e-4
    """Learning rate of the translator."""
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
    """Checkpoint of that backbone (tag, path or `zoo:NAME`); the retriever's (`encoder.pretrained`) by default."""
    visual_reader: str = "zoo:visual-reader"
    """Frozen eye the reranker reads the question image with (empty: none); what it reads, embedded by the
    backbone's text tower, is compared with each candidate (`mmrag.models.similarity_head`)."""
    backbone: Literal["frozen", "lora"] = "frozen"
    """Keep the CLIP backbone frozen, or tune LoRA adapters on its text tower."""
    head: Literal["similarity", "mlp", "cross_attention"] = "similarity"
    """Trainable scoring head: `similarity` reads relations (similarities, score gaps, ranks, the question text);
    `mlp` and `cross_attention` read the raw CLIP vectors."""
    hidden_dim: int = 128
    """Width of the head."""
    score_temperature: float = 0.05
    """Retrieval scores are divided by this (about 1 / CLIP logit scale) before the head's correction is added."""
    lora_rank: int = 8
    """`backbone: lora`: LoRA rank r on the text tower's MLP layers (c_fc, c_proj)."""
    lora_alpha: int = 16
    """`backbone: lora`: LoRA scaling alpha."""
    max_docs: int = 8
    """Most documents a selection may keep (STOP is forced after this many)."""
    gate: bool = True
    """A retrieval gate ahead of the ranking (`mmrag.models.reranker_head.RetrievalGate`): greedy keeps nothing
    where its skip probability exceeds 1/2; training fits it to the better of its two arms
    (`mmrag.rl.losses.gate_loss`)."""
    gate_skip_prior: OpenProbability = 0.15
    """`gate`: the untrained gate's probability of keeping nothing, whatever the question. Below 1/2, so an
    untrained reranker's greedy selection is the same with a gate as without."""
    gate_lr: pydantic.PositiveFloat | None = 0.03
    """`gate`: the gate's own learning rate; None: `lr`."""
    num_samples: int = 8
    """M: selections sampled per translator query during training."""
    temperature: float = 1.0
    """Plackett-Luce sampling temperature during training."""
    lr: float = 6e-3
    """Learning rate of the reranker's head."""
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
    min_answered: float = 0.95
    """Training stops when fewer than this share of the last `guard_window` rewards came back finite."""
    guard_window: int = 512
    """Rewards the reward-service guard looks at (their answered share; whether they stopped varying); 0: off."""


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
    method: Literal["reward-backprop", "component-level"] = "reward-backprop"
    """`reward-backprop`: the rollout-tree trainer; `component-level`: the paper's contrast, each component fitted
    on its own gold labels (`mmrag.training.component_level`), in one process."""
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
    doc_cost: NonNegativeFloat = 0.02
    """Price of each document a selection keeps, subtracted from its leaf's value in credit assignment (never from a
    reported reward): among selections that answer alike, the one keeping fewer documents wins."""
    gate_gap_unit: pydantic.PositiveFloat | None = 0.02
    """With `reranker.gate`: a gap between the gate's arms' values of at least this much weighs fully in its loss, a
    smaller one in proportion; None weighs each query by the gap itself."""
    max_policy_lag: int = 1
    """Most policy versions a rollout may lag the learner; 0 is synchronous. With L, up to L batches are rolled
    out while the learner trains (distributed mode; `local-reference` always runs with 0)."""
    micro_batch_size: int = 2
    """Questions per rollout micro-batch: the unit that streams through the stage pools."""
    importance_ratio_cap: float = 2.0
    """Truncation constant of the off-policy importance weight (>= 1; on-policy examples always weigh 1)."""
    behaviour_kl_coef: NonNegativeFloat = 0.03
    """Weight of a trust region on the reranker's off-policy updates, mean (log pi_now - log pi_behaviour)^2 / 2
    over its examples (`mmrag.rl.losses.behaviour_kl_penalty`); exactly 0 on-policy; 0 turns it off."""
    checkpoint_every: int = 50
    """Save a resumable checkpoint every this many steps (0: only at the end)."""
    eval_every: int = 25
    """Evaluate greedily on held-out questions every this many steps."""
    preemption_grace_s: float = 120.0
    """After SIGTERM (a node about to be reclaimed), how long `mmrag train` may take to reach the next step boundary
    and checkpoint there; past it, it exits on the latest complete checkpoint. Either way with status 0."""
    export: Literal["last", "best_val"] = "best_val"
    """What RUN_DIR/export holds: the last step's weights, or (`best_val`) those of the evaluation with the best
    held-out (val) reward; export.json's `version` names the step exported."""
    eval_questions: int = 64
    """Held-out (val) questions per evaluation, taken at even strides over the split (so from many entities)."""
    loggers: list[Literal["tensorboard", "wandb", "mlflow"]] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers beside metrics.jsonl: each gets every step's scalars and, at each evaluation, a sample of
    held-out rollouts (`trackers` section). wandb and mlflow need the extras `mmrag[wandb]`, `mmrag[mlflow]`."""


@dataclass
class ExperimentalConfig:
    """Ablations and controls the research benchmarks switch: not part of the method; may change or go."""

    credit: Literal["tree", "shared"] = "tree"
    """Credit assignment: `tree`, reward backpropagation up the rollout tree (each node against its siblings);
    `shared`, the ablation where every component gets its leaves' raw reward minus the batch mean."""
    shuffle_rewards: bool = False
    """Control: permute each leaf's reward and document price together across the batch before backprop."""
    off_policy_correction: bool = True
    """Weight reranker examples drawn by an older policy version by their truncated importance ratio; false: the
    ablation without it."""


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
    call_timeout_factor: float = 4.0
    """An update's tighter deadline: this many times the median of the recent updates' seconds, within
    [`min_call_timeout_s`, `call_timeout_s`] (the first update after a start gets `call_timeout_s`); 0: off."""
    min_call_timeout_s: float = 30.0
    """Floor of the update's tighter deadline (`call_timeout_factor`), in seconds."""
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
    sync_check_every: NonNegativeInt = 1
    """Every this many versions, learner and each policy replica score a fixed probe batch with the version; past
    `sync_check_tolerance` the replica reinstalls it from the run's storage, then leaves its pool; 0: never."""
    sync_check_tolerance: float = 1e-2
    """Largest absolute difference of a probe score (a sequence log-prob, a reranker logit) taken as the same."""
    sync_timeout_s: float = 60.0
    """Deadline of joining a weight-sync group or of one version's broadcast, and the groups' collective timeout:
    a replica restarted since the group was built leaves rank 0 waiting this long, then the group is rebuilt."""
    spare_ranks: NonNegativeInt = 0
    """Rank processes started ahead and kept idle, each holding a rank's bundle: a restore takes them as its new
    ranks instead of waiting for new processes to start."""
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
    anyway after `max_failed_batches` rollout attempts in a row fail."""
    max_failed_batches: int = 3
    """Rollout attempts failing in a row that stop the run (an actor that cannot work, not a bad batch); a failed
    batch is rolled out once more, then skipped."""
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
    """Encoded bytes from which an image several deployments read goes to the object store once (else, with each
    call)."""
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
    experimental: ExperimentalConfig = field(default_factory=ExperimentalConfig)


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
