"""Per-part embeddings on disk (INDEX_DIR/embeddings): what makes the index build resumable.

Between the two stages of `mmrag.retrieval.build`: each embedding call persists its rows'
vectors as one piece (a whole KB part, or the piece of one that Ray Data handed over), an
Arrow IPC file written under a temporary name and then renamed, so a build killed at any
point leaves only whole pieces. A rerun embeds only the parts its pieces do not cover.
`key.json` records which KB, encoder and row rules the pieces came from; when any of them
changes the pieces are discarded. The FAISS stage reads them back memory-mapped, a part at
a time.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from mmrag.atomic import atomic_file, atomic_write_text, remove_leftovers
from mmrag.retrieval.kb_parts import KBPart

STAGING_DIR = "embeddings"
KEY_FILE = "key.json"
_METADATA = b"mmrag_piece"


@dataclass(frozen=True)
class Piece:
    """One persisted embedding call: KB rows first_row..stop_row-1 of one part."""

    path: Path
    part: int
    first_row: int
    stop_row: int
    embedded: int
    """Rows embedded (the rest were skipped)."""
    dim: int
    """Vector dimension."""
    skipped: dict[str, int]
    """Skipped rows by reason."""


class Staging:
    """The pieces of one index directory."""

    def __init__(self, index_dir: str | Path) -> None:
        self.dir = Path(index_dir) / STAGING_DIR

    def prepare(self, key: dict, discard: bool = False) -> bool:
        """Keep the pieces made under `key` (True), or start empty (False, always so with `discard`);
        half-written files are removed."""
        key_path = self.dir / KEY_FILE
        try:
            kept = not discard and json.loads(key_path.read_text()) == key
        except (OSError, ValueError):
            kept = False
        if not kept:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self.dir)
        if not kept:
            atomic_write_text(key_path, json.dumps(key, sort_keys=True))
        return kept

    def write(self, part: int, first_row: int, stop_row: int, rows: np.ndarray, vectors: np.ndarray,
              skipped: dict[str, int]) -> Path:
        """Persist the vectors of KB `rows` (those of first_row..stop_row-1 that were embedded)."""
        dim = vectors.shape[1]
        meta = {"part": part, "first_row": first_row, "stop_row": stop_row, "embedded": len(rows), "dim": dim,
                "skipped": skipped}
        schema = pa.schema([("row", pa.int64()), ("vector", pa.list_(pa.float32(), dim))],
                           metadata={_METADATA: json.dumps(meta)})
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        table = pa.table([pa.array(rows, pa.int64()), pa.FixedSizeListArray.from_arrays(flat, dim)], schema=schema)

        path = self.dir / f"part-{part:06d}-row-{first_row:012d}.arrow"
        with atomic_file(path) as temporary, pa.ipc.new_file(str(temporary), schema) as writer:
            writer.write_table(table)
        return path

    def pieces(self) -> list[Piece]:
        """Every persisted piece, by part then first row."""
        found = []
        for path in sorted(self.dir.glob("part-*.arrow")):
            meta = json.loads(pa.ipc.open_file(pa.memory_map(str(path))).schema.metadata[_METADATA])
            found.append(Piece(path, meta["part"], meta["first_row"], meta["stop_row"], meta["embedded"], meta["dim"],
                               meta["skipped"]))
        return sorted(found, key=lambda piece: (piece.part, piece.first_row))

    def complete_parts(self, parts: list[KBPart]) -> dict[int, list[Piece]]:
        """Part number -> its pieces, for the parts they cover exactly; pieces of any other part are deleted."""
        by_part: dict[int, list[Piece]] = {}
        for piece in self.pieces():
            by_part.setdefault(piece.part, []).append(piece)
        complete = {}
        for number, pieces in by_part.items():
            bounds = [(piece.first_row, piece.stop_row) for piece in pieces]
            tiles = all(stop == next_start for (_, stop), (next_start, _) in zip(bounds, bounds[1:]))
            part = parts[number] if number < len(parts) else None
            if part is not None and tiles and bounds[0][0] == part.start and bounds[-1][1] == part.stop:
                complete[number] = pieces
            else:
                for piece in pieces:
                    piece.path.unlink(missing_ok=True)
        return complete

    @staticmethod
    def read(pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray]:
        """(KB rows, float32 vectors [n, dim]) of a part's pieces, in row order."""
        rows, vectors = [], []
        for piece in pieces:
            table = pa.ipc.open_file(pa.memory_map(str(piece.path))).read_all()
            column = table.column("vector").combine_chunks()
            rows.append(table.column("row").to_numpy())
            vectors.append(column.flatten().to_numpy().reshape(len(column), column.type.list_size))
        return np.concatenate(rows), np.concatenate(vectors)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
