"""Models: encoders, the LVLM wrappers, the reranker head, the reader and reward scorers."""
