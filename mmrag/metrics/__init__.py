"""Answer metrics: the lenient ones of the training reward and evaluation (answers, benchmarks) and each
benchmark's official score (okvqa, aokvqa, infoseek, evqa; shared parts in scoring, official, predictions)."""
