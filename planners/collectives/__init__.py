"""Collectives over a topology: our ring search, NCCL's double binary trees, the cost model behind
``predict``, and comparisons with measured runs."""
