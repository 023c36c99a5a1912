"""Renderers: the chosen ``--format`` and ``-o`` (``output``) and the pictures of a topology
(``topology``: nvidia-smi matrix, PCIe tree, rich tables, Graphviz DOT)."""
