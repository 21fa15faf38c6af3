"""A Wikipedia-style knowledge-base dump (JSON, JSON lines or Parquet) into internal `Doc`s.

An article has a title, sections, and image references; each non-empty section becomes
one document with id URL#SECTION (the ids Encyclopedic-VQA's evidence_section_id points
at), so retrieval works on passages rather than whole articles. Accepted article shapes:

    {"url" | "id": ..., "title": ..., "sections": [{"title": ..., "text": ...}], "images": [ref, ...]}
    {"url": ..., "title": ..., "section_titles": [...], "section_texts": [...],
     "image_urls": [ref, ...], "image_section_indices": [section of each image]}   (E-VQA's dump)

A JSON file holds an array of articles or an object keyed by article id. Image references
(URLs or relative paths) are looked up under the image root by path or base name; each
section keeps its first image (without `image_section_indices`, images belong to section 0).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mmrag.data.dataset import Doc
from mmrag.data.loaders import ImageRoot, LoaderError, image_names_from_reference, read_json, read_jsonl, require


def section_doc_id(article_id: str, section: int) -> str:
    return f"{article_id}#{section}"


def load_wiki_kb(path: str | Path, images: ImageRoot) -> list[Doc]:
    path = Path(path)
    docs: list[Doc] = []
    for where, key, article in _articles(path):
        docs.extend(_article_docs(article, key, images, where))
    if not docs:
        raise LoaderError(f"{path}: no article with a non-empty section")
    return docs


def _articles(path: Path):
    """(where, key, article) for every article of the dump, by file type."""
    if path.suffix == ".parquet":
        try:
            rows = pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise LoaderError(f"{path}: not a readable Parquet file ({exc})") from None
        return [(f"{path}: row {index}", None, row) for index, row in enumerate(rows)]
    if path.suffix == ".jsonl":
        return [(f"{path}:{line}", None, record) for line, record in read_jsonl(path)]
    if path.suffix == ".json":
        data = read_json(path)
        if isinstance(data, dict):
            return [(f"{path}: article {key!r}", key, article) for key, article in data.items()]
        if isinstance(data, list):
            return [(f"{path}: article {index}", None, article) for index, article in enumerate(data)]
        raise LoaderError(f"{path}: expected an array of articles or an object keyed by article id, "
                          f"got {type(data).__name__}")
    raise LoaderError(f"{path}: unknown KB dump type {path.suffix!r} (expected .json, .jsonl or .parquet)")


def _article_docs(article: dict, key: str | None, images: ImageRoot, where: str) -> list[Doc]:
    title = require(article, "title", str, where)
    article_id = article.get("url") or article.get("id") or key
    if not isinstance(article_id, str) or not article_id:
        raise LoaderError(f"{where}: article {title!r} has no 'url' or 'id' (and is not keyed by one)")
    section_titles, section_texts = _sections(article, where)
    first_image = _first_image_per_section(article, len(section_texts), where)
    docs = []
    for index, (section_title, text) in enumerate(zip(section_titles, section_texts)):
        if not text.strip():
            continue
        reference = first_image.get(index)
        image = None if reference is None else images.open(image_names_from_reference(reference),
                                                           f"{where} (image {reference!r})")
        full_title = f"{title} — {section_title}" if section_title and section_title != title else title
        docs.append(Doc(section_doc_id(article_id, index), full_title, text, image, article_id))
    return docs


def _sections(article: dict, where: str) -> tuple[list[str], list[str]]:
    if article.get("sections") is not None:
        sections = require(article, "sections", list, where)
        if not all(isinstance(s, dict) and isinstance(s.get("text"), str) for s in sections):
            raise LoaderError(f"{where}: field 'sections': expected objects with a string 'text', got {sections!r}")
        return [s.get("title") or "" for s in sections], [s["text"] for s in sections]
    texts = require(article, "section_texts", list, where)
    titles = article.get("section_titles") or [""] * len(texts)
    if len(titles) != len(texts) or not all(isinstance(t, str) for t in [*titles, *texts]):
        raise LoaderError(f"{where}: fields 'section_titles' and 'section_texts' must be string lists of equal "
                          f"length, got {len(titles)} and {len(texts)}")
    return titles, texts


def _first_image_per_section(article: dict, num_sections: int, where: str) -> dict[int, str]:
    references = article.get("images", article.get("image_urls")) or []
    if not isinstance(references, list) or not all(isinstance(r, str) and r for r in references):
        raise LoaderError(f"{where}: field 'images' / 'image_urls': expected a list of non-empty strings")
    sections = article.get("image_section_indices") or [0] * len(references)
    if len(sections) != len(references) or not all(isinstance(s, int) and 0 <= s < num_sections for s in sections):
        raise LoaderError(f"{where}: field 'image_section_indices': expected one section index "
                          f"(0..{num_sections - 1}) per image reference ({len(references)})")
    first: dict[int, str] = {}
    for reference, section in zip(references, sections):
        first.setdefault(section, reference)
    return first
