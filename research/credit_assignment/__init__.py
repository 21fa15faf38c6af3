"""Why shared reward trails tree backprop: what the ranking learns from, step by step. See README.md."""
