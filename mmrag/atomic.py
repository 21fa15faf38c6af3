"""Files and directories replaced whole or not at all: written under a temporary name beside
the target, then renamed over it.

Every writer whose output another process may read while it is written, or that a run killed
mid-write must not leave half done (index files, embedding pieces, checkpoints, zoo builds,
exports), writes through this module. A reader then sees the old content or the complete new
one; a killed writer leaves at most a `*.tmp` beside the target, which `remove_leftovers`
clears. A rename also leaves the old inode alone, so a searcher that memory-maps the old file
keeps reading it.

Renames alone are enough against a killed process. Against a machine that loses power they are
not: the rename can reach the disk before the data it names, leaving a complete-looking empty
file. So the new content is fsynced before the rename, and the parent directory after it (the
rename itself is an entry in the directory).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace `path` with `data`."""
    with atomic_file(path) as temporary:
        temporary.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that wants a file name (FAISS, Arrow, Parquet);
    renamed onto `path` when the block succeeds, removed when it fails."""
    path = Path(path)
    temporary = _temporary_beside(path)
    try:
        yield temporary
        _fsync_file(temporary)
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def atomic_directory(final_path: str | Path) -> Iterator[Path]:
    """An empty temporary directory beside `final_path` to fill; renamed into place when the block
    succeeds (an existing `final_path` is replaced), removed when it fails.

    One writer per target at a time (writers that may race hold a lock, as the zoo does): the
    temporary's name is fixed, so the next write of a target clears what a killed one left."""
    final_path = Path(final_path)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = final_path.with_name(final_path.name + TEMPORARY_SUFFIX)
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    try:
        yield temporary
        for root, _, files in os.walk(temporary):
            for name in files:
                _fsync_file(Path(root) / name)
        _replace_directory(temporary, final_path)
        _fsync_directory(final_path.parent)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def remove_leftovers(directory: str | Path) -> None:
    """Remove the temporaries that killed writers left in `directory`."""
    for leftover in Path(directory).glob(f"*{TEMPORARY_SUFFIX}"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _temporary_beside(path: Path) -> Path:
    # Beside the target, not in /tmp: a rename is atomic only within one file system.
    # The pid keeps processes writing the same file apart (every process writes open_clip's config).
    return path.with_name(f"{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")


def _replace_directory(new: Path, target: Path) -> None:
    """Put `new` at `target`. A directory cannot be renamed over a non-empty one, so an existing
    target is first renamed aside: between the two renames a reader finds no directory (and retries
    or fails), never a half-written one."""
    if not target.exists():
        os.rename(new, target)
        return
    retired = target.with_name(f"{target.name}.retired{TEMPORARY_SUFFIX}")
    shutil.rmtree(retired, ignore_errors=True)
    os.rename(target, retired)
    os.rename(new, target)
    shutil.rmtree(retired, ignore_errors=True)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
