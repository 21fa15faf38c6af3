"""The index build at scale: Ray Data workers agree with the local path, killed builds resume, memory stays streamed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmrag.config import EncoderConfig, IndexConfig
from mmrag.data.distractors import add_distractors
from mmrag.retrieval.merge import LocalRetriever
from mmrag.retrieval.shard import ShardSearcher
from mmrag.retrieval.build import build_index, write_vector_index
from mmrag.retrieval.doc_ids import check_doc_ids
from mmrag.retrieval.kb_parts import KBFile, KBRowError, plan_parts
from mmrag.retrieval.manifest import Manifest
from mmrag.retrieval.staging import STAGING_DIR
from mmrag.pipelines.cli import main

TINY_CLIP = EncoderConfig(model_name="mmrag-tiny-clip", pretrained="zoo:tiny-clip-init", batch_size=32)
REPO = Path(__file__).resolve().parents[1]
PART_ROWS = 128
NUM_PARTS = 13


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def kb_dir(synth_dir, tmp_path_factory) -> Path:
    """The shared 24-entity KB (144 docs, 24 with images) plus 1,500 text distractors, in 13 parts of <= 128 rows."""
    out = tmp_path_factory.mktemp("kb")
    shutil.copy(Path(synth_dir) / "kb.parquet", out / "kb.parquet")
    add_distractors(out, 1500, seed=0)
    pq.write_table(pq.read_table(out / "kb.parquet"), out / "kb.parquet", row_group_size=PART_ROWS)
    assert len(KBFile(out / "kb.parquet", PART_ROWS).parts) == NUM_PARTS
    return out


@pytest.fixture(scope="module")
def local_build(kb_dir, zoo_dir, tmp_path_factory):
    """An uninterrupted in-process build of that KB (flat, 2 shards)."""
    index_dir = tmp_path_factory.mktemp("local_index")
    report = build_index(kb_dir / "kb.parquet", index_dir, IndexConfig(part_rows=PART_ROWS), TINY_CLIP, zoo_dir,
                         progress=False)
    return index_dir, report


def search_all(index_dir: Path, k: int = 10) -> tuple[list[list[int]], list[list[float]], list[list[str]]]:
    """Ids, scores and doc ids of 40 fixed random queries against an index."""
    hits = LocalRetriever(index_dir, IndexConfig()).search(unit_vectors(40, 64, seed=11), k)
    return ([[hit.index_id for hit in row] for row in hits], [[hit.score for hit in row] for row in hits],
            [[hit.doc_id for hit in row] for row in hits])


def read_docstores(index_dir: Path) -> list[pa.Table]:
    return [pa.ipc.open_file(index_dir / entry.docstore_file).read_all() for entry in Manifest.read(index_dir).shards]


def cli_flags(kb_dir: Path, index_dir: Path, zoo_dir: str) -> list[str]:
    """`mmrag index` options for the test KB, matching the `local_build` fixture's settings."""
    return ["--set", f"data.dir={kb_dir}", "--set", f"index.dir={index_dir}", "--set", f"zoo.cache_dir={zoo_dir}",
            "--set", f"encoder.pretrained={TINY_CLIP.pretrained}", "--set", f"encoder.batch_size={TINY_CLIP.batch_size}",
            "--set", f"index.part_rows={PART_ROWS}"]


