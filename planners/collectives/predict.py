"""``gpucomm predict``: what nccl-tests will show for a collective on this topology -- time, algbw,
busbw and the algorithm NCCL's tuning model picks (:mod:`gpucomm.planners.collectives.cost`) -- and,
with a measured nccl-tests run, the same prediction row by row beside it
(:mod:`gpucomm.planners.collectives.compare`).  Pure functions, no I/O."""
from __future__ import annotations

from typing import Optional, Union

from gpucomm.planners.collectives import calibrate, compare, cost, timing
from gpucomm.planners.collectives import transport as tr
from gpucomm.planners.nccl.tuning import USER_ALGOS, ll128_c2c_by_version
from gpucomm.probes import units
from gpucomm.probes.errors import InputError
from gpucomm.probes.formats.nccltests import TYPE_SIZES, ignored_summary, library_code, version_text
from gpucomm.probes.topology import Topology

PREDICT_SCHEMA = "gpucomm.predict/v1"


def calibration_profile(calibration: Optional[dict], source: Optional[str], topo: Topology) -> tuple[Optional[timing.Profile], list, Optional[dict]]:
    """(profile, notes, the ``calibration`` record of an output) of a ``gpucomm.calibration/v1``
    document passed with ``--calibration`` (all None/empty without one)."""
    if calibration is None:
        return None, [], None
    src = source or "<calibration>"
    prof = calibrate.profile_from_document(calibration, src)
    rec = {"source": src, "fitted": list(calibration.get("fitted") or []), "parameters": prof.to_dict()}
    return prof, calibrate.applied_note(calibration, src, topo), rec


def build_prediction(doc: Union[Topology, dict], collective: str, size: str, nodes: int = 1, gpus_per_node: Optional[int] = None,
                     fabric_gbps: Optional[float] = None, algo: str = "auto", gpus: Optional[list] = None,
                     dtype: str = "float", calibration: Optional[dict] = None,
                     calibration_source: Optional[str] = None, transport: Optional[str] = None,
                     nccl_log: Optional[dict] = None, nvlink_domain: Optional[int] = None) -> dict:
    """The ``gpucomm.predict/v1`` document of ``gpucomm predict`` (no I/O).  ``nvlink_domain``: trays
    per NVLink domain (:func:`gpucomm.planners.collectives.cost.graphs`).  ``calibration``: a
    ``gpucomm.calibration/v1`` document whose fitted parameters replace the defaults; ``transport``:
    the ``--transport`` value; ``nccl_log``: a parsed NCCL debug log of a run on these nodes
    (:func:`gpucomm.planners.collectives.transport.choose`)."""
    topo = Topology.of(doc)
    t = tr.choose(topo, transport, tr.from_log(nccl_log, (nccl_log or {}).get("source") or "the NCCL log"))
    profile, cal_notes, cal_rec = calibration_profile(calibration, calibration_source, topo)
    coll = units.normalize_collective(collective)
    sizes = units.parse_sizes(size, "--size")
    dt = (dtype or "float").lower()
    if dt not in TYPE_SIZES:
        raise InputError(f"--dtype {dtype}: unknown type", expected=", ".join(sorted(TYPE_SIZES)))
    algo_l = (algo or "auto").lower()
    if algo_l not in USER_ALGOS:
        raise InputError(f"--algo {algo}: unknown algorithm", expected=", ".join(USER_ALGOS))
    graph = cost.summarize(topo, nodes=nodes, gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, gpus=gpus,
                           profile=profile, transport=t, nvlink_domain=nvlink_domain)
    profile = profile or tr.profile(t)
    rows = cost.predict(graph, coll, sizes, algo=algo_l, dtype_bytes=TYPE_SIZES[dt], profile=profile)
    for r in rows:
        r["type"] = dt
    if cal_notes:
        graph = _with_notes(graph, cal_notes)
    out = {
        "schema": PREDICT_SCHEMA,
        "collective": coll,
        "nodes": graph.n_nodes,
        "gpus_per_node": graph.gpus_per_node,
        "n_ranks": graph.n_ranks,
        "algo": algo_l,
        "fabric_gbps": fabric_gbps,
        "transport": transport_record(t, graph.n_nodes, profile is not None and cal_rec is not None, fabric_gbps,
                                      graph.type_inter),
        "graph": cost.summary_dict(graph),
        "rows": rows,
        "warnings": list(topo.warnings),
    }
    if cal_rec is not None:
        out["calibration"] = cal_rec
    return out


