"""Index manifest: what an index directory holds and what it was built from.

`mmrag.retrieval.build` writes `manifest.json` last and atomically, so a half-written build never looks
complete. Searchers (`ShardSearcher`, `LocalRetriever`, the retrieval actors) read it to
find their shard files and to reject query vectors of the wrong dimension. Its
`fingerprint` covers the KB's content, the encoder's identity and the build settings:
re-running the build with the same fingerprint is a no-op.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmrag.atomic import atomic_write_text

MANIFEST_NAME = "manifest.json"


@dataclass
class ShardEntry:
    index_file: str
    """FAISS index file, relative to the index directory."""
    docstore_file: str
    """Arrow IPC doc store (one row per vector, in index order), relative to the index directory."""
    num_docs: int
    """Vectors (= documents) in this shard."""
    build_params: dict = field(default_factory=dict)
    """Effective build parameters of this shard's FAISS index (e.g. the IVF nlist it got)."""


@dataclass
class Manifest:
    fingerprint: str
    """Hash of kb_sha256, encoder and settings; equal fingerprints mean an identical build."""
    kb_path: str
    """The KB Parquet file the index was built from."""
    kb_sha256: str
    """Content hash of that file."""
    encoder: dict
    """Encoder identity: model_name, pretrained, checkpoint, checkpoint_sha256."""
    dim: int
    """Vector dimension."""
    settings: dict
    """Build settings: index_type, num_shards, fusion, on_bad_row and the type's parameters."""
    kb_rows: int
    """Rows read from the KB."""
    num_docs: int
    """Documents indexed (kb_rows minus skipped)."""
    skipped: dict[str, int]
    """Skipped rows counted by reason, e.g. {"text: empty": 2}."""
    shards: list[ShardEntry]
    """One entry per shard, in shard order."""

    def write(self, index_dir: str | Path) -> Path:
        path = Path(index_dir) / MANIFEST_NAME
        atomic_write_text(path, json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True))
        return path

    @classmethod
    def read(cls, index_dir: str | Path) -> Manifest:
        """The manifest of `index_dir`; FileNotFoundError/ValueError name the file and the fix."""
        path = Path(index_dir) / MANIFEST_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no index manifest; build the index first with `mmrag index`")
        try:
            data = json.loads(path.read_text())
            data["shards"] = [ShardEntry(**entry) for entry in data["shards"]]
            return cls(**data)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a valid index manifest ({exc}); rebuild with `mmrag index --force`") from None

    def missing_files(self, index_dir: str | Path) -> list[Path]:
        """Shard files the manifest lists that are not on disk."""
        files = [Path(index_dir) / name for entry in self.shards for name in (entry.index_file, entry.docstore_file)]
        return [path for path in files if not path.is_file()]

    def check_encoder(self, identity: dict[str, str], dim: int) -> None:
        """ValueError unless an encoder (`ClipEncoder.identity`, `.dim`) gives this index's vectors."""
        if dim != self.dim:
            raise ValueError(f"encoder {identity.get('model_name')!r} ({identity.get('pretrained')!r}) gives {dim}-d "
                             f"vectors but the index holds {self.dim}-d vectors from {self.encoder.get('model_name')!r} "
                             f"({self.encoder.get('pretrained')!r}); rebuild the index with `mmrag index`")
        if vector_identity(identity) != vector_identity(self.encoder):
            raise ValueError(f"encoder {vector_identity(identity)} differs from the one the index was built with "
                             f"({vector_identity(self.encoder)}); rebuild the index with `mmrag index`")

    def check_search(self, query_vectors: np.ndarray, k: int) -> np.ndarray:
        """`query_vectors` as a contiguous float32 [n, dim] matrix, or a ValueError naming the mismatch."""
        if k < 1:
            raise ValueError(f"k: expected a positive number of documents per query, got {k}")
        queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(
                f"query vectors of shape {tuple(queries.shape)} do not fit this index: it holds {self.dim}-d "
                f"vectors from encoder {self.encoder.get('model_name')!r} ({self.encoder.get('pretrained')!r}); "
                f"encode queries with that encoder, or rebuild the index with `mmrag index`")
        return queries


def vector_identity(identity: dict[str, str]) -> dict[str, str]:
    """An encoder as far as its vectors go: model name and checkpoint content, not where the file lies."""
    weights = identity.get("checkpoint_sha256") or identity.get("pretrained", "")
    return {"model_name": identity.get("model_name", ""), "weights": weights}


def build_fingerprint(kb_sha256: str, encoder: dict, settings: dict) -> str:
    """One hash over everything that determines the index's content."""
    blob = json.dumps({"kb": kb_sha256, "encoder": encoder, "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
