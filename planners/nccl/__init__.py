"""NCCL's own model of a node, reproduced: the system graph (topo.cc), paths (paths.cc) and the
channel search (search.cc)."""
