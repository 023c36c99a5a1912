"""Command modules, one per command group, each with ``register(app)``: parse the arguments, call one
function of ``gpucomm.probes``/``gpucomm.planners``, render the result with ``gpucomm.render``."""
