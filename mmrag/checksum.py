"""Content hashes of files, shared by the model loaders and the index build.

Neutral ground below both `mmrag.models` (a checkpoint's identity) and `mmrag.retrieval`
(the KB's content in the index fingerprint), so neither package imports the other for it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """Content hash of one file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
