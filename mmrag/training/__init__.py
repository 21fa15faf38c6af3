"""Training: the staged rollout of one batch, the local updates, evaluation, and the metrics log."""
