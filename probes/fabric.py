"""The cluster's switch fabric as one document (``schema: gpucomm.fabric/v1``), built from what the
fabric tools print (gpucomm.probes.formats.ibnet: ibnetdiscover, iblinkinfo, ibswitches/ibhosts) or
what Slurm is told (gpucomm.probes.formats.slurm_topology: topology.conf, ``scontrol show topology``),
and :class:`SwitchTree`, the typed view planners read (which switch each host hangs from, the level
two hosts meet at).

From an InfiniBand graph (docs/FABRIC.md):

* **hosts** are named from their CA descriptions (``node01 HCA-1``, ``a09-p1-dgx-03-c05 mlx5_5``:
  host, then the HCA); SHARP aggregation nodes (``Mellanox Technologies Aggregation Node``), DPUs
  (BlueField, ``dpuN``) and CAs whose description names no host are **others**, never hosts;
* **levels** come from the graph: a leaf (level 1) has hosts; level k+1 are the switches joined to
  level k that are not lower; a switch without hosts that only reaches the uplinks of a leaf is a
  leaf with free ports (a finding), not a core;
* **rails**: each host's HCAs and the leaf each reaches (a rail-optimised fabric has a node's N HCAs
  on N leaves);
* **tree**: the switch tree a scheduler needs (Slurm topology/tree, Kueue levels): hosts grouped by
  the set of leaves they reach (one group per leaf, or per set of rail leaves), groups joined
  upwards through the switches they share (parallel spines become one tree switch, as topograph
  merges them);
* **findings**: links down-trained below their peers (the EDR cluster's one 4xDDR trunk), links
  that ``iblinkinfo`` says could run faster, leaves oversubscribed (host-facing vs uplink Gb/s),
  CAs that are not hosts, switches no host reaches.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_DEPTH, MAX_HOSTS
from gpucomm.probes.model import natural_key as _natural

FABRIC_SCHEMA = "gpucomm.fabric/v1"
ROLES = {1: "leaf", 2: "spine", 3: "core"}
SEVERITIES = ("error", "warning", "info")


def role_of(level: Optional[int]) -> str:
    """``1`` -> leaf, ``2`` -> spine, ``3`` -> core, ``4`` -> level4; None -> unreached."""
    if level is None:
        return "unreached"
    return ROLES.get(level, f"level{level}")


def _finding(rule: str, severity: str, subject: str, message: str, fix: str) -> dict:
    return {"rule": rule, "severity": severity, "subject": subject, "message": message, "fix": fix}


# ============================================================================================
# CA descriptions
_HCA_TOKEN = re.compile(r"^(?:HCA-\d+|mlx\d+_\d+|hfi\d+_\d+|qib\d+|bnxt_re\d+|irdma\d+|ionic_\d+|efa_?\d+|rdma\d+|"
                        r"ib\d+|ibp\S+|mthca\d+)$", re.I)
_HOST_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,62}$")
_GENERIC = re.compile(r"(?i)mellanox|nvidia|technologies|^MT\d+$|connectx|^localhost$|^\(null\)$|^unknown$")
_DPU = re.compile(r"(?i)bluefield|^dpu[-_]?\d*$|-dpu\d*$|^bf\d?-")
SHARP = "sharp-aggregation-node"


def classify_ca(desc: Optional[str]) -> Tuple[str, Optional[str], Optional[str]]:
    """A CA description -> (kind, host, HCA): kind ``host``, ``dpu``, ``sharp-aggregation-node`` or
    ``unnamed``.

    >>> classify_ca("node018 HCA-1"), classify_ca("Mellanox Technologies Aggregation Node")
    (('host', 'node018', 'HCA-1'), ('sharp-aggregation-node', None, None))
    >>> classify_ca("dpu3 HCA-1"), classify_ca("MT4123 ConnectX6   Mellanox Technologies"), classify_ca("")
    (('dpu', 'dpu3', 'HCA-1'), ('unnamed', None, None), ('unnamed', None, None))
    """
    d = (desc or "").strip()
    if "aggregation node" in d.lower():
        return SHARP, None, None
    toks = d.split()
    if not toks:
        return "unnamed", None, None
    host, hca = None, None
    if len(toks) >= 2 and _HCA_TOKEN.match(toks[-1]) and len(toks) == 2:
        host, hca = toks[0], toks[1]
    elif len(toks) == 1:
        host = toks[0]
    if host is None or not _HOST_TOKEN.match(host) or _GENERIC.search(host) or _HCA_TOKEN.match(host):
        if "bluefield" in d.lower():
            return "dpu", None, None
        return "unnamed", None, None
    if _DPU.search(host) or "bluefield" in d.lower():
        return "dpu", host, hca
    return "host", host, hca


_SWITCH_NAME = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")   # "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
_SLURM_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


def _derived_name(desc: Optional[str]) -> Optional[str]:
    """The name a switch's description gives it (topograph's rule: the middle of
    ``MF0;NAME:MODEL/U1``, else the description when it is one word), when a scheduler can use it."""
    d = (desc or "").strip()
    m = _SWITCH_NAME.match(d)
    name = m.group(1) if m else (d if d and not re.search(r"[\s;:]", d) else None)
    return name if name and _SLURM_NAME.match(name) else None


# ============================================================================================
# The document from an InfiniBand graph
def build_fabric(raw: dict, path: Optional[str] = None) -> dict:
    """A gpucomm.probes.formats.ibnet record -> the ``gpucomm.fabric/v1`` document."""
    nodes = {n["id"]: dict(n) for n in raw["nodes"]}
    links = [dict(l) for l in raw["links"]]
    warnings = list(raw.get("warnings") or [])
    ports_of: Dict[str, List[int]] = {}
    for l in links:
        ports_of.setdefault(l["a"], []).append(l["a_port"])
        ports_of.setdefault(l["b"], []).append(l["b_port"])
    for n in nodes.values():          # peers known only by LID (iblinkinfo): a switch or a CA?
        if n["type"] is None:
            kind = classify_ca(n["description"])[0]
            n["type"] = "switch" if kind == "unnamed" and max(ports_of.get(n["id"], [1])) > 2 else "ca"
    cls = {nid: classify_ca(n["description"]) for nid, n in nodes.items() if n["type"] == "ca"}
    for nid, n in nodes.items():
        if n["type"] == "router":
            cls[nid] = ("router", None, None)
    switch_ids = sorted((nid for nid, n in nodes.items() if n["type"] == "switch"), key=_natural)
    is_switch = set(switch_ids)
    adj: Dict[str, set] = {s: set() for s in switch_ids}
    attach: Dict[str, List[tuple]] = {}             # CA id -> [(port, switch, switch port, link)]
    for l in links:
        a_sw, b_sw = l["a"] in is_switch, l["b"] in is_switch
        if a_sw and b_sw:
            l["kind"] = "switch"
            if l["a"] != l["b"]:
                adj[l["a"]].add(l["b"])
                adj[l["b"]].add(l["a"])
        elif a_sw or b_sw:
            sw, ca = (l["a"], l["b"]) if a_sw else (l["b"], l["a"])
            sp, cp = (l["a_port"], l["b_port"]) if a_sw else (l["b_port"], l["a_port"])
            l["kind"] = "host" if cls.get(ca, ("",))[0] == "host" else "other"
            attach.setdefault(ca, []).append((cp, sw, sp, l))
        else:
            l["kind"] = "direct"          # CA to CA (back to back): no switch between them
    # hosts and the leaves they reach
    host_leaves: Dict[str, set] = {}
    hosts: Dict[str, dict] = {}
    others: List[dict] = []
    for ca, (kind, host, hca) in sorted(cls.items(), key=lambda kv: _natural(kv[0])):
        att = attach.get(ca, [])
        if kind != "host":
            for cp, sw, sp, l in att or [(None, None, None, None)]:
                others.append({"id": ca, "kind": kind, "description": nodes[ca]["description"], "switch": sw,
                               "switch_port": sp})
            continue
        h = hosts.setdefault(host, {"name": host, "hcas": [], "leaves": [], "nvlink_domain": None})
        if not att:
            h["hcas"].append({"name": hca, "id": ca, "guid": nodes[ca].get("guid"), "port": None, "switch": None,
                              "switch_port": None, "width": None, "speed": None, "rate_gbps": None})
        for cp, sw, sp, l in att:
            h["hcas"].append({"name": hca, "id": ca, "guid": nodes[ca].get("guid"), "port": cp, "switch": sw,
                              "switch_port": sp, "width": l["width"], "speed": l["speed"], "rate_gbps": l["rate_gbps"]})
            host_leaves.setdefault(host, set()).add(sw)
    if len(hosts) > MAX_HOSTS:
        raise InputError(f"{len(hosts)} hosts, more than the limit of {MAX_HOSTS}", path)
    level = _levels(switch_ids, adj, {s for ls in host_leaves.values() for s in ls})
    findings: List[dict] = []
    empty = [s for s in switch_ids if level.get(s) == 1 and not any(s in ls for ls in host_leaves.values())]
    names = _switch_names(nodes, switch_ids)
    for s in empty:
        findings.append(_finding("leaf-without-hosts", "info", names[s],
                                 f"switch {names[s]} reaches only the uplinks of leaf switches and no host: "
                                 "taken for a leaf with free ports", "none needed, unless hosts are missing from "
                                 "the capture (run ibnetdiscover again from another node)"))
    for s in switch_ids:
        if level.get(s) is None:
            findings.append(_finding("switch-unreached", "warning", names[s],
                                     f"switch {names[s]} reaches no host through the links in this capture",
                                     "check its cables, or capture the whole fabric (ibnetdiscover from a host)"))
    # per-switch capacities: host-facing (down) and uplink Gb/s
    down: Counter = Counter()
    up: Counter = Counter()
    nhosts: Counter = Counter()
    for l in links:
        if l["kind"] == "switch" and l["a"] != l["b"]:
            la, lb = level.get(l["a"]), level.get(l["b"])
            if la is None or lb is None or la == lb:
                continue
            lo, hi = (l["a"], l["b"]) if la < lb else (l["b"], l["a"])
            up[lo] += l["rate_gbps"] or 0
            down[hi] += l["rate_gbps"] or 0
        elif l["kind"] == "host":
            sw = l["a"] if l["a"] in is_switch else l["b"]
            down[sw] += l["rate_gbps"] or 0
    for h, ls in host_leaves.items():
        for s in ls:
            nhosts[s] += 1
    switches = []
    for s in switch_ids:
        n = nodes[s]
        ratio = round(down[s] / up[s], 2) if up[s] and down[s] and level.get(s) == 1 else None
        switches.append({"id": s, "name": names[s], "description": n["description"], "guid": n.get("guid"),
                         "lid": n.get("lid"), "level": level.get(s), "role": role_of(level.get(s)),
                         "hosts": nhosts[s], "down_gbps": down[s] or None, "up_gbps": up[s] or None,
                         "oversubscription": ratio})
        if ratio and ratio > 1.0:
            findings.append(_finding("leaf-oversubscribed", "info", names[s],
                                     f"leaf {names[s]}: {down[s]:g} Gb/s to {nhosts[s]} host(s) over {up[s]:g} Gb/s of "
                                     f"uplinks ({ratio:g}:1): traffic leaving the leaf gets 1/{ratio:g} of the host links",
                                     "keep a job's ranks under one leaf (gpucomm select --nodes, plan --cluster), "
                                     "or add uplinks"))
    for h in hosts.values():
        h["hcas"].sort(key=lambda c: (_natural(c["name"] or ""), c["port"] or 0, c["id"]))
        h["leaves"] = sorted(host_leaves.get(h["name"], ()), key=lambda s: _natural(names[s]))
        rates = {c["rate_gbps"] for c in h["hcas"] if c["rate_gbps"]}
        if len(rates) > 1:
            findings.append(_finding("host-hca-rates-differ", "warning", h["name"],
                                     f"{h['name']}'s HCAs run at {', '.join(f'{r:g}' for r in sorted(rates))} Gb/s",
                                     "a rank on the slow rail slows every collective: check the slow link"))
    findings += _link_findings(links, names, nodes, cls)
    kinds = Counter(o["kind"] for o in {o["id"]: o for o in others}.values())
    if kinds:
        words = {SHARP: "SHARP aggregation node", "dpu": "DPU", "unnamed": "CA whose description names no host",
                 "router": "router"}
        findings.append(_finding("non-host-cas", "info", "fabric",
                                 "not taken for hosts: " + ", ".join(f"{c} {words.get(k, k)}{'s' if c > 1 and k != 'unnamed' else ''}"
                                                                    for k, c in sorted(kinds.items())),
                                 "none needed; name a host's HCAs (`node01 HCA-1`) to have it counted"))
    if switch_ids and not any(l["kind"] == "switch" for l in links) and not any(l["kind"] == "host" for l in links):
        findings.append(_finding("no-links", "info", "fabric",
                                 "the capture lists switches and CAs but no links (ibswitches/ibhosts): levels and "
                                 "the hosts' leaves are unknown", "capture `ibnetdiscover` (or iblinkinfo) for the links"))
    rails = _rails(hosts, names)
    tree = _tree(hosts, level, adj, names)
    doc = {"schema": FABRIC_SCHEMA,
           "source": {"path": path, "formats": list(raw.get("formats") or [])},
           "switches": switches,
           "hosts": [hosts[h] for h in sorted(hosts, key=_natural)],
           "others": sorted(others, key=lambda o: (_natural(o["id"]), o["switch"] or "")),
           "links": [{k: l.get(k) for k in ("a", "a_port", "b", "b_port", "kind", "width", "speed", "rate_gbps",
                                            "could_be")} for l in links],
           "rails": rails, "tree": tree, "blocks": [], "block_sizes": [],
           "down_ports": raw.get("down_ports", 0),
           "findings": _sorted_findings(findings), "warnings": warnings}
    doc["levels"] = _level_summary(switches)
    return doc


def _levels(switch_ids: List[str], adj: Dict[str, set], leaves: set) -> Dict[str, Optional[int]]:
    """Level of each switch: 1 for leaves (switches with hosts), k+1 for a switch joined to a level-k
    one and to none lower; a switch without hosts whose neighbours are all among some leaf's uplinks
    is a leaf with free ports; None for switches no host reaches."""
    level: Dict[str, Optional[int]] = {s: None for s in switch_ids}
    frontier = [s for s in switch_ids if s in leaves]
    for s in frontier:
        level[s] = 1
    k = 1
    while frontier:
        nxt = []
        for s in frontier:
            for t in adj[s]:
                if level[t] is None:
                    level[t] = k + 1
                    nxt.append(t)
        frontier = sorted(set(nxt), key=_natural)
        k += 1
        if k > MAX_DEPTH:
            break
    uplinks = [adj[s] for s in switch_ids if s in leaves]
    for s in switch_ids:
        if s not in leaves and level[s] is not None and level[s] >= 3 and adj[s] \
                and all(level[t] == 2 for t in adj[s]) and any(adj[s] <= u for u in uplinks):
            level[s] = 1
    return level


def _switch_names(nodes: Dict[str, dict], switch_ids: List[str]) -> Dict[str, str]:
    """Each switch's name for schedulers: the one its description gives when unique, else its id."""
    derived = {s: _derived_name(nodes[s]["description"]) for s in switch_ids}
    count = Counter(v for v in derived.values() if v)
    return {s: (derived[s] if derived[s] and count[derived[s]] == 1 and not derived[s].startswith(("S-", "H-"))
                else s) for s in switch_ids}


