"""A run's shared storage by URI: a local or NFS path, `s3://bucket/prefix`, `gs://bucket/prefix`.

`train.run_dir` is such a URI (as Ray Train's `storage_path`), resolved through `pyarrow.fs`.
Every process writes its own part there: the driver its state and metrics, each learner rank
its checkpoint shards, rank 0 the export. A writer works in a local scratch directory
(`MMRAG_SCRATCH_DIR`, else the system's temporary directory) and uploads when it is done, then
records what it wrote in `_parts/<part>.json` beside it, so that a reader can tell a complete
directory from one whose writer died half-way (`missing_files`). Local paths are written in
place (no copy). S3 query parameters go on the URI (`s3://b/p?endpoint_override=host:9000&scheme=http`);
credentials come from the environment (AWS_ACCESS_KEY_ID, ...), as for any AWS client.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from mmrag.atomic import atomic_write_text

PARTS = "_parts"
"""Subdirectory of a written directory holding one listing per part (`write_part`)."""


def is_local(uri: str | os.PathLike) -> bool:
    return "://" not in str(uri) or str(uri).startswith("file://")


def resolve(uri: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    """The file system of `uri` and the path inside it (a relative local path is made absolute)."""
    text = str(uri)
    if "://" not in text:
        return pafs.LocalFileSystem(), os.path.abspath(text)
    try:
        return pafs.FileSystem.from_uri(text)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"train.run_dir: cannot open {text!r} as storage ({exc}); expected a path, "
                         f"s3://bucket/prefix or gs://bucket/prefix") from None


def join(uri: str | os.PathLike, *names: str) -> str:
    """`uri` with `names` appended to its path (query parameters, e.g. an S3 endpoint, kept at the end)."""
    text = str(uri)
    if is_local(text):
        return str(Path(text, *names))
    base, _, query = text.partition("?")
    joined = posixpath.join(base, *names)
    return f"{joined}?{query}" if query else joined


def scratch_root() -> Path:
    """Where this process stages files before uploading them: node-local, never shared."""
    root = Path(os.environ.get("MMRAG_SCRATCH_DIR") or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    return root


def exists(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_bytes(uri: str) -> bytes:
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode()


def write_text(uri: str, text: str) -> None:
    """Replace `uri`'s content as one step: a rename on a local disk, a single PUT on an object store."""
    fs, path = resolve(uri)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        atomic_write_text(path, text)
        return
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode())


def delete_dir(uri: str) -> None:
    fs, path = resolve(uri)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def list_files(uri: str) -> dict[str, int]:
    """Every file under `uri`: relative path -> size in bytes (empty when it does not exist)."""
    fs, path = resolve(uri)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return {}
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return {posixpath.relpath(info.path, path): info.size for info in infos if info.type == pafs.FileType.File}


def upload(local_dir: str | Path, uri: str) -> None:
    fs, path = resolve(uri)
    fs.create_dir(path, recursive=True)
    pafs.copy_files(str(local_dir), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def download(uri: str, local_dir: str | Path) -> None:
    fs, path = resolve(uri)
    Path(local_dir).mkdir(parents=True, exist_ok=True)
    pafs.copy_files(path, str(local_dir), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def write_part(uri: str, part: str, files: dict[str, int]) -> None:
    """Record that `part` wrote `files` (relative path -> size) under `uri`."""
    write_text(join(uri, PARTS, f"{part}.json"), json.dumps(files, sort_keys=True))


def missing_files(uri: str, parts: list[str]) -> list[str]:
    """What `parts` recorded under `uri` that is not there (a part with no listing is named `_parts/<part>.json`)."""
    present = list_files(uri)
    missing = []
    for part in parts:
        listing = join(uri, PARTS, f"{part}.json")
        if f"{PARTS}/{part}.json" not in present:
            missing.append(f"{PARTS}/{part}.json")
            continue
        for name, size in json.loads(read_text(listing)).items():
            if present.get(name) != size:
                missing.append(name)
    return missing


@contextlib.contextmanager
def writing_to(uri: str | os.PathLike, part: str) -> Iterator[Path]:
    """A local directory to write `part`'s files into; on success they are moved (local) or uploaded to `uri`,
    then listed in `_parts/<part>.json`. A writer that dies leaves its part unlisted, so never complete."""
    uri = str(uri)
    if is_local(uri):
        target = Path(resolve(uri)[1])
        staging = target / f".staging-{part}"  # same disk: each file is then renamed into place
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    else:
        staging = Path(tempfile.mkdtemp(prefix=f"mmrag-{part}-", dir=scratch_root()))
    try:
        yield staging
        files = {p.relative_to(staging).as_posix(): p.stat().st_size for p in staging.rglob("*") if p.is_file()}
        if is_local(uri):
            for name in files:
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / name, target / name)
        else:
            upload(staging, uri)
        write_part(uri, part, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def reading_from(uri: str | os.PathLike) -> Iterator[Path]:
    """A local directory holding `uri`'s files: the directory itself when local, else a scratch copy."""
    uri = str(uri)
    if is_local(uri):
        yield Path(resolve(uri)[1])
        return
    staging = Path(tempfile.mkdtemp(prefix="mmrag-download-", dir=scratch_root()))
    try:
        download(uri, staging)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def local_mirror(uri: str | os.PathLike) -> Path:
    """The driver's working copy of a run directory: the directory itself when local, else a scratch directory
    named after the URI (metrics and config are written there and uploaded with every checkpoint)."""
    uri = str(uri)
    if is_local(uri):
        return Path(resolve(uri)[1])
    return scratch_root() / "mmrag-runs" / hashlib.sha1(uri.encode()).hexdigest()[:16]


def mirror_down(uri: str | os.PathLike, local_dir: Path, names: tuple[str, ...]) -> None:
    """Fetch `names` (files or directories) from remote `uri` into `local_dir`, replacing what is there."""
    if is_local(uri):
        return
    for name in names:
        source, target = join(uri, name), Path(local_dir) / name
        fs, path = resolve(source)
        kind = fs.get_file_info(path).type
        if kind == pafs.FileType.File:
            target.parent.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(path, str(target), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        elif kind == pafs.FileType.Directory:
            shutil.rmtree(target, ignore_errors=True)
            download(source, target)


def mirror_up(local_dir: Path, uri: str | os.PathLike, names: tuple[str, ...]) -> None:
    """Upload `names` (files or directories) of `local_dir` to remote `uri` (nothing to do when it is local)."""
    if is_local(uri):
        return
    for name in names:
        source = Path(local_dir) / name
        if source.is_dir():
            upload(source, join(uri, name))
        elif source.is_file():
            fs, path = resolve(join(uri, name))
            fs.create_dir(posixpath.dirname(path), recursive=True)
            pafs.copy_files(str(source), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
