"""gpucomm command-line interface (typer).  One module per command group; each parses its
arguments, calls one function of ``probes``/``planners`` and renders the result."""
__version__ = "0.1.0"
