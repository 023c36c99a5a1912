"""Readers of recorded tool output: ``nvidia-smi topo -m`` and ``nvlink -s``, NCCL topology XML,
``rocm-smi --showtopo``, nccl-tests tables and NCCL debug logs.  Text in, plain records out."""
