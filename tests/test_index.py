"""KB index build and in-process sharded search: exactness against one flat index, no-op rebuilds, bad rows."""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmrag.config import EncoderConfig, IndexConfig
from mmrag.data.dataset import decode_image, load_kb
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import LocalRetriever, merge_topk
from mmrag.retrieval.build import build_index, write_vector_index
from mmrag.retrieval.faiss_index import new_faiss_index
from mmrag.retrieval.kb_parts import KBRowError

TINY_CLIP = EncoderConfig(model_name="mmrag-tiny-clip", pretrained="zoo:tiny-clip-init", batch_size=16)


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def doc_table(n: int) -> pa.Table:
    return pa.table({"doc_id": [f"doc{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                     "entity_id": [f"e{i % 7}" for i in range(n)]})


RANDOM_ENCODER = {"model_name": "random-unit-vectors"}


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_flat_shards_merge_to_exact_search(tmp_path, num_shards):
    vectors = unit_vectors(1001, 32, seed=0)
    queries = unit_vectors(20, 32, seed=1)
    manifest = write_vector_index(tmp_path, vectors, doc_table(1001), IndexConfig(num_shards=num_shards), RANDOM_ENCODER)
    sizes = [entry.num_docs for entry in manifest.shards]
    assert sum(sizes) == 1001 and max(sizes) - min(sizes) <= 1

    exact = faiss.IndexFlatIP(32)
    exact.add(vectors)
    exact_scores, exact_ids = exact.search(queries, 10)
    hits = LocalRetriever(tmp_path, IndexConfig(num_shards=num_shards)).search(queries, 10)

    assert [[hit.index_id for hit in row] for row in hits] == exact_ids.tolist()
    np.testing.assert_allclose([[hit.score for hit in row] for row in hits], exact_scores, rtol=0, atol=1e-6)
    assert [hit.doc_id for hit in hits[0]] == [f"doc{i}" for i in exact_ids[0]]
    assert hits[0][0].entity_id == f"e{exact_ids[0][0] % 7}" and (hits[0][0].title, hits[0][0].image) == ("", None)


def test_failed_shard_write_leaves_no_files(tmp_path):
    with pytest.raises(ValueError, match="shard 4 of 5 would get no documents.*at most 4"):
        write_vector_index(tmp_path, unit_vectors(4, 8, seed=5), doc_table(4), IndexConfig(num_shards=5), RANDOM_ENCODER)
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_merge_topk_ranks_by_score_then_index_id():
    def hit(index_id: int, score: float) -> Hit:
        return Hit(f"doc{index_id}", "", "", None, "", score, index_id)

    shard_a = [[hit(4, 0.9), hit(0, 0.5)], [hit(2, 0.1)]]
    shard_b = [[hit(3, 0.5), hit(1, 0.7)], []]
    merged = merge_topk([shard_a, shard_b], k=3)
    assert [[h.index_id for h in row] for row in merged] == [[4, 1, 0], [2]]
    with pytest.raises(ValueError, match="shard 1 answered 1 queries"):
        merge_topk([shard_a, [[hit(5, 0.2)]]], k=3)


def test_ivf_clamps_nlist_and_hnsw_finds_stored_vectors():
    vectors = unit_vectors(400, 16, seed=2)
    ivf, params = new_faiss_index(16, 400, IndexConfig(index_type="ivf", ivf_nlist=64))
    assert params == {"ivf_nlist": 400 // 39} and ivf.nlist == 400 // 39
    hnsw, params = new_faiss_index(16, 0, IndexConfig(index_type="hnsw", hnsw_m=8))
    hnsw.add(vectors)
    hnsw.hnsw.efSearch = 64
    _, ids = hnsw.search(vectors[:50], 1)
    assert params == {"hnsw_m": 8} and (ids[:, 0] == np.arange(50)).mean() >= 0.98


def test_wrong_encoder_query_dimension_and_missing_shard_file_are_named(tmp_path):
    manifest = write_vector_index(tmp_path, unit_vectors(50, 16, seed=3), doc_table(50), IndexConfig(num_shards=2),
                                  RANDOM_ENCODER)
    manifest.check_encoder(RANDOM_ENCODER, 16)
    with pytest.raises(ValueError, match="gives 8-d vectors but the index holds 16-d vectors"):
        manifest.check_encoder(RANDOM_ENCODER, 8)
    with pytest.raises(ValueError, match="differs from the one the index was built with"):
        manifest.check_encoder({"model_name": "ViT-L-14", "pretrained": "openai"}, 16)
    retriever = LocalRetriever(tmp_path, IndexConfig())
    with pytest.raises(ValueError, match=r"shape \(2, 8\).*holds 16-d vectors"):
        retriever.search(unit_vectors(2, 8, seed=4), 5)
    (tmp_path / "shard-001.faiss").unlink()
    with pytest.raises(FileNotFoundError, match="shard-001.faiss"):
        LocalRetriever(tmp_path, IndexConfig())


def test_build_from_synthetic_kb_is_searchable_and_rebuilds_only_on_change(synth_dir, zoo_dir, tmp_path):
    kb_path = tmp_path / "kb.parquet"
    pq.write_table(pq.read_table(Path(synth_dir) / "kb.parquet").slice(0, 36), kb_path)
    cfg = IndexConfig(num_shards=2, part_rows=10)
    index_dir = tmp_path / "index"
    report = build_index(kb_path, index_dir, cfg, TINY_CLIP, zoo_dir, progress=False)
    kb = pq.read_table(kb_path).to_pylist()
    assert report.rebuilt and report.manifest.num_docs == len(kb) == report.manifest.kb_rows == 36
    assert report.manifest.dim == 64 and report.manifest.skipped == {}

    # Querying with a document's own fused vector finds that document first, with score ~1.
    image_row = next(i for i, row in enumerate(kb) if row["image"] is not None)
    encoder = ClipEncoder(TINY_CLIP.model_name, TINY_CLIP.pretrained, zoo_dir)
    probe = encoder.encode_documents([kb[image_row]["text"], kb[1]["text"]], [decode_image(kb[image_row]["image"]), None])
    hits = LocalRetriever(index_dir, cfg).search(probe, 3)
    assert [row[0].doc_id for row in hits] == [kb[image_row]["doc_id"], kb[1]["doc_id"]]
    assert hits[0][0].image == kb[image_row]["image"] and hits[0][0].score == pytest.approx(1.0, abs=1e-4)

    stamp = os.stat(index_dir / "shard-000.faiss").st_mtime_ns
    again = build_index(kb_path, index_dir, cfg, TINY_CLIP, zoo_dir, progress=False)
    assert (again.rebuilt, again.reason) == (False, "unchanged")
    assert os.stat(index_dir / "shard-000.faiss").st_mtime_ns == stamp

    resharded = build_index(kb_path, index_dir, IndexConfig(num_shards=3), TINY_CLIP, zoo_dir, progress=False)
    assert (resharded.rebuilt, resharded.reason, len(resharded.manifest.shards)) == (True, "index settings changed", 3)

    pq.write_table(pq.read_table(kb_path).slice(0, 30), kb_path)
    changed = build_index(kb_path, index_dir, IndexConfig(num_shards=3), TINY_CLIP, zoo_dir, progress=False)
    assert (changed.rebuilt, changed.reason, changed.manifest.num_docs) == (True, "KB changed", 30)

    (index_dir / "shard-002.arrow").unlink()
    repaired = build_index(kb_path, index_dir, IndexConfig(num_shards=3), TINY_CLIP, zoo_dir, progress=False)
    assert (repaired.rebuilt, repaired.reason) == (True, "shard file missing: shard-002.arrow")


def write_bad_kb(synth_dir: str, out: Path, drop_column: str | None = None) -> Path:
    """Six synthetic KB rows; row 2 has empty text and row 4 an undecodable image."""
    table = pq.read_table(Path(synth_dir) / "kb.parquet").slice(0, 6)
    rows = table.to_pylist()
    rows[2]["text"] = "  "
    rows[4]["image"] = b"not an image"
    bad = pa.Table.from_pylist(rows, schema=table.schema)
    if drop_column:
        bad = bad.drop_columns([drop_column])
    path = out / "kb.parquet"
    pq.write_table(bad, path)
    return path


def test_bad_rows_fail_naming_row_and_column_or_are_skipped_and_counted(synth_dir, zoo_dir, tmp_path):
    kb_path = write_bad_kb(synth_dir, tmp_path)
    with pytest.raises(KBRowError, match=r"row 2 \(doc_id '\w+'\): column 'text' null or empty.*on_bad_row: skip"):
        build_index(kb_path, tmp_path / "index", IndexConfig(num_shards=1), TINY_CLIP, zoo_dir, progress=False)

    skipping = IndexConfig(num_shards=2, on_bad_row="skip", part_rows=4)
    report = build_index(kb_path, tmp_path / "index", skipping, TINY_CLIP, zoo_dir, progress=False)
    assert report.manifest.skipped == {"text: null or empty": 1, "image: undecodable": 1}
    assert (report.manifest.kb_rows, report.manifest.num_docs) == (6, 4)

    kb_without_text = write_bad_kb(synth_dir, tmp_path, drop_column="text")
    with pytest.raises(KBRowError, match="missing required column 'text'"):
        build_index(kb_without_text, tmp_path / "index2", skipping, TINY_CLIP, zoo_dir, progress=False)


def test_undecodable_image_error_names_its_row(synth_dir, zoo_dir, tmp_path):
    table = pq.read_table(Path(synth_dir) / "kb.parquet").slice(0, 6).to_pylist()
    table[3]["image"] = b"\x89PNG broken"
    pq.write_table(pa.Table.from_pylist(table), tmp_path / "kb.parquet")
    with pytest.raises(KBRowError, match=r"row 3 .*column 'image' undecodable"):
        build_index(tmp_path / "kb.parquet", tmp_path / "index", IndexConfig(num_shards=1), TINY_CLIP, zoo_dir,
                    progress=False)


def test_encoder_fuses_text_and_image_by_normalised_mean(synth_dir, zoo_dir):
    docs = [doc for doc in load_kb(synth_dir) if doc.image is not None][:3]
    small_batches = ClipEncoder(TINY_CLIP.model_name, TINY_CLIP.pretrained, zoo_dir, batch_size=2)
    texts = small_batches.encode_texts([doc.text for doc in docs])
    images = small_batches.encode_images([doc.image for doc in docs])
    fused = small_batches.encode_documents([doc.text for doc in docs], [doc.image for doc in docs], "mean")
    expected = (texts + images) / np.linalg.norm(texts + images, axis=1, keepdims=True)
    np.testing.assert_allclose(fused, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(fused, axis=1), 1.0, atol=1e-6)

    one_batch = ClipEncoder(TINY_CLIP.model_name, TINY_CLIP.pretrained, zoo_dir, batch_size=64)
    np.testing.assert_allclose(one_batch.encode_texts([doc.text for doc in docs]), texts, atol=1e-5)
    text_only = one_batch.encode_documents([doc.text for doc in docs], [None, docs[1].image, None], "image")
    np.testing.assert_allclose(text_only[[0, 2]], texts[[0, 2]], atol=1e-5)
    np.testing.assert_allclose(text_only[1], images[1], atol=1e-5)