def _link_findings(links: List[dict], names: Dict[str, str], nodes: Dict[str, dict], cls: dict) -> List[dict]:
    """Links slower or narrower than most links of their kind (switch trunks, host links), and links
    iblinkinfo says could run faster."""
    out = []

    def end(nid: str, port) -> str:
        nm = names.get(nid)
        if nm is None:
            k, host, hca = cls.get(nid, ("", None, None))
            nm = f"{host} {hca}" if host and hca else (host or nodes[nid].get("description") or nid)
        return f"{nm}[{port}]"

    for kind, what in (("switch", "inter-switch links"), ("host", "host links")):
        group = [l for l in links if l["kind"] == kind and l["rate_gbps"]]
        if len(group) < 3:
            continue
        common, n = Counter((l["width"], l["speed"]) for l in group).most_common(1)[0]
        if n * 2 <= len(group):
            continue
        rate = next(l["rate_gbps"] for l in group if (l["width"], l["speed"]) == common)
        for l in group:
            if l["rate_gbps"] < rate:
                subj = f"{end(l['a'], l['a_port'])} - {end(l['b'], l['b_port'])}"
                out.append(_finding("ib-link-downtrained", "warning", subj,
                                    f"link {subj} runs {l['width']}{l['speed']} ({l['rate_gbps']:g} Gb/s) where {n} of "
                                    f"its {len(group)} {what} run {common[0]}{common[1]} ({rate:g} Gb/s)",
                                    "reseat or replace the cable or transceiver; `iblinkinfo` shows the port after "
                                    "`ibportstate <lid> <port> reset`"))
    for l in links:
        c = l.get("could_be")
        if c and c.get("rate_gbps") and l["rate_gbps"] and c["rate_gbps"] > l["rate_gbps"]:
            subj = f"{end(l['a'], l['a_port'])} - {end(l['b'], l['b_port'])}"
            out.append(_finding("ib-link-could-be-faster", "warning", subj,
                                f"link {subj} runs {l['width']}{l['speed']} ({l['rate_gbps']:g} Gb/s); iblinkinfo says "
                                f"it could be {c['width']}{c['speed']} ({c['rate_gbps']:g} Gb/s)",
                                "check the cable type and the HCA's firmware/port settings (mlxconfig), then reset "
                                "the port"))
    return out


