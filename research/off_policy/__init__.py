"""Off-policy training at policy lag 1, 4 and 8: the truncated importance correction, the drift before a ranking
collapse, and the trust region that bounds it. See README.md."""
