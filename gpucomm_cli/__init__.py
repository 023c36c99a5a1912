"""gpucomm: how the GPUs of a node and a cluster are wired, and what to do about it.

Installed as one package, ``gpucomm`` (this folder, ``gpucomm_cli/``, is its root):

* ``gpucomm.probes``   -- probe -> record -> topology document -> the typed :class:`Topology`
* ``gpucomm.planners`` -- decisions over a Topology (NCCL's model, collectives, placement, launch, health)
* ``gpucomm.app`` / ``gpucomm.commands`` / ``gpucomm.render`` -- the command line: parse, call one
  planner function, render.

Importing ``gpucomm`` imports nothing else (start-up time matters to a CLI).
"""
__version__ = "0.2.1"
