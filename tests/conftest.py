"""Shared fixtures: one offline zoo cache, one small synthetic dataset, one Ray instance, one export."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from mmrag.model_refs import MODELS, is_current, read_manifest
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
    _token_file = Path(tempfile.mkdtemp(prefix="mmrag-ray-token-")) / "auth_token"
    _token_file.write_text(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(_token_file)


ZOO_FIXTURES = {"zoo_dir", "tiny_index", "tiny_config", "tiny_export", "distributed_sync_run"}
"""The fixtures that need the built zoo (each depends on `zoo_dir`)."""

_background_zoo_build: subprocess.Popen | None = None
_zoo_build_times: dict[str, float] = {}
"""`started`, `waited_from` and `done` (time.monotonic()) of the background build, for the session's summary."""


def zoo_cache() -> Path:
    return Path(os.environ.get("MMRAG_ZOO_CACHE", "~/.cache/mmrag/zoo")).expanduser()


def zoo_models_missing(cache: Path) -> list[str]:
    """The zoo models with no current build in `cache`."""
    return [name for name, model in MODELS.items()
            if not is_current(model, read_manifest(cache / name) or {})]


def _needs_zoo(item) -> bool:
    return bool(ZOO_FIXTURES & set(getattr(item, "fixturenames", ())))


def _needs_ray(item) -> bool:
    return "ray_session" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items):
    """A test that starts Ray (through `ray_session`) is slow: the quick tier, `-m "not slow"`, is Ray-free.

    The tests that need neither the zoo nor Ray run first (in their order), so that on a machine without the
    zoo they run while it builds in the background (`pytest_collection_finish`); the rest keep their order.
    """
    for item in items:
        if _needs_ray(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: _needs_zoo(item) or _needs_ray(item))


def pytest_collection_finish(session):
    """Start `mmrag zoo` in the background when a selected test needs a zoo model that is not built yet.

    On a fresh machine the zoo takes minutes to build; the tests that need neither it nor Ray, run first,
    take their turns on the cores meanwhile instead of after it.
    """
    global _background_zoo_build
    cache = zoo_cache()
    if (session.config.option.collectonly or not any(_needs_zoo(item) for item in session.items)
            or not zoo_models_missing(cache)):
        return
    log = Path(tempfile.mkdtemp(prefix="mmrag-zoo-build-")) / "zoo.log"
    _zoo_build_times["started"] = time.monotonic()
    with log.open("w") as output:
        _background_zoo_build = subprocess.Popen(
            [sys.executable, "-m", "pipelines.zoo", "--set", f"zoo.cache_dir={cache}"],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def pytest_sessionfinish(session):
    """A session that ends before the background zoo build (Ctrl-C, `-x`) stops it and its workers: a model
    enters the cache by an atomic rename once complete, so nothing half-built stays."""
    if _background_zoo_build is not None and _background_zoo_build.poll() is None:
        os.killpg(_background_zoo_build.pid, signal.SIGTERM)
        _background_zoo_build.wait()


def pytest_terminal_summary(terminalreporter):
    """How long the background zoo build took, and how much of it the tests that need the zoo waited for."""
    if "done" in _zoo_build_times:
        times = _zoo_build_times
        terminalreporter.write_line(f"zoo built in the background in {times['done'] - times['started']:.0f} s; "
                                    f"the tests that need it waited {times['done'] - times['waited_from']:.0f} s")


@pytest.fixture(scope="session")
def zoo_dir() -> str:
    """The zoo cache shared by every test (and by `mmrag` itself), with every model built (once, then reused).

    Waits for the background build, then makes sure of every model here (a build that failed in the background
    fails this fixture with its error). So the zoo is complete before any test that needs it starts an actor,
    and no actor's start-up timeout includes a build.
    """
    path = zoo_cache()
    if _background_zoo_build is not None:
        _zoo_build_times["waited_from"] = time.monotonic()
        _background_zoo_build.wait()
        _zoo_build_times["done"] = time.monotonic()
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

    from cluster.connect import RAY_SYSTEM_CONFIG

    # More logical CPUs than cores: the tests place several small actor groups at once.
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False,
             _system_config=dict(RAY_SYSTEM_CONFIG))
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_index(synth_dir, zoo_dir, tmp_path_factory) -> str:
    """A flat 2-shard index of `synth_dir`'s KB, embedded with the zoo's fitted tiny CLIP (as configs/local-v1.yaml)."""
    from mmrag.config import load_config
    from mmrag.retrieval.build import build_index

    index_dir = tmp_path_factory.mktemp("tiny_index")
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs/local-v1.yaml", [f"zoo.cache_dir={zoo_dir}"])
    build_index(Path(synth_dir) / "kb.parquet", index_dir, cfg.index, cfg.encoder, zoo_dir, progress=False)
    return str(index_dir)


@pytest.fixture(scope="session")
def tiny_config(synth_dir, tiny_index, zoo_dir):
    """config(run_dir, *overrides): configs/local-v1.yaml on the small synthetic world (v1) with short rollouts.

    2 questions per step, 3 queries x 4 selections each, top 12: small, yet most steps carry learning signal
    for both components (the fitted zoo models retrieve well enough for rewards to differ between siblings).
    """
    from mmrag.config import load_config

    def config(run_dir, *overrides: str):
        return load_config(Path(__file__).resolve().parents[1] / "configs/local-v1.yaml", [
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
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs/local.yaml", [
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
    from pipelines.train import train_distributed

    run_dir = tmp_path_factory.mktemp("distributed_sync")
    train_distributed(tiny_config(run_dir, "train.checkpoint_every=2"), progress=False)
    return run_dir
