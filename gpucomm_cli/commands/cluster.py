"""``gpucomm cluster NODES... [--fabric FILE]``: join node documents (a directory of them, as ``gpucomm fleet
probe`` writes) and the fabric into one cluster document (:func:`gpucomm.planners.fleet.join_cluster`), which
``plan --cluster``, ``predict --cluster`` and ``select --nodes --cluster`` read."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from typing import List, Optional

import typer

from gpucomm.settings import diag

_SUFFIXES = (".json", ".yaml", ".yml", ".tar.gz", ".tgz")


def host_name(path: str) -> str:
    """A node's name from its file: ``out/node017.json`` -> ``node017``; a snapshot directory keeps its name."""
    import os

    base = os.path.basename(path.rstrip("/"))
    for suf in _SUFFIXES:
        if base.endswith(suf):
            return base[: -len(suf)]
    return base


def node_sources(inputs: List[str]) -> List[tuple]:
    """(host, source) for every node document named: files as given, directories by their entries
    (saved topologies, snapshot archives, snapshot directories), in natural order; bounded."""
    import os

    from gpucomm.probes.errors import InputError
    from gpucomm.probes.limits import MAX_HOSTS
    from gpucomm.probes.model import natural_key

    out: List[tuple] = []
    for src in inputs:
        if os.path.isdir(src) and not os.path.exists(os.path.join(src, "meta.json")):
            try:
                names = os.listdir(src)
            except OSError as e:
                raise InputError(f"cannot read the directory: {e.strerror}", src) from None
            picked = sorted((n for n in names if n.endswith(_SUFFIXES) and not n.startswith(".")
                             or os.path.exists(os.path.join(src, n, "meta.json"))), key=natural_key)
            if not picked:
                raise InputError("holds no node topology", src, expected="*.json/*.yaml topologies or snapshots")
            out += [(host_name(n), os.path.join(src, n)) for n in picked]
        else:
            out.append((host_name(src), src))
        if len(out) > MAX_HOSTS:
            raise InputError(f"more than {MAX_HOSTS} node documents", src)
    return out


def cluster(
    nodes: List[str] = typer.Argument(..., metavar="NODES...", help="Node topologies: directories of them (as "
                                      "`gpucomm fleet probe` writes: one HOST.json per node) or files; the host name is "
                                      "the file name without its extension."),
    fabric_file: Optional[str] = typer.Option(None, "--fabric", metavar="FILE", help="The fabric: ibnetdiscover/"
                                              "iblinkinfo output, a Slurm topology.conf, Kubernetes node labels, "
                                              "or a fabric document."),
    nvlink_domain: Optional[int] = typer.Option(None, "--nvlink-domain", min=1, help="Consecutive groups of K nodes "
                                                "share an NVLink domain (default: from the GPUs' fabric info)."),
    name: str = typer.Option("cluster", "--name", help="The cluster's name in the document."),
) -> None:
    """Join node documents and a fabric into one cluster document (gpucomm.cluster/v1) for plan/predict/select
    --cluster: one embedded topology per class of identical nodes, each node's NVLink domain and health.

    Formats: table (a summary), json, yaml (the document; -o cluster.json)."""
    from gpucomm.planners.fleet import join_cluster
    from gpucomm.probes.fabric import load_fabric
    from gpucomm.render.output import emit

    fab = load_fabric(fabric_file) if fabric_file else None
    doc = join_cluster(node_sources(nodes), fab, nvlink_domain, name)
    s = doc["summary"]

    def table(console) -> None:
        from gpucomm.render.tables import plural

        console.print(f"gpucomm cluster: {plural(s['nodes'], 'node')} in {plural(s['classes'], 'class', 'classes')} of "
                      f"identical nodes; {s['unhealthy']} unhealthy; {plural(s['nvlink_domains'], 'NVLink domain')}"
                      + (f"; fabric {s['fabric']}" if s.get("fabric") else "; no fabric"), soft_wrap=True)
        for n in doc["nodes"][:40]:
            console.print(f"  {n['names']}: topology {n['topology']}"
                          + (f", NVLink domain {n['nvlink_domain']}" if n.get("nvlink_domain") else "")
                          + (f", UNHEALTHY {n['unhealthy']}" if n.get("unhealthy") else ""), soft_wrap=True)
        if len(doc["nodes"]) > 40:
            console.print(f"  ... {len(doc['nodes']) - 40} more runs (--format json has them all)")
        console.print("  write it with -o cluster.json, then: gpucomm plan --cluster cluster.json ...")

    emit(doc, table=table, allowed=["table", "json", "yaml"])
    for w in s["warnings"]:
        diag(f"gpucomm: warning: {w}")


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
