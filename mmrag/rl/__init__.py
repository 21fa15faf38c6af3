"""Reward backpropagation: the algorithm's core, plain torch and no Ray.

`plackett_luce`: probabilities of the reranker's ordered selections (candidates + STOP).
`rollout`: the rollout tree of one question, value backprop and advantages.
`losses`: the local losses that turn scored samples into gradients for each component.
"""
