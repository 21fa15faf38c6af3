"""Shared fixtures: one offline zoo cache, one small synthetic dataset, one Ray instance, one export."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from mmrag.model_refs import MODELS
from mmrag.zoo.parallel_build import build_models

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tiny models' matrices are too small to gain from threads; two threads on two
# busy cores made them ~20x slower.
torch.set_num_threads(1)

# Ray 2.60 turns token authentication on and, without a token, writes one to ~/.ray/auth_token.
# The suite makes its own, so that nothing depends on (or lands in) the home directory.
if "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ:
    _token_dir = tempfile.mkdtemp(prefix="mmrag-ray-token-")
    atexit.register(shutil.rmtree, _token_dir, ignore_errors=True)  # every Ray of the session has stopped by then
    _token_file = Path(_token_dir) / "auth_token"
    _token_file.write_text(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(_token_file)


def pytest_collection_modifyitems(items):
    """A test that starts Ray (through `ray_session`) is slow: the quick tier, `-m "not slow"`, is Ray-free."""
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def zoo_dir() -> str:
    """The zoo cache shared by every test (and by `mmrag` itself), with every model built (once, then reused).

    Built here, before any test starts an actor, so no actor's start-up timeout includes a zoo build; its
    independent chains of fits in parallel processes (2.0x faster on 2 cores: benchmarks/zoo_build.py).
    """
    path = Path(os.environ.get("MMRAG_ZOO_CACHE", "~/.cache/mmrag/zoo")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    build_models(list(MODELS), str(path))
    return str(path)


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> str:
    """A small synthetic KB-VQA dataset of world v1 (kb.parquet, questions_{train,val,test}.parquet)."""
    from mmrag.data.synth import generate_dataset

    out = tmp_path_factory.mktemp("synth")
    generate_dataset(str(out), num_entities=24, seed=0, image_size=64, world="v1")
    return str(out)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session."""
    import ray

    from mmrag.cluster.connect import RAY_SYSTEM_CONFIG

    # More logical CPUs than cores: the tests place several small actor groups at once.
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False,
             _system_config=dict(RAY_SYSTEM_CONFIG))
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_index(synth_dir, zoo_dir, tmp_path_factory) -> str:
    """A flat 2-shard index of `synth_dir`'s KB, embedded with the zoo's fitted tiny CLIP (as mmrag/configs/local-v1.yaml)."""
    from mmrag.config import load_config
    from mmrag.retrieval.build import build_index

    index_dir = tmp_path_factory.mktemp("tiny_index")
    cfg = load_config(Path(__file__).resolve().parents[1] / "mmrag/configs/local-v1.yaml", [f"zoo.cache_dir={zoo_dir}"])
    build_index(Path(synth_dir) / "kb.parquet", index_dir, cfg.index, cfg.encoder, zoo_dir, progress=False)
    return str(index_dir)


@pytest.fixture(scope="session")
def tiny_config(synth_dir, tiny_index, zoo_dir):
    """config(run_dir, *overrides): mmrag/configs/local-v1.yaml on the small synthetic world (v1) with short rollouts.

    2 questions per step, 3 queries x 4 selections each, top 12: small, yet most steps carry learning signal
    for both components (the fitted zoo models retrieve well enough for rewards to differ between siblings).
    """
    from mmrag.config import load_config

    def config(run_dir, *overrides: str):
        return load_config(Path(__file__).resolve().parents[1] / "mmrag/configs/local-v1.yaml", [
            f"data.dir={synth_dir}", f"index.dir={tiny_index}", f"zoo.cache_dir={zoo_dir}",
            f"train.run_dir={run_dir}", "translator.max_new_tokens=8", "translator.num_samples=3",
            "reranker.num_samples=4", "index.top_k=12", "train.questions_per_step=2", "train.micro_batch_size=1",
            "train.eval_questions=2", "train.eval_every=100", "train.checkpoint_every=0", "train.max_policy_lag=0",
            "train.steps=4", *overrides])

    return config


TINY_MODELS = ["encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
               "translator.model=zoo:tiny-lvlm"]
"""The untrained zoo models: what the export tests need of a model is only that it loads and answers."""

@pytest.fixture(scope="session")
def tiny_export(synth_dir, zoo_dir, tmp_path_factory):
    """(cfg, export dir, the pipeline loaded from it as evaluation loads it): the untrained translator and a
    reranker whose trainable weights are moved off their start, over an index of `synth_dir` built for them, saved
    as policy version 3 (not 0, so a loader that ignores the version shows)."""
    from mmrag.config import load_config
    from mmrag.retrieval.build import build_index
    from mmrag.training.export import save_export
    from mmrag.training.pipeline import LocalPipeline

    work = tmp_path_factory.mktemp("tiny_export")
    cfg = load_config(Path(__file__).resolve().parents[1] / "mmrag/configs/local.yaml", [
        f"data.dir={synth_dir}", f"index.dir={work / 'index'}", f"zoo.cache_dir={zoo_dir}", *TINY_MODELS])
    build_index(Path(synth_dir) / "kb.parquet", cfg.index.dir, cfg.index, cfg.encoder, zoo_dir, progress=False)
    untrained = LocalPipeline.from_config(cfg)
    with torch.no_grad():  # weights that differ from the seeded start, so a load that silently fails shows
        for param in untrained.reranker.parameters():
            if param.requires_grad:
                param.add_(0.01)
    export = save_export(work / "export", untrained.translator, untrained.reranker, 3, cfg)
    return cfg, export, LocalPipeline.from_config(cfg, checkpoint=str(export))


@pytest.fixture(scope="session")
def distributed_sync_run(ray_session, tiny_config, tmp_path_factory) -> Path:
    """A 4-step synchronous distributed run of the tiny config (one learner rank, ZeRO 0): the yardstick that
    resumed, partitioned, asynchronous and chaos runs are compared with."""
    from mmrag.pipelines.train import train_distributed

    run_dir = tmp_path_factory.mktemp("distributed_sync")
    train_distributed(tiny_config(run_dir, "train.checkpoint_every=2"), progress=False)
    return run_dir