def transport_record(t: "tr.Transport", nodes: int, calibrated: bool = False,
                     fabric_gbps: Optional[float] = None, type_inter: Optional[str] = None) -> dict:
    """The ``transport`` record of a prediction: the transport, why, and what sets its efficiency."""
    rec = t.to_dict()
    if nodes <= 1:
        rec["applies"] = "no: one node"
    elif fabric_gbps is not None:
        rec["applies"] = f"no: --fabric-gbps {fabric_gbps:g} sets what a NIC delivers"
    elif calibrated:
        rec["applies"] = "no: the calibration profile's fitted network rate"
    else:
        e = tr.efficiency(t)
        rec["applies"] = (f"{e.net:g} x line rate" + (f", at most {e.cap_gbps:g} Gb/s per NIC" if e.cap_gbps else "")
                          + (f", all_to_all x {e.alltoall:g}" if e.alltoall != 1.0 else "") + f" ({e.note})")
        if t.gdr and t.kind != "socket" and (type_inter or "").upper() in tr.HOST_BRIDGE_PATHS:
            rec["applies"] += (f"; GPUDirect RDMA crosses the CPU root complex ({type_inter}): at most "
                               f"{tr.GDR_HOST_BRIDGE_EFFICIENCY:g} x the GPU's PCIe bandwidth per NIC "
                               f"(GDR_HOST_BRIDGE_EFFICIENCY)")
    return rec


def _with_notes(graph, notes: list):
    from dataclasses import replace

    return replace(graph, notes=tuple(notes) + tuple(n for n in graph.notes if n not in notes))


def build_comparison(doc: Union[Topology, dict], text: str, path: str, collective: Optional[str] = None,
                     nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
                     fabric_gbps: Optional[float] = None, algo: str = "auto",
                     gpus: Optional[list] = None, calibration: Optional[dict] = None,
                     calibration_source: Optional[str] = None, transport: Optional[str] = None,
                     nccl_log: Optional[dict] = None, nvlink_domain: Optional[int] = None) -> dict:
    """The ``gpucomm.predict-compare/v1`` document: every selected run of the nccl-tests output
    ``text`` (read from ``path``) against the prediction for the same collective, ranks and sizes.
    The transport of each run: the NCCL INFO lines in the output, else ``nccl_log`` (a parsed NCCL
    log next to it), else ``transport`` (--transport), else the probe's.  No I/O.  Raises InputError
    (one line) for a file that does not parse or a run that does not fit the topology."""
    topo = Topology.of(doc)
    side = tr.from_log(nccl_log, (nccl_log or {}).get("source") or "the NCCL log")
    profile, cal_notes, cal_rec = calibration_profile(calibration, calibration_source, topo)
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
        own = tr.from_log({"net": run.get("nccl_net")}, f"{where} (the run's NCCL lines)")
        t = own or side or tr.choose(topo, transport)
        if (own or side) and transport and tr.parse(transport).name != t.name:
            notes.append(f"--transport {transport} is not what the run's NCCL lines show ({t.name}); predicted "
                         f"with {t.name}")
        key = (n, gpn, t.name)
        if key not in graphs:   # one NCCL graph search per layout, shared by the runs of a log
            graphs[key] = cost.summarize(topo, nodes=n, gpus_per_node=gpn, fabric_gbps=fabric_gbps, gpus=gpus,
                                         profile=profile, transport=t, nvlink_domain=nvlink_domain)
        graph, era_note = _as_run_nccl(graphs[key], run, profile, where)
        if era_note:
            notes.append(era_note)
        c = compare.compare_run(topo, run, nodes=n, gpus_per_node=gpn, fabric_gbps=fabric_gbps, algo=algo_l,
                                gpus=gpus, graph=graph, profile=profile or tr.profile(t))
        c["transport"] = transport_record(t, n, profile is not None, fabric_gbps, graph.type_inter)
        c["graph"] = cost.summary_dict(_with_notes(c["graph"], cal_notes) if cal_notes else c["graph"])
        c["fabric_gbps"] = fabric_gbps
        ignored = ignored_summary(run)
        c["notes"] = notes + [w for w in run.get("warnings") or []] + ([f"{where}: {ignored}"] if ignored else [])
        for r in c["rows"]:
            if r["error_pct"] is not None:
                r["error_pct"] = round(r["error_pct"], 4)
        m = c["summary"]["median_abs_error_pct_ge_1MiB"]
        if m is not None:
            c["summary"]["median_abs_error_pct_ge_1MiB"] = round(m, 4)
        if c["summary"]["largest"] and c["summary"]["largest"]["error_pct"] is not None:
            c["summary"]["largest"]["error_pct"] = round(c["summary"]["largest"]["error_pct"], 4)
        out.append(c)
    rep = {"schema": compare.SCHEMA, "source": path, "comparisons": out,
           "warnings": warnings + list(topo.warnings)}
    if cal_rec is not None:
        rep["calibration"] = cal_rec
    return rep


