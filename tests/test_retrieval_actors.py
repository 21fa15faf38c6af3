"""Retrieval on Ray: shard actors + router agree with exact search and with LocalRetriever; the encoder actor."""

from __future__ import annotations

import faiss
import numpy as np
import pyarrow as pa
import pytest

from mmrag.actors.encoder import EncoderActor
from mmrag.actors.retrieval import RetrievalRouter
from mmrag.checksum import file_sha256
from mmrag.config import EncoderConfig, IndexConfig
from mmrag.retrieval.merge import LocalRetriever
from mmrag.retrieval.build import write_vector_index
from mmrag.zoo import resolve


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def random_index(index_dir, num_docs: int, dim: int, num_shards: int) -> np.ndarray:
    """A flat index of random unit vectors (doc ids doc0..); returns the vectors."""
    vectors = unit_vectors(num_docs, dim, seed=7)
    docs = pa.table({"doc_id": [f"doc{i}" for i in range(num_docs)], "text": [f"text {i}" for i in range(num_docs)]})
    write_vector_index(index_dir, vectors, docs, IndexConfig(num_shards=num_shards), {"model_name": "random"})
    return vectors


@pytest.fixture(scope="module")
def three_shard_index(tmp_path_factory):
    """A flat index of 700 random 24-d vectors split over 3 shards, and the vectors."""
    index_dir = tmp_path_factory.mktemp("index")
    return index_dir, random_index(index_dir, 700, 24, num_shards=3)


def test_router_over_shard_actors_matches_exact_and_local_search(ray_session, three_shard_index):
    index_dir, vectors = three_shard_index
    queries = unit_vectors(12, 24, seed=8)
    cfg = IndexConfig(shard_num_cpus=0.5)
    router = RetrievalRouter.launch(index_dir, cfg)
    try:
        hits = router.search(queries, 8)
        with pytest.raises(ValueError, match="holds 24-d vectors"):
            router.search(unit_vectors(2, 16, seed=9), 8)
    finally:
        router.shutdown()

    exact = faiss.IndexFlatIP(24)
    exact.add(vectors)
    exact_scores, exact_ids = exact.search(queries, 8)
    assert len(router.manifest.shards) == 3
    assert [[hit.index_id for hit in row] for row in hits] == exact_ids.tolist()
    np.testing.assert_allclose([[hit.score for hit in row] for row in hits], exact_scores, atol=1e-6)
    assert hits == LocalRetriever(index_dir, cfg).search(queries, 8)


def test_router_names_a_missing_shard_file(ray_session, tmp_path):
    random_index(tmp_path, 20, 8, num_shards=2)
    (tmp_path / "shard-001.arrow").unlink()
    with pytest.raises(FileNotFoundError, match="shard-001.arrow"):
        RetrievalRouter.launch(tmp_path, IndexConfig())


def test_encoder_actor_gives_unit_vectors_independent_of_batching(ray_session, zoo_dir):
    cfg = EncoderConfig(model_name="mmrag-tiny-clip", pretrained="zoo:tiny-clip-init", batch_size=4)
    actor = ray_session.remote(EncoderActor).options(num_gpus=cfg.num_gpus).remote(cfg, zoo_dir)
    texts = ["red striped circle on blue", "when was it built?", "a tower", "x", "y"]
    batched = ray_session.get(actor.encode_texts.remote(texts))
    one_by_one = np.concatenate(ray_session.get([actor.encode_texts.remote([text]) for text in texts]))
    identity = ray_session.get(actor.identity.remote())
    ray_session.kill(actor)

    assert batched.shape == (5, 64) and batched.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert np.abs(batched[0] - batched[1]).max() > 1e-3
    assert identity["checkpoint_sha256"] == file_sha256(resolve("zoo:tiny-clip-init", zoo_dir))
