"""Published versions kept in the run's storage: what a replica reads when the object store lost them."""

from __future__ import annotations

import pytest
import torch

from mmrag import storage
from mmrag.training.published_weights import WEIGHTS_DIR, component_file, read_published, write_published


def test_each_version_reads_back_bit_identical_and_only_the_newest_are_kept(tmp_path):
    written = [write_published(tmp_path, version, {"translator": {"w": torch.full((3,), float(version))},
                                                   "reranker": {"head": torch.arange(version + 1)}}, keep=2)
               for version in range(1, 5)]
    kept = sorted({name.split("/")[0] for name in storage.list_files(str(tmp_path / WEIGHTS_DIR))})
    assert [name.split("-")[1] for name in kept] == ["v000003", "v000004"], "keep=2: versions 1 and 2 pruned"
    assert torch.equal(read_published(component_file(written[3], "translator"))["w"], torch.full((3,), 4.0))
    assert torch.equal(read_published(component_file(written[2], "reranker"))["head"], torch.arange(4))
    with pytest.raises(FileNotFoundError, match="-v000001/translator.pt: published weights not found"):
        read_published(component_file(written[0], "translator"))