def test_mmrag_index_on_ray_data_workers_builds_the_same_flat_index_as_the_local_path(kb_dir, local_build, zoo_dir,
                                                                                      ray_session, tmp_path, capsys):
    local_dir, local = local_build
    flags = cli_flags(kb_dir, tmp_path, zoo_dir)
    assert main(["index", *flags, "--set", "index.num_workers=2"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"embedded now +{local.rows_embedded} rows \(2 encoder workers", out), out
    assert Manifest.read(tmp_path).fingerprint == local.manifest.fingerprint
    assert search_all(tmp_path) == search_all(local_dir)  # identical ids, scores (bit for bit) and documents
    assert read_docstores(tmp_path) == read_docstores(local_dir)
    assert main(["index", *flags]) == 0
    assert "kept (unchanged)" in capsys.readouterr().out


def embedded_pieces(index_dir: Path) -> list[Path]:
    return sorted((index_dir / STAGING_DIR).glob("part-*.arrow"))


@pytest.mark.slow  # kills a Ray Data build (26 s)
def test_a_build_killed_midway_resumes_and_ends_as_an_uninterrupted_one(kb_dir, local_build, zoo_dir, tmp_path):
    local_dir, local = local_build
    index_dir = tmp_path / "index"
    flags = cli_flags(kb_dir, index_dir, zoo_dir)
    # One torch thread, as in this process: the vectors are then bit for bit the same.
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    build = subprocess.Popen([sys.executable, "-m", "mmrag.pipelines.index", "--local", *flags], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(embedded_pieces(index_dir)) < 3 and build.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    build.send_signal(signal.SIGKILL)
    build.wait()
    persisted = len(embedded_pieces(index_dir))
    assert 3 <= persisted < NUM_PARTS, "the build must be killed midway"
    assert not (index_dir / "manifest.json").exists()

    resumed = build_index(kb_dir / "kb.parquet", index_dir, IndexConfig(part_rows=PART_ROWS), TINY_CLIP, zoo_dir,
                          progress=False)
    assert (resumed.rebuilt, resumed.reason, resumed.parts_reused) == (True, "no valid manifest", persisted)
    assert resumed.rows_embedded == local.rows_embedded - persisted * PART_ROWS
    assert resumed.manifest.fingerprint == local.manifest.fingerprint
    assert search_all(index_dir) == search_all(local_dir)
    assert read_docstores(index_dir) == read_docstores(local_dir)


def test_new_index_settings_reuse_the_embeddings_and_force_re_embeds(kb_dir, local_build, zoo_dir, tmp_path):
    local_dir, local = local_build
    index_dir = tmp_path / "index"
    shutil.copytree(local_dir, index_dir)
    ivf = IndexConfig(part_rows=PART_ROWS, index_type="ivf", ivf_nlist=8, ivf_nprobe=8)
    report = build_index(kb_dir / "kb.parquet", index_dir, ivf, TINY_CLIP, zoo_dir, progress=False)
    assert (report.reason, report.rows_embedded, report.parts_reused) == ("index settings changed", 0, NUM_PARTS)
    # Every cluster probed: IVF is then exact, and must agree with the flat index built from the same vectors.
    assert search_all(index_dir)[0] == search_all(local_dir)[0]
    forced = build_index(kb_dir / "kb.parquet", index_dir, ivf, TINY_CLIP, zoo_dir, force=True, progress=False)
    assert (forced.rows_embedded, forced.parts_reused) == (local.rows_embedded, 0)


def test_parts_are_whole_row_groups_of_at_most_part_rows():
    assert [(p.start, p.stop, p.row_groups) for p in plan_parts([100, 100, 100, 500, 50, 0, 50], 250)] == [
        (0, 200, (0, 1)), (200, 300, (2,)), (300, 800, (3,)), (800, 900, (4, 6))]
    with pytest.raises(ValueError, match="index.part_rows: expected a positive integer, got 0"):
        plan_parts([10], 0)


def write_kb(path: Path, doc_ids: list[str | None]) -> Path:
    table = pa.table({"doc_id": pa.array(doc_ids, pa.string()), "text": [f"passage {i}" for i in range(len(doc_ids))]})
    pq.write_table(table, path, row_group_size=2)
    return path


def test_repeated_or_missing_doc_ids_fail_naming_both_rows_or_are_skipped_and_counted(tmp_path):
    kb = KBFile(write_kb(tmp_path / "kb.parquet", ["a", "b", "c", "b", None, "a", "d"]), part_rows=2)
    with pytest.raises(KBRowError, match=r"row 3 \(doc_id 'b'\): column 'doc_id' duplicate \('b' already used by "
                                         r"row 1\).*on_bad_row: skip"):
        check_doc_ids(kb, "error")
    check = check_doc_ids(kb, "skip")
    assert check.problems == {3: "doc_id: duplicate", 4: "doc_id: null or empty", 5: "doc_id: duplicate"}
    assert check.by_part(kb.parts) == {1: {3: "doc_id: duplicate"}, 2: {4: "doc_id: null or empty",
                                                                          5: "doc_id: duplicate"}}


def test_skipped_doc_ids_are_left_out_of_the_index_and_counted(tmp_path, zoo_dir):
    kb_path = write_kb(tmp_path / "kb.parquet", ["a", "b", "a", "", "c"])
    report = build_index(kb_path, tmp_path / "index", IndexConfig(num_shards=1, on_bad_row="skip", part_rows=2),
                         TINY_CLIP, zoo_dir, progress=False)
    assert report.manifest.skipped == {"doc_id: duplicate": 1, "doc_id: null or empty": 1}
    assert read_docstores(tmp_path / "index")[0].column("doc_id").to_pylist() == ["a", "b", "c"]


def clustered_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 40 centres, more like real embeddings than uniform noise."""
    rng = np.random.default_rng(seed)
    vectors = unit_vectors(40, dim, seed)[rng.integers(0, 40, n)] + 0.3 * rng.standard_normal((n, dim)) / np.sqrt(dim)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_ivf_and_ivfpq_train_on_a_sample_and_every_type_searches_close_to_exact(tmp_path):
    vectors = clustered_vectors(3050, 32, seed=3)
    documents, queries = vectors[:3000], vectors[3000:]
    docs = pa.table({"doc_id": [f"d{i}" for i in range(3000)], "text": [""] * 3000})
    exact = faiss.IndexFlatIP(32)
    exact.add(documents)
    _, exact_ids = exact.search(queries, 10)
    # IVF probes every cluster here, so it is exact; IVF-PQ's 3-bit codes (all 400 training vectors allow) are
    # coarse, but far above chance (10 / 3000).
    for index_type, recall_floor in (("ivf", 1.0), ("ivfpq", 0.1), ("hnsw", 0.9)):
        cfg = IndexConfig(index_type=index_type, num_shards=2, train_sample=400, ivf_nlist=64, ivf_nprobe=64,
                          pq_m=8, hnsw_ef_search=128)
        manifest = write_vector_index(tmp_path / index_type, documents, docs, cfg, {"model_name": "random"})
        hits = LocalRetriever(tmp_path / index_type, cfg).search(queries, 10)
        recall = np.mean([len({hit.index_id for hit in row} & set(ids)) / 10 for row, ids in zip(hits, exact_ids)])
        assert recall >= recall_floor, (index_type, recall)
        params = manifest.shards[0].build_params
        if index_type != "hnsw":
            # 400 training vectors, not the shard's 1,500, bound the clusters (400 // 39) and PQ's code bits.
            assert params["ivf_nlist"] == 10
        if index_type == "ivfpq":
            assert (params["pq_m"], params["pq_nbits"]) == (8, 3)
    with pytest.raises(ValueError, match=r"index.pq_m: 5 does not divide the vector dimension 32; choose one of "
                                         r"\[1, 2, 4, 8, 16, 32\]"):
        write_vector_index(tmp_path / "bad", documents, docs, IndexConfig(index_type="ivfpq", pq_m=5), {})


def mapped_files() -> str:
    return Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("index_type", ["flat", "ivf", "hnsw", "ivfpq"])
def test_shards_are_memory_mapped_not_read_into_memory(tmp_path, index_type):
    cfg = IndexConfig(index_type=index_type, num_shards=1, pq_m=8, use_gpu=False)
    write_vector_index(tmp_path, unit_vectors(2000, 32, seed=5), pa.table({"doc_id": [f"d{i}" for i in range(2000)],
                       "text": [""] * 2000}), cfg, {"model_name": "random"})
    searcher = ShardSearcher(tmp_path, Manifest.read(tmp_path).shards[0], cfg)
    assert str(tmp_path / "shard-000.faiss") in mapped_files()
    assert str(tmp_path / "shard-000.arrow") in mapped_files()
    assert len(searcher.search(unit_vectors(3, 32, seed=6), 5)[0]) == 5


@pytest.mark.skipif(faiss.get_num_gpus() == 0,
                    reason="GPU FAISS needs the faiss-gpu build (extra `gpu`) and a CUDA GPU; this machine has neither")
@pytest.mark.parametrize("index_type", ["flat", "ivf"])
def test_use_gpu_moves_shards_to_gpu_faiss_with_the_same_results(tmp_path, index_type):
    vectors, queries = unit_vectors(3000, 32, seed=7), unit_vectors(20, 32, seed=8)
    docs = pa.table({"doc_id": [f"d{i}" for i in range(3000)], "text": [""] * 3000})
    cfg = IndexConfig(index_type=index_type, num_shards=2, ivf_nlist=16, ivf_nprobe=16)
    write_vector_index(tmp_path, vectors, docs, cfg, {"model_name": "random"})
    gpu = LocalRetriever(tmp_path, cfg)
    cpu = LocalRetriever(tmp_path, IndexConfig(index_type=index_type, ivf_nprobe=16, use_gpu=False))
    assert all(shard.on_gpu for shard in gpu.shards) and not any(shard.on_gpu for shard in cpu.shards)
    gpu_hits, cpu_hits = gpu.search(queries, 10), cpu.search(queries, 10)
    assert [[hit.index_id for hit in row] for row in gpu_hits] == [[hit.index_id for hit in row] for row in cpu_hits]
