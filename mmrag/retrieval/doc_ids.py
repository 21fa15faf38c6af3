"""The KB-wide doc_id check of the index build: null or empty ids, and ids used by an earlier row.

Runs in the driver before any row is embedded (a duplicate is a property of the whole KB,
which no single worker sees), streaming the doc_id column part by part. It keeps one 8-byte
hash per row, not the ids themselves, and compares the real ids only where hashes collide:
8 bytes per document, like the FAISS id map, where a set of ids would be ~100.
Its findings go to the embedding workers, which skip and count those rows.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from mmrag.retrieval.kb_parts import KBFile, KBPart, KBRowError

NULL_OR_EMPTY = "doc_id: null or empty"
DUPLICATE = "doc_id: duplicate"


def bad_row_error(kb: KBFile, row: int, doc_id: object, problem: str) -> KBRowError:
    """The error for an unusable row in `index.on_bad_row: error` mode (the same wording for every check)."""
    return KBRowError(f"{kb.path}: row {row} (doc_id {doc_id!r}): {problem}; fix the row, or set "
                      f"index.on_bad_row: skip to skip and count such rows")


@dataclass
class DocIdCheck:
    problems: dict[int, str] = field(default_factory=dict)
    """KB row -> why it is skipped (NULL_OR_EMPTY or DUPLICATE); only in `skip` mode."""
    counts: Counter[str] = field(default_factory=Counter)
    """Skipped rows by reason."""

    def by_part(self, parts: list[KBPart]) -> dict[int, dict[int, str]]:
        """The problems grouped by part number (parts without any are absent)."""
        starts = np.array([part.start for part in parts])
        grouped: dict[int, dict[int, str]] = {}
        for row, problem in self.problems.items():
            grouped.setdefault(parts[int(np.searchsorted(starts, row, side="right")) - 1].number, {})[row] = problem
        return grouped


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little")


def check_doc_ids(kb: KBFile, on_bad_row: str, progress: bool = False) -> DocIdCheck:
    """Rows whose doc_id is null, empty or already used by an earlier row; KBRowError on the first in `error` mode."""
    check = DocIdCheck()
    hashes = np.zeros(kb.num_rows, np.uint64)
    present = np.ones(kb.num_rows, bool)
    for part in tqdm(kb.parts, desc="checking doc ids", unit="part", disable=not progress):
        for row, doc_id in zip(range(part.start, part.stop), kb.read(part, ("doc_id",)).column("doc_id").to_pylist()):
            if doc_id:
                hashes[row] = _id_hash(doc_id)
                continue
            if on_bad_row == "error":
                raise bad_row_error(kb, row, doc_id, "column 'doc_id' null or empty")
            present[row] = False
            check.problems[row] = NULL_OR_EMPTY
            check.counts[NULL_OR_EMPTY] += 1
    values, counts = np.unique(hashes[present], return_counts=True)
    suspects = np.flatnonzero(present & np.isin(hashes, values[counts > 1]))
    if len(suspects):
        _mark_duplicates(kb, suspects, on_bad_row, check)
    return check


def _mark_duplicates(kb: KBFile, suspects: np.ndarray, on_bad_row: str, check: DocIdCheck) -> None:
    """Among rows whose hashes collide, the real repeats: every use of an id after its first row."""
    first_row: dict[str, int] = {}
    wanted = set(suspects.tolist())
    for part in kb.parts:
        if not wanted.intersection(range(part.start, part.stop)):
            continue
        for row, doc_id in zip(range(part.start, part.stop), kb.read(part, ("doc_id",)).column("doc_id").to_pylist()):
            if row not in wanted:
                continue
            if doc_id not in first_row:
                first_row[doc_id] = row
            elif on_bad_row == "error":
                raise bad_row_error(kb, row, doc_id, f"column 'doc_id' duplicate ({doc_id!r} already used by row "
                                                     f"{first_row[doc_id]})")
            else:
                check.problems[row] = DUPLICATE
                check.counts[DUPLICATE] += 1
