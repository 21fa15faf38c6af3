"""Files replaced whole or not at all: written under a temporary name, then renamed over the target.

Every file of an index directory is written this way, so a build killed at any point
leaves either the old file or the complete new one (plus a `*.tmp` the next build removes),
and a searcher that memory-maps a shard keeps its old file (a rename does not truncate the
inode it maps).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"


@contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """A temporary path to write; renamed onto `path` when the block succeeds, removed when it fails."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