def _as_run_nccl(graph, run: dict, profile: Optional[timing.Profile], where: str):
    """``graph`` as the NCCL the run says it ran (nccl-tests' ``nccl-library=``, NCCL's INFO banner)
    decides: an NCCL before 2.27 runs no LL128 across nodes whose GPUs reach their NICs over C2C
    (:func:`gpucomm.planners.nccl.tuning.ll128_c2c_by_version`).  A calibration profile that says it,
    or NCCL_LL128_C2C=0, comes first.  Returns (graph, the note saying so or None)."""
    from dataclasses import replace

    code = library_code(run)
    era = ll128_c2c_by_version(code)
    if (era is None or era or not graph.ll128_c2c or graph.n_nodes < 2 or graph.type_inter != "P2C"
            or (profile is not None and profile.ll128_c2c is not None)):
        return graph, None
    return replace(graph, ll128_c2c=False), (f"{where}: the run prints NCCL {version_text(code)} (nccl-library), "
                                             f"which has no P2C path (before 2.27): no LL128 across the "
                                             f"C2C-attached NICs; predicted so")


def achievable_summary(doc: Union[Topology, dict], nodes: int = 1, gpus: Optional[list] = None,
                       calibration: Optional[dict] = None, calibration_source: Optional[str] = None,
                       size: int = 1 << 30) -> dict:
    """What the rings NCCL builds deliver on this machine (``gpucomm rings --calibration``): the
    achievable ring bus bandwidth, the network per node and one all_reduce of ``size`` bytes, under
    the calibration profile (or the documented defaults)."""
    topo = Topology.of(doc)
    profile, notes, rec = calibration_profile(calibration, calibration_source, topo)
    g = cost.summarize(topo, nodes=nodes, gpus=gpus, profile=profile)
    out = {"source": rec["source"] if rec else None, "fitted": rec["fitted"] if rec else [],
           "ring_bus_bw_GBps": None if g.ring_bus_bw is None else round(g.ring_bus_bw, 4),
           "node_net_bw_GBps": None if g.node_net_bw is None else round(g.node_net_bw, 4),
           "all_reduce": None, "notes": notes}
    if g.n_ranks > 1:
        row = cost.predict(g, "all_reduce", [size], profile=profile)[0]
        out["all_reduce"] = {"size_bytes": size, "time_us": row["time_us"], "busbw_GBps": row["busbw_GBps"],
                             "algorithm": row["algorithm"], "protocol": row["protocol"]}
    return out
