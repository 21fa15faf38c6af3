"""mmrag.atomic: a writer that fails part way leaves the old content and no temporary behind."""

from __future__ import annotations

import pytest

from mmrag.atomic import (TEMPORARY_SUFFIX, atomic_directory, atomic_file, atomic_write_bytes, atomic_write_text,
                          remove_leftovers)


class WriterDied(Exception):
    pass


def test_text_written_atomically_replaces_the_old_text_and_leaves_only_the_target(tmp_path):
    target = tmp_path / "note.txt"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [path.name for path in tmp_path.iterdir()] == ["note.txt"]


def test_a_writer_that_fails_half_way_leaves_the_old_file_intact_and_no_temporary(tmp_path):
    target = tmp_path / "shard.bin"
    atomic_write_bytes(target, b"complete old shard")
    with pytest.raises(WriterDied):
        with atomic_file(target) as temporary:
            temporary.write_bytes(b"half of a new")
            raise WriterDied
    assert target.read_bytes() == b"complete old shard"
    assert [path.name for path in tmp_path.iterdir()] == ["shard.bin"]


def test_a_directory_is_renamed_into_place_over_the_old_one(tmp_path):
    target = tmp_path / "step_000004"
    with atomic_directory(target) as staging:
        (staging / "old.pt").write_text("4a")
    with atomic_directory(target) as staging:
        assert staging.parent == tmp_path and staging != target
        (staging / "nested").mkdir()
        (staging / "nested" / "new.pt").write_text("4b")
    assert [str(path.relative_to(target)) for path in sorted(target.rglob("*"))] == ["nested", "nested/new.pt"]
    assert [path.name for path in tmp_path.iterdir()] == ["step_000004"]


def test_a_directory_block_that_fails_keeps_the_old_directory_and_removes_the_staging_one(tmp_path):
    target = tmp_path / "export"
    with atomic_directory(target) as staging:
        (staging / "weights").write_text("v1")
    with pytest.raises(WriterDied):
        with atomic_directory(target) as staging:
            (staging / "weights").write_text("v2, half")
            raise WriterDied
    assert (target / "weights").read_text() == "v1"
    assert [path.name for path in tmp_path.iterdir()] == ["export"]


def test_leftovers_of_killed_writers_are_removed_and_nothing_else(tmp_path):
    (tmp_path / f"shard-000.faiss.123{TEMPORARY_SUFFIX}").write_text("half")
    (tmp_path / f"step_000002.77{TEMPORARY_SUFFIX}").mkdir()
    (tmp_path / "shard-000.faiss").write_text("whole")
    remove_leftovers(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["shard-000.faiss"]
