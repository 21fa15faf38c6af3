"""The KB parts as a Ray Data datasource: how `mmrag index` reads the knowledge base on Ray.

Feeds the encoder pool of `mmrag.actors.index_build.RayRunner`: one read task per pending part,
each reading that part's Parquet row groups (`KBFile.rows_to_embed`) into one block. Kept
apart from the encoder code, so the processes that run read tasks import pyarrow, not torch.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pyarrow as pa
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from mmrag.retrieval.kb_parts import KBFile, KBPart


def _read_part(kb: KBFile, part: KBPart, doc_id_problems: dict[int, str]) -> list[pa.Table]:
    return [kb.rows_to_embed(part, doc_id_problems)]


class KBPartsDatasource(Datasource):
    """Parts of one KB file, one read task and one block each."""

    def __init__(self, kb: KBFile, parts: list[KBPart], doc_id_problems: dict[int, dict[int, str]]) -> None:
        super().__init__()
        self.kb, self.parts, self.doc_id_problems = kb, parts, doc_id_problems

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """One task per part, whatever `parallelism` asks: a part is the unit of resuming."""
        return [ReadTask(partial(_read_part, self.kb, part, self.doc_id_problems.get(part.number, {})),
                         BlockMetadata(num_rows=part.num_rows, size_bytes=None, exec_stats=None,
                                       input_files=[str(self.kb.path)]),
                         per_task_row_limit=per_task_row_limit)
                for part in self.parts]
