"""Loaders for public KB-VQA formats, turning them into the internal Parquet format.

First stage of the data flow for real benchmarks: each module here reads one public
format (InfoSeek, Encyclopedic-VQA, OK-VQA, A-OKVQA questions; a Wikipedia-style KB dump)
into `mmrag.data.dataset.Question` / `Doc` objects, which `mmrag convert` writes with
`write_questions` / `write_kb`, and into the references their official scores need
(`mmrag.metrics`), which `mmrag convert` writes beside them and `mmrag score` reads from
the annotation files directly. This module holds what they share: `LoaderError` (every
message names the file and the line, row, or record index and id), image lookup under an
image root (a missing image is an error, or skipped and counted), and JSON readers.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from mmrag.data.dataset import decode_image

OnMissingImage = Literal["error", "skip"]
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".JPEG", ".JPG", ".PNG")


class LoaderError(ValueError):
    """A public-format file that cannot be converted; the message names file and line (or row)."""


@dataclass
class ImageRoot:
    """Finds images by file name under `root` (directly, or anywhere below it by base name)."""

    root: Path
    on_missing: OnMissingImage = "error"
    missing: list[str] = field(default_factory=list)
    """Where-strings of the records whose image was missing and skipped."""
    _by_name: dict[str, Path] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if not self.root.is_dir():
            raise LoaderError(f"{self.root}: image root is not a directory")
        if self.on_missing not in ("error", "skip"):
            raise LoaderError(f"on_missing: expected 'error' or 'skip', got {self.on_missing!r}")

    def find(self, names: list[str]) -> Path | None:
        """The first of `names` (relative paths or bare file names) that exists under the root."""
        for name in names:
            direct = self.root / name
            if direct.is_file():
                return direct
        by_name = self._index()
        return next((by_name[Path(name).name] for name in names if Path(name).name in by_name), None)

    def open(self, names: list[str], where: str) -> Image.Image | None:
        """The image, RGB; None (and counted) when it is missing and skipping was asked for."""
        path = self.find(names)
        if path is None:
            if self.on_missing == "skip":
                self.missing.append(where)
                return None
            raise LoaderError(f"{where}: image not found under {self.root} (looked for {', '.join(names)}); "
                              "pass on_missing='skip' (`--on-missing-image skip`) to skip such records")
        try:
            return decode_image(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise LoaderError(f"{where}: image {path}: {exc}") from None

    def _index(self) -> dict[str, Path]:
        # Built once, on the first miss: real image dumps nest files in sub-folders.
        if self._by_name is None:
            self._by_name = {}
            for path in sorted(self.root.rglob("*")):
                if path.is_file():
                    self._by_name.setdefault(path.name, path)
        return self._by_name


def with_extensions(stem: str) -> list[str]:
    """Candidate file names for an image id given without extension."""
    return [stem] if Path(stem).suffix in IMAGE_EXTENSIONS else [stem + ext for ext in IMAGE_EXTENSIONS]


def image_names_from_reference(reference: str) -> list[str]:
    """File names an image reference may be stored under: a relative path, or the base name of a URL."""
    parsed = urllib.parse.urlparse(reference)
    if parsed.scheme in ("http", "https"):
        return [urllib.parse.unquote(Path(parsed.path).name)]
    return [reference, Path(reference).name]


def require(record: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`record[name]`, checked to be a `kind` (a non-empty one, for strings and lists)."""
    if not isinstance(record, dict):
        raise LoaderError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if name not in record or record[name] is None:
        raise LoaderError(f"{where}: missing field {name!r} (fields present: {', '.join(sorted(record)) or 'none'})")
    value = record[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        expected = " or ".join(k.__name__ for k in kinds)
        raise LoaderError(f"{where}: field {name!r}: expected {expected}, got {value!r}")
    if isinstance(value, (str, list)) and not value:
        raise LoaderError(f"{where}: field {name!r}: empty")
    return value


def string_list(record: dict, name: str, where: str) -> list[str]:
    """`record[name]` as a non-empty list of non-empty strings."""
    values = require(record, name, list, where)
    if any(not isinstance(value, str) or not value.strip() for value in values):
        raise LoaderError(f"{where}: field {name!r}: expected a list of non-empty strings, got {values!r}")
    return values


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, record) of every non-blank line of a JSON-lines file."""
    records = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if line.strip():
            try:
                records.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise LoaderError(f"{path}:{number}: not a JSON record ({exc.msg})") from None
    return records


def read_json(path: Path) -> Any:
    """The parsed JSON file; a syntax error names the file, line and column."""
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise LoaderError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def json_records(data: Any, path: Path, key: str | None = None) -> list[Any]:
    """The records of the parsed JSON file `path`: its top-level array, or the array under `key` of its
    top-level object."""
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise LoaderError(f"{path}: expected a JSON object with the key {key!r}")
        data = data[key]
    if not isinstance(data, list):
        raise LoaderError(f"{path}: expected a JSON array of records{f' under {key!r}' if key else ''}, "
                          f"got {type(data).__name__}")
    return data


def record_where(path: Path, index: int, record: Any, id_field: str) -> str:
    """How messages name a record: "FILE: record INDEX", with its id when it has one."""
    identifier = record.get(id_field) if isinstance(record, dict) else None
    if isinstance(identifier, (str, int)) and not isinstance(identifier, bool):
        return f"{path}: record {index} ({id_field} {identifier!r})"
    return f"{path}: record {index}"


def _read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LoaderError(f"{path}: cannot read ({exc})") from None
