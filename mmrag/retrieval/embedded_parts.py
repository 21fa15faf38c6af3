"""The embedded KB as the FAISS stage reads it: parts of vectors, numbered consecutively, documents on demand.

Input of `docstore.write_docstores` and `faiss_index.write_shard_index`. Vector g of the
whole sequence (g = the part's offset + its position in the part) gets index id g and goes
to shard g % S. `StagedParts` reads the pieces the embedding stage persisted and the KB rows
they came from; `VectorParts` wraps vectors and documents already in memory (tests,
benchmarks, precomputed embeddings). Either way one part at a time is in memory.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pyarrow as pa

from mmrag.retrieval.kb_parts import KBFile
from mmrag.retrieval.staging import Piece, Staging


class EmbeddedParts(Protocol):
    dim: int
    sizes: list[int]
    """Vectors in each part."""

    def vectors(self, part: int) -> np.ndarray:
        """float32 [sizes[part], dim]."""

    def docs(self, part: int) -> pa.Table:
        """One row per vector of the part: doc_id, text and whichever of title, image, entity_id there are."""


def offsets(parts: EmbeddedParts) -> np.ndarray:
    """Index id of each part's first vector."""
    return np.concatenate([[0], np.cumsum(parts.sizes)[:-1]]).astype(np.int64)


class StagedParts:
    """The persisted pieces of every KB part (`Staging.complete_parts`), with the KB file they index."""

    def __init__(self, kb: KBFile, pieces: dict[int, list[Piece]]) -> None:
        self.kb, self.pieces = kb, pieces
        self.dim = pieces[kb.parts[0].number][0].dim
        self.sizes = [sum(piece.embedded for piece in pieces[part.number]) for part in kb.parts]

    def vectors(self, part: int) -> np.ndarray:
        return Staging.read(self.pieces[part])[1]

    def docs(self, part: int) -> pa.Table:
        rows, _ = Staging.read(self.pieces[part])
        return self.kb.doc_rows(self.kb.parts[part], rows)


class VectorParts:
    """Vectors and their documents held in memory, cut into parts of `part_size`."""

    def __init__(self, vectors: np.ndarray, docs: pa.Table, part_size: int = 65536) -> None:
        if vectors.ndim != 2 or len(vectors) != docs.num_rows:
            raise ValueError(f"vectors of shape {vectors.shape} for {docs.num_rows} docs; expected "
                             f"({docs.num_rows}, dim): one vector per document")
        self.all_vectors, self.all_docs, self.part_size = vectors, docs, part_size
        self.dim = vectors.shape[1]
        self.sizes = [min(part_size, len(vectors) - start) for start in range(0, len(vectors), part_size)]

    def vectors(self, part: int) -> np.ndarray:
        start = part * self.part_size
        return np.ascontiguousarray(self.all_vectors[start:start + self.part_size], dtype=np.float32)

    def docs(self, part: int) -> pa.Table:
        return self.all_docs.slice(part * self.part_size, self.part_size)
