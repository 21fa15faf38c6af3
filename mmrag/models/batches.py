"""The one input check every batched model call shares: its columns (images, questions, evidence, ...) line up.

Apart from `mmrag.models.lvlm` so that the backends that load no LVLM (the readers, the rule reward) check their
batches without importing transformers: each actor process imports only what its backend runs.
"""

from __future__ import annotations


def check_batch_lengths(**columns: list | None) -> None:
    """Raise naming each column's length when the columns of one batch differ in length."""
    sizes = {name: len(col) for name, col in columns.items() if col is not None}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"batch columns differ in length: {sizes}")