def _sorted_findings(findings: List[dict]) -> List[dict]:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order[f["severity"]], f["rule"], _natural(f["subject"]), f["message"]))


def _rails(hosts: Dict[str, dict], names: Dict[str, str]) -> dict:
    """Which leaves each HCA name reaches; rail-optimised when (nine in ten of) the hosts with several
    HCAs have them on as many leaves."""
    by_hca: Dict[str, set] = {}
    hosts_of: Counter = Counter()
    multi, spread = 0, 0
    for h in hosts.values():
        sws = [c["switch"] for c in h["hcas"] if c["switch"]]
        if len(sws) > 1:
            multi += 1
            spread += len(set(sws)) == len(sws)
        for c in h["hcas"]:
            if c["switch"] and c["name"]:
                by_hca.setdefault(c["name"], set()).add(c["switch"])
                hosts_of[c["name"]] += 1
    optimised = multi > 0 and spread * 10 >= multi * 9
    return {"rail_optimised": optimised,
            "rails": [{"hca": k, "leaves": sorted((names[s] for s in v), key=_natural), "hosts": hosts_of[k]}
                      for k, v in sorted(by_hca.items(), key=lambda kv: _natural(kv[0]))]}


def _tree(hosts: Dict[str, dict], level: Dict[str, Optional[int]], adj: Dict[str, set],
          names: Dict[str, str]) -> List[dict]:
    """The scheduler's switch tree: hosts grouped by the set of leaves they reach; groups joined
    upwards through the switches they share (union-find per level)."""
    # leaves that share a host (rail leaves of one scalable unit) form one group: union-find
    leaf_parent: Dict[str, str] = {}

    def lfind(x: str) -> str:
        while leaf_parent.setdefault(x, x) != x:
            leaf_parent[x] = leaf_parent[leaf_parent[x]]
            x = leaf_parent[x]
        return x

    host_set: Dict[str, List[str]] = {}
    for h in sorted(hosts, key=_natural):
        ls = sorted({c["switch"] for c in hosts[h]["hcas"] if c["switch"] and level.get(c["switch"]) == 1})
        if ls:
            host_set[h] = ls
            for x in ls[1:]:
                ra, rb = lfind(ls[0]), lfind(x)
                if ra != rb:
                    leaf_parent[rb] = ra
    comp_leaves: Dict[str, set] = {}
    comp_hosts: Dict[str, List[str]] = {}
    for h, ls in host_set.items():
        r = lfind(ls[0])
        comp_leaves.setdefault(r, set()).update(ls)
        comp_hosts.setdefault(r, []).append(h)
    groups = {frozenset(comp_leaves[r]): comp_hosts[r] for r in comp_leaves}
    used: set = set()

    def uniq(base: str) -> str:
        name, i = base, 2
        while name in used:
            name, i = f"{base}-{i}", i + 1
        used.add(name)
        return name

    out: List[dict] = []
    current = []
    for members, hs in sorted(groups.items(), key=lambda kv: _natural(min((names[s] for s in kv[0]), key=_natural))):
        ms = sorted(members, key=lambda s: _natural(names[s]))
        rec = {"name": uniq(names[ms[0]]), "level": 1, "members": ms, "nodes": hs, "switches": []}
        out.append(rec)
        current.append(rec)
    while current:
        ups: List[set] = []
        for g in current:
            cand = {t for s in g["members"] for t in adj.get(s, ()) if level.get(t) is not None and level[t] > g["level"]}
            lo = min((level[t] for t in cand), default=None)
            ups.append({t for t in cand if level[t] == lo})
        parent = list(range(len(current)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: Dict[str, int] = {}
        for i, u in enumerate(ups):
            for t in u:
                if t in owner:
                    parent[find(i)] = find(owner[t])
                else:
                    owner[t] = i
        comps: Dict[int, List[int]] = {}
        for i, u in enumerate(ups):
            if u:
                comps.setdefault(find(i), []).append(i)
        nxt = []
        for root, idx in sorted(comps.items(), key=lambda kv: min(kv[1])):
            members = sorted(set().union(*(ups[i] for i in idx)), key=lambda s: _natural(names[s]))
            rec = {"name": uniq(names[members[0]]), "level": level[members[0]], "members": members, "nodes": [],
                   "switches": [current[i]["name"] for i in idx]}
            out.append(rec)
            nxt.append(rec)
        if len(nxt) == len(current) and all(len(comps[r]) == 1 for r in comps) and \
                all(set(n["members"]) == set(c["members"]) for n, c in zip(nxt, current)):
            break   # pragma: no cover - a cycle guard; levels strictly increase
        current = nxt
    return out


def _level_summary(switches: List[dict]) -> List[dict]:
    c = Counter(s["level"] for s in switches)
    return [{"level": k, "role": role_of(k), "switches": v} for k, v in sorted(c.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]


# ============================================================================================
# The document from Slurm's topology (topology.conf, scontrol show topology)
def fabric_from_slurm(rec: dict, path: Optional[str] = None) -> dict:
    """A gpucomm.probes.formats.slurm_topology record -> the ``gpucomm.fabric/v1`` document: the tree
    exactly as Slurm has it (levels counted up from the leaves), blocks and BlockSizes; no links."""
    tree = tree_from_records(rec["switches"], path or rec.get("source") or "topology.conf")
    depth: Dict[str, int] = {}

    def lvl(name: str) -> int:
        if name not in depth:
            kids = tree.switches[name].switches
            depth[name] = 1 if not kids else 1 + max(lvl(k) for k in kids)
        return depth[name]

    out_tree, switches = [], []
    for s in rec["switches"]:
        L = lvl(s["name"])
        out_tree.append({"name": s["name"], "level": L, "members": [s["name"]], "nodes": list(s["nodes"]),
                         "switches": list(s["switches"])})
        switches.append({"id": s["name"], "name": s["name"], "description": None, "guid": None, "lid": None,
                         "level": L, "role": role_of(L), "hosts": len(s["nodes"]), "down_gbps": None,
                         "up_gbps": None, "oversubscription": None, "link_speed": s.get("link_speed")})
    hosts: Dict[str, dict] = {}
    for s in rec["switches"]:
        for n in s["nodes"]:
            hosts.setdefault(n, {"name": n, "hcas": [], "leaves": [], "nvlink_domain": None})["leaves"].append(s["name"])
    block_of = {}
    for b in rec["blocks"]:
        for n in b["nodes"]:
            block_of.setdefault(n, b["name"])
            hosts.setdefault(n, {"name": n, "hcas": [], "leaves": [], "nvlink_domain": None})
    for n, h in hosts.items():
        h["block"] = block_of.get(n)
    doc = {"schema": FABRIC_SCHEMA, "source": {"path": path, "formats": [rec.get("source") or "topology.conf"]},
           "switches": switches, "hosts": [hosts[h] for h in sorted(hosts, key=_natural)], "others": [], "links": [],
           "rails": {"rail_optimised": False, "rails": []}, "tree": out_tree,
           "blocks": [{"name": b["name"], "nodes": list(b["nodes"])} for b in rec["blocks"]],
           "block_sizes": list(rec.get("block_sizes") or []), "down_ports": 0, "findings": [],
           "warnings": list(rec.get("warnings") or [])}
    doc["levels"] = _level_summary(switches)
    return doc


def domain_blocks(hosts: List[dict], order: List[str]) -> Tuple[List[dict], List[int]]:
    """Blocks from the hosts' ``nvlink_domain``: one block per domain (``nvl01``, ...), in ``order``
    of each domain's first host; BlockSizes = the smallest domain (Slurm's planning base)."""
    members: Dict[str, List[str]] = {}
    for h in hosts:
        if h.get("nvlink_domain"):
            members.setdefault(h["nvlink_domain"], []).append(h["name"])
    pos = {h: i for i, h in enumerate(order)}
    doms = sorted(members, key=lambda d: min((pos.get(h, len(pos)), _natural(h)) for h in members[d]))
    width = max(2, len(str(len(doms))))
    blocks = [{"name": f"nvl{i + 1:0{width}d}", "nodes": sorted(members[d], key=_natural), "nvlink_domain": d}
              for i, d in enumerate(doms)]
    return blocks, ([min(len(v) for v in members.values())] if members else [])


# ============================================================================================
# The document from Kubernetes node labels
def fabric_from_k8s(rec: dict, path: Optional[str] = None) -> dict:
    """A gpucomm.probes.formats.k8s_labels record -> the ``gpucomm.fabric/v1`` document: the switch
    tree from the network hierarchy the nodes' labels carry (``HIERARCHIES``: levels from the most
    specific label up, each value of a level one switch, named by its value), each host's
    ``nvlink_domain`` from ``nvidia.com/gpu.clique`` and a block per clique; no links."""
    from gpucomm.probes.formats.k8s_labels import CLIQUE_LABEL, HIERARCHIES, MACHINE_LABELS, OCI_CLUSTER_LABEL

    src = path or "node labels"
    nodes = rec["nodes"]
    warnings = list(rec.get("warnings") or [])

    def carries(n: dict, key: str) -> bool:
        return bool(n["labels"].get(key))

    found = [(sum(any(carries(n, k) for k in keys) for n in nodes), prov, keys) for prov, keys in HIERARCHIES]
    count, prov, keys = max(found, key=lambda f: f[0])
    for c, p, _ in found:
        if c and p != prov:
            warnings.append(f"{c} node(s) also carry {p} topology labels: only the {prov} hierarchy is read")
    used: List[str] = []
    if count:
        with_any = [n for n in nodes if any(carries(n, k) for k in keys)]
        used = [k for k in keys if 2 * sum(carries(n, k) for n in with_any) >= len(with_any)]
    if used and used[0] in MACHINE_LABELS:
        on = Counter(n["labels"][used[0]] for n in nodes if carries(n, used[0]))
        if len(used) > 1 and max(on.values()) == 1:
            used = used[1:]       # each node its own machine: the level above is the first switch
    top_down = list(reversed(used))
    placed = [n for n in nodes if used and all(carries(n, k) for k in used)]
    in_tree = {n["name"] for n in placed}
    out_of_tree = [n["name"] for n in nodes if n["name"] not in in_tree]
    if used and out_of_tree:
        warnings.append(f"{len(out_of_tree)} node(s) lack the label(s) {', '.join(top_down)} and are outside the switch "
                        f"tree: {', '.join(sorted(out_of_tree, key=_natural)[:20])}"
                        + (" ..." if len(out_of_tree) > 20 else ""))
    elif not used:
        warnings.append("no node carries network topology labels (" + "; ".join(" > ".join(reversed(k)) for _, k in HIERARCHIES)
                        + "): no switch tree")
    clusters = {n["labels"][OCI_CLUSTER_LABEL] for n in nodes if carries(n, OCI_CLUSTER_LABEL)}
    if len(clusters) > 1:
        warnings.append(f"the nodes are in {len(clusters)} OCI compute clusters ({OCI_CLUSTER_LABEL}): RDMA does not "
                        "cross them, whatever the tree says above their islands")
    # switches: identity = the values from the top down to that level; named by their value
    depth = len(used)
    ident_nodes: Dict[tuple, List[str]] = {}
    for n in placed:
        p = tuple(n["labels"][k] for k in top_down)
        for i in range(1, depth + 1):
            ident_nodes.setdefault(p[:i], [])
        ident_nodes[p].append(n["name"])
    by_value: Dict[str, List[tuple]] = {}
    for ident in sorted(ident_nodes, key=lambda t: (len(t), [_natural(x) for x in t])):
        by_value.setdefault(ident[-1], []).append(ident)
    name_of: Dict[tuple, str] = {}
    taken = set()
    for value, idents in sorted(by_value.items(), key=lambda kv: _natural(kv[0])):
        if len(idents) > 1:
            lv = {depth - len(t) + 1 for t in idents}
            warnings.append(f"value {value!r} names {len(idents)} different switches ("
                            + ("under different parents" if len(lv) == 1 else "at several levels")
                            + "): they are told apart by a suffix")
        for i, ident in enumerate(idents):
            nm = value if len(idents) == 1 else f"{value[:60]}-{i + 1}"
            while nm in taken:
                nm = f"{nm[:60]}-{len(taken)}"
            taken.add(nm)
            name_of[ident] = nm
    children: Dict[tuple, List[tuple]] = {}
    for t in ident_nodes:
        if len(t) > 1:
            children.setdefault(t[:-1], []).append(t)
    out_tree, switches = [], []
    for ident in sorted(ident_nodes, key=lambda t: (-len(t), [_natural(x) for x in t])):
        L = depth - len(ident) + 1
        kids = sorted((name_of[t] for t in children.get(ident, ())), key=_natural)
        direct = sorted(ident_nodes[ident], key=_natural)
        out_tree.append({"name": name_of[ident], "level": L, "members": [name_of[ident]], "nodes": direct,
                         "switches": kids})
        switches.append({"id": name_of[ident], "name": name_of[ident], "description": f"{top_down[len(ident) - 1]}="
                         f"{ident[-1]}", "guid": None, "lid": None, "level": L, "role": role_of(L), "hosts": len(direct),
                         "down_gbps": None, "up_gbps": None, "oversubscription": None})
    leaf_of = {h: name_of[t] for t, hs in ident_nodes.items() for h in hs}
    hosts = [{"name": n["name"], "hcas": [], "leaves": [leaf_of[n["name"]]] if n["name"] in leaf_of else [],
              "nvlink_domain": n["labels"].get(CLIQUE_LABEL) or None} for n in sorted(nodes, key=lambda n: _natural(n["name"]))]
    order = tree_from_records(out_tree, src).dfs_nodes() if out_tree else []
    blocks, sizes = domain_blocks(hosts, order)
    block_of = {n: b["name"] for b in blocks for n in b["nodes"]}
    for h in hosts:
        h["block"] = block_of.get(h["name"])
    no_clique = [h["name"] for h in hosts if not h["nvlink_domain"]]
    if blocks and no_clique:
        warnings.append(f"{len(no_clique)} node(s) have no {CLIQUE_LABEL} label and are in no block: "
                        + ", ".join(no_clique[:20]) + (" ..." if len(no_clique) > 20 else ""))
    labels = {role_of(depth - i): k for i, k in enumerate(top_down)}     # locality kind -> the node label
    if blocks:
        labels["nvlink-domain"] = CLIQUE_LABEL
    doc = {"schema": FABRIC_SCHEMA, "source": {"path": path, "formats": [f"k8s-labels ({rec.get('format')})"],
                                               "labels": labels},
           "switches": switches, "hosts": hosts, "others": [], "links": [],
           "rails": {"rail_optimised": False, "rails": []}, "tree": out_tree, "blocks": blocks, "block_sizes": sizes,
           "down_ports": 0, "findings": [], "warnings": warnings}
    doc["levels"] = _level_summary(switches)
    return doc


def nvlink_domain(doc: dict) -> Optional[str]:
    """A node's multi-node NVLink domain from its GPUs' fabric info: GPU Feature Discovery's
    ``nvidia.com/gpu.clique`` value (:func:`gpucomm.probes.topology.clique_label`), read from the raw
    document (a fleet of thousands is joined without building each node's view); None when the GPUs
    report none.

    >>> nvlink_domain({"gpus": [{"fabric": {"cluster_uuid": "6f3c2a51-9d0e", "clique_id": 32766, "state": "completed"}}]})
    '6f3c2a51-9d0e.32766'
    """
    from gpucomm.probes.topology import clique_label

    return clique_label(g.get("fabric") for g in doc.get("gpus") or [] if isinstance(g, dict))


# ============================================================================================
# The switch tree planners read
@dataclass
class TreeSwitch:
    name: str
    nodes: List[str] = field(default_factory=list)
    switches: List[str] = field(default_factory=list)
    link_speed: Optional[float] = None
    line: Optional[int] = None
    parent: Optional[str] = None


@dataclass
class SwitchTree:
    """A switch tree: leaves hold nodes, inner switches hold switches; blocks (topology/block) are
    leaves under one implicit root."""

    switches: Dict[str, TreeSwitch]
    source: str = "topology.conf"
    warnings: List[str] = field(default_factory=list)
    blocks: List[str] = field(default_factory=list)      # topology/block: the blocks (leaves of the implicit root)
    block_sizes: List[int] = field(default_factory=list)  # topology/block: BlockSizes (planning base first)

    def __post_init__(self) -> None:
        self.node_leaf: Dict[str, str] = {}
        for s in self.switches.values():
            for n in s.nodes:
                self.node_leaf.setdefault(n, s.name)
        self._lca: Dict[Tuple[str, str], Optional[int]] = {}

    def roots(self) -> List[str]:
        return sorted((s.name for s in self.switches.values() if s.parent is None), key=_natural)

    def chain(self, node: str) -> List[str]:
        """Switches from the node's leaf up to its root."""
        out = []
        cur = self.node_leaf.get(node)
        while cur is not None:
            out.append(cur)
            cur = self.switches[cur].parent
        return out

    def level_between(self, a: str, b: str) -> Optional[int]:
        """Switch level two nodes meet at: 0 same node, 1 same leaf, 2 the leaf's parent, ...;
        None when they share no switch (separate fabrics)."""
        if a == b:
            return 0
        key = (a, b) if a < b else (b, a)
        if key in self._lca:
            return self._lca[key]
        ca, cb = self.chain(a), self.chain(b)
        sb = set(cb)
        lvl = None
        for i, s in enumerate(ca):
            if s in sb:
                lvl = i + 1
                break
        self._lca[key] = lvl
        return lvl

    def dfs_nodes(self) -> List[str]:
        """Nodes in switch-tree order (children sorted naturally)."""
        out: List[str] = []
        stack = [(r, False) for r in reversed(self.roots())]
        while stack:
            name, _ = stack.pop()
            s = self.switches[name]
            out.extend(sorted(s.nodes, key=_natural))
            stack.extend((c, False) for c in sorted(s.switches, key=_natural, reverse=True))
        return out

    def leaves(self) -> List[str]:
        return [s.name for s in self.switches.values() if s.nodes]


def tree_from_records(records: Iterable[dict], path: str, blocks: Iterable[dict] = ()) -> SwitchTree:
    """[{"name", "nodes", "switches", "link_speed", "line"}] (+ blocks, as leaves of one implicit
    root) -> a checked :class:`SwitchTree`: every child known, one parent each, no node under two
    switches, no cycle, at most MAX_DEPTH levels.  Errors name the file and line."""
    switches: Dict[str, TreeSwitch] = {}
    for r in records:
        switches[r["name"]] = TreeSwitch(name=r["name"], nodes=list(r.get("nodes") or []),
                                         switches=list(r.get("switches") or []), link_speed=r.get("link_speed"),
                                         line=r.get("line"))
    blocks = list(blocks)
    for b in blocks:
        if b["name"] in switches:
            raise InputError(f"block {b['name']!r} has the name of a switch", path, b.get("line"))
        switches[b["name"]] = TreeSwitch(name=b["name"], nodes=list(b["nodes"]), line=b.get("line"))
    if blocks:
        root = "_blocks"
        while root in switches:
            root += "_"
        switches[root] = TreeSwitch(name=root, switches=[b["name"] for b in blocks])
    seen_node: Dict[str, str] = {}
    for s in switches.values():
        for c in s.switches:
            if c not in switches:
                raise InputError(f"switch {s.name!r} lists unknown switch {c!r}", path, s.line)
            if switches[c].parent is not None and switches[c].parent != s.name:
                raise InputError(f"switch {c!r} has two parents ({switches[c].parent!r} and {s.name!r})", path, s.line)
            if c == s.name:
                raise InputError(f"switch {s.name!r} lists itself", path, s.line)
            switches[c].parent = s.name
        for n in s.nodes:
            if n in seen_node and seen_node[n] != s.name:
                raise InputError(f"node {n!r} is under two switches ({seen_node[n]!r} and {s.name!r})", path, s.line)
            seen_node[n] = s.name
    depth: Dict[str, int] = {}  # levels above each switch: linear, with cycle detection
    for s in switches.values():
        chain, seen, cur = [], set(), s.name
        while cur is not None and cur not in depth:
            if cur in seen:
                raise InputError(f"switch {cur!r} is part of a cycle", path, switches[cur].line)
            chain.append(cur)
            seen.add(cur)
            cur = switches[cur].parent
        d = depth[cur] if cur is not None else -1
        for name in reversed(chain):
            d += 1
            depth[name] = d
            if d >= MAX_DEPTH:
                raise InputError(f"switch {name!r} is {d} levels below the top of the tree, more than {MAX_DEPTH}",
                                 path, switches[name].line, expected="a switch tree a few levels deep")
    return SwitchTree(switches=switches, source=path, blocks=[b["name"] for b in blocks])


def parse_topology_conf(text: str, path: str = "topology.conf") -> SwitchTree:
    """Slurm's topology.conf (or ``scontrol show topology``) -> its :class:`SwitchTree` (blocks as
    leaves under one implicit root)."""
    from gpucomm.probes.formats.slurm_topology import read_topology_conf

    rec = read_topology_conf(text, path)
    tree = tree_from_records(rec["switches"], path, rec["blocks"])
    tree.block_sizes = list(rec["block_sizes"])
    return tree


def fabric_tree(doc: dict, path: Optional[str] = None) -> SwitchTree:
    """The :class:`SwitchTree` of a fabric document: its ``tree``, or its blocks when it has no tree."""
    src = path or (doc.get("source") or {}).get("path") or "fabric"
    if doc.get("tree"):
        return tree_from_records(doc["tree"], src)
    if doc.get("blocks"):
        tree = tree_from_records([], src, doc["blocks"])
        tree.block_sizes = list(doc.get("block_sizes") or [])
        return tree
    raise InputError("the fabric has no switch tree (no links between hosts and switches)", src,
                     expected="an ibnetdiscover capture or a topology.conf")


# ============================================================================================
# Reading any fabric input
def detect_fabric(text: str) -> Optional[str]:
    """``ib`` (infiniband-diags output), ``slurm`` (topology.conf / scontrol show topology),
    ``document`` (a saved gpucomm fabric or cluster document, JSON or YAML), ``k8s`` (Kubernetes
    node labels, or another Kubernetes object: refused by the reader with what it is), else None."""
    from gpucomm.probes.formats import ibnet, k8s_labels, slurm_topology

    head = text.lstrip("\ufeff \t\r\n")[:4096]
    if re.search(r"gpucomm\.(fabric|cluster)/v1", head) or (head.startswith("{") and "gpucomm.fabric" in text[:200_000]):
        return "document"
    if slurm_topology.looks_like(text):
        return "slurm"
    if ibnet.looks_like(text):
        return "ib"
    if k8s_labels.looks_like(text):
        return "k8s"
    return None


def fabric_from_text(text: str, path: str) -> dict:
    """Any fabric input's text -> ``gpucomm.fabric/v1`` (a cluster document gives its fabric)."""
    kind = detect_fabric(text)
    if kind == "ib":
        from gpucomm.probes.formats.ibnet import parse_ib_text

        return build_fabric(parse_ib_text(text, path), path)
    if kind == "slurm":
        from gpucomm.probes.formats.slurm_topology import read_topology_conf

        return fabric_from_slurm(read_topology_conf(text, path), path)
    if kind == "k8s":
        from gpucomm.probes.formats.k8s_labels import read_node_labels

        return fabric_from_k8s(read_node_labels(text, path), path)
    if kind == "document":
        from gpucomm.probes.parse import parse_json, parse_yaml

        expected = "a gpucomm.fabric/v1 document"
        data = parse_json(text, path, expected) if text.lstrip("\ufeff \t\r\n").startswith("{") else \
            parse_yaml(text, path, expected)
        if isinstance(data, dict) and data.get("schema") == "gpucomm.cluster/v1":
            fab = data.get("fabric")
            if isinstance(fab, dict) and isinstance(fab.get("document"), dict):
                return check_fabric_document(fab["document"], path)
            raise InputError("this cluster document embeds no fabric document", path,
                             expected="a cluster written by `gpucomm cluster ... --fabric FILE`")
        return check_fabric_document(data, path)
    raise InputError("unrecognised content", path,
                     expected="ibnetdiscover [-p], iblinkinfo or ibswitches/ibhosts output, a Slurm topology.conf, "
                              "`scontrol show topology` output, Kubernetes node labels (kubectl get nodes -o json, "
                              "kubectl describe nodes), or a gpucomm fabric/cluster document")


def load_fabric(path: str) -> dict:
    """Read any fabric input (bounded, detected by content, never by name; ``-`` is standard input)
    -> ``gpucomm.fabric/v1``."""
    from gpucomm.probes.parse import decode_text_input, read_text_input

    if path == "-":
        import sys

        from gpucomm.probes.limits import MAX_INPUT_BYTES

        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(MAX_INPUT_BYTES + 1) if stream is not None else sys.stdin.read(MAX_INPUT_BYTES + 1).encode()
        if len(data) > MAX_INPUT_BYTES:
            raise InputError(f"standard input is larger than the {MAX_INPUT_BYTES} byte limit", "<stdin>")
        return fabric_from_text(decode_text_input(data, "<stdin>"), "<stdin>")
    return fabric_from_text(read_text_input(path), path)


_LIST_KEYS = ("switches", "hosts", "others", "links", "tree", "blocks", "findings", "warnings")


def check_fabric_document(doc, path: str) -> dict:
    """A saved fabric document, checked for the shape planners rely on (one line naming the file and
    the field otherwise)."""
    if not isinstance(doc, dict) or doc.get("schema") != FABRIC_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"schema is {got!r}", path, expected=repr(FABRIC_SCHEMA))
    for k in _LIST_KEYS:
        v = doc.setdefault(k, [])
        if not isinstance(v, list) or not all(isinstance(x, (dict if k != "warnings" else str)) for x in v):
            raise InputError(f"{k} is not a list of {'objects' if k != 'warnings' else 'strings'}", path)
    for i, h in enumerate(doc["hosts"]):
        if not isinstance(h.get("name"), str) or not _HOST_TOKEN.match(h["name"]):
            raise InputError(f"hosts[{i}].name is {h.get('name')!r}", path, expected="a host name")
    for i, t in enumerate(doc["tree"]):
        if not isinstance(t.get("name"), str) or not all(isinstance(x, str) for x in (t.get("nodes") or []) + (t.get("switches") or [])):
            raise InputError(f"tree[{i}] is malformed", path, expected="{name, level, nodes: [...], switches: [...]}")
    for i, b in enumerate(doc["blocks"]):
        if not isinstance(b.get("name"), str) or not isinstance(b.get("nodes"), list):
            raise InputError(f"blocks[{i}] is malformed", path, expected="{name, nodes: [...]}")
    fabric_tree(doc, path) if doc["tree"] or doc["blocks"] else None   # the tree must hold together
    return doc


__all__ = ["FABRIC_SCHEMA", "SwitchTree", "TreeSwitch", "build_fabric", "fabric_from_slurm", "fabric_from_k8s",
           "domain_blocks", "fabric_tree",
           "load_fabric", "fabric_from_text", "detect_fabric", "classify_ca", "parse_topology_conf", "role_of",
           "tree_from_records", "check_fabric_document", "nvlink_domain"]
