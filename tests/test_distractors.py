"""`mmrag synth --kb-docs N`: N text distractor passages after the world's documents, in small row groups."""

from __future__ import annotations

import re

import pyarrow.parquet as pq

from mmrag.data.dataset import KB_SCHEMA, load_kb
from mmrag.data.distractors import ROW_GROUP_ROWS
from mmrag.data.world import RELATIONS
from mmrag.pipelines.cli import main


def test_kb_docs_appends_distractors_that_state_no_fact_and_leave_the_questions_alone(tmp_path):
    assert main(["synth", "--out", str(tmp_path / "plain"), "--entities", "6", "--image-size", "32"]) == 0
    for name in ("a", "b"):
        assert main(["synth", "--out", str(tmp_path / name), "--entities", "6", "--image-size", "32",
                     "--kb-docs", "2500"]) == 0
    plain, kb = load_kb(tmp_path / "plain"), load_kb(tmp_path / "a")
    assert len(kb) == len(plain) + 2500 and kb[:len(plain)] == plain
    distractors = kb[len(plain):]
    assert [doc.doc_id for doc in distractors[:2]] == ["x00000000", "x00000001"]
    assert len({doc.doc_id for doc in kb}) == len(kb)
    assert all(doc.image is None and doc.entity_id == "" and doc.text.startswith(doc.title) for doc in distractors)
    facts = [re.compile(relation.answer_pattern) for relation in RELATIONS.values()]
    assert not any(pattern.search(doc.text) for doc in distractors for pattern in facts)
    assert len({doc.text.split(", the ")[1] for doc in distractors}) > 500  # many different looks
    for split in ("train", "val", "test"):  # the very same question files (loaded, a question only points into its file)
        assert (tmp_path / "a" / f"questions_{split}.parquet").read_bytes() == \
            (tmp_path / "plain" / f"questions_{split}.parquet").read_bytes()
    assert (tmp_path / "a" / "kb.parquet").read_bytes() == (tmp_path / "b" / "kb.parquet").read_bytes()
    parquet = pq.ParquetFile(tmp_path / "a" / "kb.parquet")
    assert parquet.schema_arrow.equals(KB_SCHEMA, check_metadata=False)
    sizes = [parquet.metadata.row_group(group).num_rows for group in range(parquet.metadata.num_row_groups)]
    assert max(sizes) <= ROW_GROUP_ROWS and sum(sizes) == len(kb)
