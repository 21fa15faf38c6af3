"""Whether a reranker head fitted on gold labels generalises to entities it never saw. See README.md."""
