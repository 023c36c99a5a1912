"""``gpucomm predict``: what nccl-tests will show for a collective on this topology -- time, algbw,
busbw and the algorithm NCCL's tuning model picks (:mod:`gpucomm.planners.collectives.cost`) -- and,
with a measured nccl-tests run, the same prediction row by row beside it
(:mod:`gpucomm.planners.collectives.compare`).  Pure functions, no I/O."""
from __future__ import annotations

from typing import Optional, Union

from gpucomm.planners.collectives import compare, cost
from gpucomm.planners.nccl.tuning import USER_ALGOS
from gpucomm.probes import units
from gpucomm.probes.errors import InputError
from gpucomm.probes.formats.nccltests import TYPE_SIZES
from gpucomm.probes.topology import Topology

PREDICT_SCHEMA = "gpucomm.predict/v1"


def build_prediction(doc: Union[Topology, dict], collective: str, size: str, nodes: int = 1, gpus_per_node: Optional[int] = None,
                     fabric_gbps: Optional[float] = None, algo: str = "auto", gpus: Optional[list] = None,
                     dtype: str = "float") -> dict:
    """The ``gpucomm.predict/v1`` document of ``gpucomm predict`` (no I/O)."""
    topo = Topology.of(doc)
    coll = units.normalize_collective(collective)
    sizes = units.parse_sizes(size, "--size")
    dt = (dtype or "float").lower()
    if dt not in TYPE_SIZES:
        raise InputError(f"--dtype {dtype}: unknown type", expected=", ".join(sorted(TYPE_SIZES)))
    algo_l = (algo or "auto").lower()
    if algo_l not in USER_ALGOS:
        raise InputError(f"--algo {algo}: unknown algorithm", expected=", ".join(USER_ALGOS))
    graph = cost.summarize(topo, nodes=nodes, gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, gpus=gpus)
    rows = cost.predict(graph, coll, sizes, algo=algo_l, dtype_bytes=TYPE_SIZES[dt])
    for r in rows:
        r["type"] = dt
    return {
        "schema": PREDICT_SCHEMA,
        "collective": coll,
        "nodes": graph.n_nodes,
        "gpus_per_node": graph.gpus_per_node,
        "n_ranks": graph.n_ranks,
        "algo": algo_l,
        "fabric_gbps": fabric_gbps,
        "graph": cost.summary_dict(graph),
        "rows": rows,
        "warnings": list(topo.warnings),
    }


def build_comparison(doc: Union[Topology, dict], text: str, path: str, collective: Optional[str] = None,
                     nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
                     fabric_gbps: Optional[float] = None, algo: str = "auto",
                     gpus: Optional[list] = None) -> dict:
    """The ``gpucomm.predict-compare/v1`` document: every selected run of the nccl-tests output
    ``text`` (read from ``path``) against the prediction for the same collective, ranks and sizes.
    No I/O.  Raises InputError (one line) for a file that does not parse or a run that does not fit
    the topology."""
    topo = Topology.of(doc)
    algo_l = (algo or "auto").lower()
    if algo_l not in USER_ALGOS:
        raise InputError(f"--algo {algo}: unknown algorithm", expected=", ".join(USER_ALGOS))
    runs, warnings = compare.select_runs(text, path, collective)
    fixed_gpn = len(gpus) if gpus else gpus_per_node
    if gpus and gpus_per_node and gpus_per_node != len(gpus):
        raise InputError(f"--gpus lists {len(gpus)} GPUs but --gpus-per-node is {gpus_per_node}")
    topo_gpus = len(topo.gpus)
    graphs: dict = {}
    out = []
    for run in runs:
        where = f"{path}:{run['rows'][0]['line']}"
        n, gpn, notes = compare.resolve_layout(run["n_ranks"], run["nodes"], topo_gpus, nodes=nodes,
                                               gpus_per_node=fixed_gpn, where=where)
        key = (n, gpn)
        if key not in graphs:   # one NCCL graph search per layout, shared by the runs of a log
            graphs[key] = cost.summarize(topo, nodes=n, gpus_per_node=gpn, fabric_gbps=fabric_gbps, gpus=gpus)
        c = compare.compare_run(topo, run, nodes=n, gpus_per_node=gpn, fabric_gbps=fabric_gbps, algo=algo_l,
                                gpus=gpus, graph=graphs[key])
        c["graph"] = cost.summary_dict(c["graph"])
        c["fabric_gbps"] = fabric_gbps
        c["notes"] = notes + [w for w in run.get("warnings") or []]
        for r in c["rows"]:
            if r["error_pct"] is not None:
                r["error_pct"] = round(r["error_pct"], 4)
        m = c["summary"]["median_abs_error_pct_ge_1MiB"]
        if m is not None:
            c["summary"]["median_abs_error_pct_ge_1MiB"] = round(m, 4)
        if c["summary"]["largest"] and c["summary"]["largest"]["error_pct"] is not None:
            c["summary"]["largest"]["error_pct"] = round(c["summary"]["largest"]["error_pct"], 4)
        out.append(c)
    return {"schema": compare.SCHEMA, "source": path, "comparisons": out,
            "warnings": warnings + list(topo.warnings)}
