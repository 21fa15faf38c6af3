"""Typed configuration: one dataclass per pipeline stage, loaded strictly from YAML.

Every entry point reads a `Config` with `load_config(path, overrides)`. Unknown keys,
wrong types and values outside a field's allowed set are rejected with the full key
path (`train.dpo_beta: expected float, got 'abc'`), so a typo never silently falls
back to a default. `--set a.b=value` overrides are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


_SCIENTIFIC = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a `Config`."""


@dataclass
class DataConfig:
    dir: str = "runs/data"
    """Dataset directory: kb.parquet and questions_{train,val,test}.parquet."""
    entities: int = 120
    """Synthetic generator: number of entities (local mode)."""
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
    pretrained: str = "zoo:tiny-clip"
    """open_clip pretrained tag, a checkpoint path, or `zoo:NAME`."""
    batch_size: int = 64
    """Texts or images encoded per forward pass."""
    num_gpus: float = 0.0
    """GPUs for each encoder actor (fractions allowed); 0 runs on CPU."""


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
    top_k: int = 10
    """Candidates returned by the router for each query."""
    shard_num_cpus: float = 0.5
    """CPUs reserved by each RetrievalShard actor."""
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
    model: str = "zoo:tiny-lvlm-captioner"
    """HF id, local path or `zoo:NAME` of the LVLM that writes search queries."""
    prompt_template: str = "{question} Search query:"
    """User prompt; `{question}` is replaced by the question."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Optional LoRA adapter."""
    num_samples: int = 4
    """N: queries sampled per question during training."""
    temperature: float = 1.0
    """Sampling temperature during training."""
    max_new_tokens: int = 16
    """Longest query, in tokens."""
    lr: float = 1e-4
    """Learning rate."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype (bf16 on GPU presets)."""
    num_gpus: float = 0.0
    """GPUs for each translator replica."""


@dataclass
class RerankerConfig:
    backbone_name: str = "mmrag-tiny-clip"
    """open_clip model whose features the reranker head reads."""
    backbone_pretrained: str = "zoo:tiny-clip"
    """Checkpoint of that backbone (tag, path or `zoo:NAME`)."""
    backbone: Literal["frozen", "lora"] = "frozen"
    """Keep the CLIP backbone frozen, or tune LoRA adapters on it."""
    head: Literal["mlp", "cross_attention"] = "mlp"
    """Trainable scoring head over query and document features."""
    hidden_dim: int = 128
    """Width of the head."""
    score_temperature: float = 0.05
    """Retrieval scores are divided by this (about 1 / CLIP logit scale) before the head's correction is added."""
    lora_rank: int = 8
    """`backbone: lora`: LoRA rank r on the text tower's MLP layers (c_fc, c_proj)."""
    lora_alpha: int = 16
    """`backbone: lora`: LoRA scaling alpha."""
    max_docs: int = 3
    """Most documents a selection may keep (STOP is forced after this many)."""
    num_samples: int = 4
    """M: selections sampled per translator query during training."""
    temperature: float = 1.0
    """Plackett-Luce sampling temperature during training."""
    lr: float = 1e-3
    """Learning rate."""
    num_gpus: float = 0.0
    """GPUs for each reranker replica."""


@dataclass
class GeneratorConfig:
    backend: Literal["extractive", "hf"] = "extractive"
    """`hf`: a frozen LVLM; `extractive`: answers only from the given documents (local mode)."""
    model: str = ""
    """HF id or path of the LVLM (`hf` backend)."""
    prompt_template: str = "Evidence:\n{evidence}\nQuestion: {question}\nAnswer briefly."
    """User prompt; `{evidence}` and `{question}` are filled in."""
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
    metric: Literal["vqa_accuracy", "exact_match", "token_f1", "relaxed"] = "relaxed"
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
    mode: Literal["local-reference", "distributed"] = "local-reference"
    """`local-reference`: the whole algorithm in one process (the yardstick trainer); `distributed`: actors on Ray."""
    run_dir: str = "runs/local"
    """Where metrics.jsonl, TensorBoard events, checkpoints and exports go."""
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
    max_policy_lag: int = 1
    """Most policy versions a rollout may lag the learner; 0 is synchronous."""
    checkpoint_every: int = 50
    """Save a resumable checkpoint every this many steps (0: only at the end)."""
    eval_every: int = 25
    """Evaluate greedily on held-out questions every this many steps."""
    eval_questions: int = 64
    """Held-out (val) questions per evaluation."""


