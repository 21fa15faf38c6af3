"""The KB-wide doc_id check of the index build: null or empty ids, and ids used by an earlier row.

Runs in the driver before any row is embedded (a duplicate is a property of the whole KB,
which no single worker sees), streaming the doc_id column part by part. It keeps an 8-byte
hash per row, not the ids themselves, and compares the real ids only where hashes collide:
about 9 bytes per document (a Python set of the ids would take ~100), the only memory of
the driver that grows with the KB. Its findings go to the embedding workers, which skip
and count those rows.
"""

from __future__ import annotations

import hashlib
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
    """KB row -> why it is skipped (NULL_OR_EMPTY or DUPLICATE)."""
    details: dict[int, tuple[object, str]] = field(default_factory=dict)
    """KB row -> (its doc_id, what is wrong with it), for the error message."""

    def add(self, row: int, doc_id: object, problem: str, detail: str) -> None:
        self.problems[row] = problem
        self.details[row] = (doc_id, detail)

    def by_part(self, parts: list[KBPart]) -> dict[int, dict[int, str]]:
        """The problems grouped by part number (parts without any are absent)."""
        starts = np.array([part.start for part in parts])
        grouped: dict[int, dict[int, str]] = {}
        for row, problem in self.problems.items():
            grouped.setdefault(parts[int(np.searchsorted(starts, row, side="right")) - 1].number, {})[row] = problem
        return grouped


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little")


def _doc_ids(kb: KBFile, part: KBPart):
    """(row, doc_id) of each row of `part`."""
    return zip(range(part.start, part.stop), kb.read(part, ("doc_id",)).column("doc_id").to_pylist())


def check_doc_ids(kb: KBFile, on_bad_row: str, progress: bool = False) -> DocIdCheck:
    """Rows whose doc_id is null, empty or already used by an earlier row.

    In `error` mode the first such row (in KB order) raises KBRowError naming it.
    """
    check = DocIdCheck()
    hashes = np.zeros(kb.num_rows, np.uint64)
    present = np.ones(kb.num_rows, bool)
    for part in tqdm(kb.parts, desc="checking doc ids", unit="part", disable=not progress):
        for row, doc_id in _doc_ids(kb, part):
            if doc_id:
                hashes[row] = _id_hash(doc_id)
            else:
                present[row] = False
                check.add(row, doc_id, NULL_OR_EMPTY, "column 'doc_id' null or empty")
    values, counts = np.unique(hashes[present], return_counts=True)
    suspects = np.flatnonzero(present & np.isin(hashes, values[counts > 1]))
    if len(suspects):
        _add_duplicates(kb, set(suspects.tolist()), check)
    if on_bad_row == "error" and check.problems:
        row = min(check.problems)
        raise bad_row_error(kb, row, *check.details[row])
    return check


def _add_duplicates(kb: KBFile, suspects: set[int], check: DocIdCheck) -> None:
    """Among rows whose hashes collide, the real repeats: every use of an id after its first row."""
    first_row: dict[str, int] = {}
    for part in kb.parts:
        if suspects.isdisjoint(range(part.start, part.stop)):
            continue
        for row, doc_id in _doc_ids(kb, part):
            if row not in suspects:
                continue
            if doc_id in first_row:
                check.add(row, doc_id, DUPLICATE, f"column 'doc_id' duplicate ({doc_id!r} already used by row "
                                                  f"{first_row[doc_id]})")
            else:
                first_row[doc_id] = row