@dataclass
class LearnerConfig:
    num_workers: int = 1
    """Ray Train workers in the learner group."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage (0-3)."""
    use_gpu: bool = False
    """One GPU per learner worker."""
    num_cpus_per_worker: float = 1.0
    """CPUs reserved by each learner worker."""
    actor_num_cpus: float = 0.5
    """CPUs reserved by each translator, reranker, encoder, generator and reward actor the driver places."""
    queue_depth: int = 1
    """Asynchronous mode: experience batches rolled out ahead of the learner (batches older than max_policy_lag are dropped)."""


@dataclass
class RayConfig:
    address: str = ""
    """Cluster address; empty joins $RAY_ADDRESS when set (a `ray job submit` job), else starts a local Ray."""
    num_cpus: int = 8
    """CPUs declared to a local Ray (may exceed the cores, to place more actors)."""


@dataclass
class ServingConfig:
    host: str = "127.0.0.1"
    """Interface the Serve HTTP proxy binds (`mmrag serve`)."""
    port: int = 8000
    """Port of the Serve HTTP proxy."""
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
    """Replicas of the translator deployment (GPUs each: `translator.num_gpus`)."""
    encoder_replicas: int = 1
    """Replicas of the query encoder deployment (GPUs each: `encoder.num_gpus`)."""
    shard_replicas: int = 1
    """Replicas of each retrieval shard deployment (GPUs each: `index.shard_num_gpus`)."""
    reranker_replicas: int = 1
    """Replicas of the reranker deployment (GPUs each: `reranker.num_gpus`)."""
    generator_replicas: int = 1
    """Replicas of the generator deployment (GPUs each: `generator.num_gpus`)."""
    ingress_replicas: int = 1
    """Replicas of the HTTP ingress deployment (validation and stage orchestration, no model)."""
    replica_num_cpus: float = 0.5
    """CPUs reserved by each replica of every deployment."""
    max_ongoing_requests: int = 32
    """Requests one replica works on at once (at least `max_batch_size`, so batches can fill)."""
    max_batch_size: int = 8
    """Most requests one `@serve.batch` call of a model deployment groups together."""
    batch_wait_timeout_s: float = 0.005
    """How long a model deployment waits to fill a batch before running a partial one."""


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
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp`, converting only int -> float."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{path}: expected one of {list(allowed)}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, path)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return [_coerce(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        # YAML 1.1 reads "3e-4" (no dot in the mantissa) as a string; accept what is plainly a number.
        if isinstance(value, str) and _SCIENTIFIC.match(value):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp in (str, bool):
        if isinstance(value, tp):
            return value
    else:
        raise ConfigError(f"{path}: unsupported annotation {tp!r}")
    raise ConfigError(f"{path}: expected {tp.__name__}, got {value!r}")


def _build(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        where = path or "config"
        raise ConfigError(f"{where}: expected a mapping of keys for {cls.__name__}, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise ConfigError(f"{key}: unknown key (valid keys here: {', '.join(names)})")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(value, hints[name], f"{path}.{name}" if path else name)
    return cls(**kwargs)


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
        node[parts[-1]] = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from None


def config_from_dict(data: dict, overrides: list[str] = ()) -> Config:
    """Build a `Config` from a plain mapping plus `a.b=value` overrides."""
    tree = dict(data)
    for assignment in overrides:
        _set_override(tree, assignment)
    return _build(Config, tree, "")


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
            data = yaml.safe_load(text) or {}
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
    """Plain mapping of a config, for saving beside a run and for `--print-config`."""
    return dataclasses.asdict(cfg)
