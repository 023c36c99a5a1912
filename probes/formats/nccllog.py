"""NCCL's own debug log (``NCCL_DEBUG=INFO``, ideally ``NCCL_DEBUG_SUBSYS=INIT,GRAPH``): what NCCL
decided, read back so ``gpucomm rings/trees --compare LOG`` can show it beside our search and our
model of NCCL (:mod:`gpucomm.planners.nccl.search`).

Every NCCL line starts ``host:pid:tid [cudaDev] NCCL INFO `` (debug.cc); the part before the host
is ignored, so launcher labels (``srun --label`` ``0: ``, Open MPI ``[1,0]<stdout>:``, ``[0] ``),
Python logging prefixes, Ray's ``(Worker pid=N)`` and quote marks (``> ``) all work, and two
messages glued on one line are split.  What is read (the NCCL source that prints it in brackets):

* ``NCCL version 2.18.1+cuda12.1`` (init.cc; with or without the prefix);
* ``comm 0x.. rank R nRanks N nNodes M localRanks L localRank l MNNVL 0`` (init.cc, 2.19+) and the
  older ``comm 0x.. rank R nranks N cudaDev D [nvmlDev D] [busId B] ... - Init COMPLETE/START``;
* rings: ``Channel 00/24 :    0   1   2 ...`` (rings.cc, rank 0 prints every ring, NN = the final
  channel count) and, in older versions, ``Ring 00 : prev -> rank -> next`` per rank;
* trees: ``Trees [c] d0/d1/d2->rank->up [c+1] ...`` (2.7+), ``Trees [c] up->rank->d0/d1/d2``
  (2.4-2.6) and ``Tree c : up -> rank -> d0/d1/d2`` (the Panlichen fork);
* graphs (search.cc ``ncclTopoPrintGraph``): ``Pattern 4, crossNic 0, nChannels 1, bw 4.0/4.0,
  type SYS/SYS, sameChannels 1`` (``speed`` instead of ``bw`` before 2.12) and one line per channel
  `` 0 : NET/0 GPU/0 ... GPU/7 NET/0`` (GPU/n = the rank, NET/x = the NET id);
* transports: ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read``, ``... [send] via NET/IB/0/GDRDMA``,
  ``via SHM/direct/direct``, 2.4-era ``Ring 00 : 35 -> 34 [send] via NET/Socket/0`` and
  ``via direct shared memory`` (p2p.cc, shm.cc, net.cc); the bracket is the nvmlDev (newer) or the
  busId (older, hex);
* the topology dump (topo.cc ``ncclTopoPrint``): ``=== System : maxBw 7.0 totalBw 24.0 ===``,
  ``+ PCI[24.0] - GPU/F000 (8)`` (GPU bus id -> rank), ``NVL[370.8] - NVS/0``,
  ``NET[7.0] - NET/0 (guid/port/bw)``; path lines ``GPU/F000 :GPU/10000 (4/24.000000/PHB) ...``
  (paths.cc ``printNodePaths``, hops/bw/type);
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]; OOB ...``, ``Using network IB``,
  ``NCCL_X set by environment to Y``, ``24 coll channels, 0 collnet channels, 16 nvls channels,
  32 p2p channels, 32 p2p channels per peer`` (init.cc), ``NVLS multicast support is (not) available``,
  ``NVLS Head  0:  0  8``, ``Connected all rings/trees``, ``Connected NVLS``, and nccl-tests' own
  ``#  Rank  0 Group  0 Pid P on HOST device  0 [0x0f] NAME`` header.

A log may hold several communicators (training jobs create many): the one reported is the one with
the most ranks (comm lines), its ring print the first with that many ranks; a warning names the
others.  Lines that start like a known message but do not parse, and graph prints that stop short
of their ``nChannels``, become warnings ``path:line: ...``; text that holds no NCCL line at all,
binary data, or a non-string raises :class:`gpucomm.probes.errors.InputError`.

:func:`compare_rings` and :func:`compare_trees` put a parsed log next to a rings/trees plan and the
reference model and write the verdict the CLI prints.  Everything here is pure (no I/O).
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional

from gpucomm.probes.errors import InputError

SCHEMA = "gpucomm.nccllog/v1"

# graph.h NCCL_TOPO_PATTERN_*.
PATTERNS = {1: "balanced_tree", 2: "split_tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet_direct"}
TREE_PATTERNS = (1, 2, 3)
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
MAX_WARNINGS = 50
MAX_NCCL_WARNINGS = 20

# Numbers are bounded (ranks/channels: 9 digits, so int() never meets a 5000-digit string).
_I = r"\d{1,9}"
_N = r"-?\d{1,9}"
_F = r"\d{1,12}(?:\.\d*)?"
# ``host:pid:tid [dev] NCCL LEVEL `` anywhere in a line (debug.cc ncclDebugLog).  A host never holds
# ``:`` or brackets, so labels glued to it (``[1,0]<stdout>:host``) stay out.
_PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>" + _I + r"):(?P<tid>" + _I + r") \[(?P<dev>" + _N +
                     r")\] NCCL (?P<level>INFO|WARN|TRACE|ABORT)\b ?")
_VERSION = re.compile(r"\bNCCL version (?P<v>" + _I + r"\." + _I + r"\." + _I + r"\S*)")
_TESTS_RANK = re.compile(
    r"#\s*Rank\s+(?P<rank>\d{1,9})(?:\s+Group\s+\d{1,9})?\s+Pid\s+(?P<pid>\d{1,9})\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<dev>\d{1,9})\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$")
_COMM_NEW = re.compile(r"\bcomm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>" + _I + r") nRanks (?P<n>" + _I +
                       r") nNodes (?P<nodes>" + _I + r") localRanks (?P<lr>" + _I + r") localRank (?P<l>" + _I + r")")
_COMM_OLD = re.compile(r"\bcomm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>" + _I + r") nranks (?P<n>" + _I +
                       r") cudaDev (?P<dev>" + _I + r")(?: nvmlDev (?P<nvml>" + _I +
                       r"))?(?: busId (?P<bus>[0-9a-fA-F]+))?")
_RING_PRINT = re.compile(r"^Channel (?P<c>" + _I + r")/(?P<n>" + _I + r") :(?P<ranks>(?:\s+" + _I + r")*)\s*$")
_RING_NEIGH = re.compile(r"^Ring (?P<c>" + _I + r") : (?P<prev>" + _N + r") -> (?P<me>" + _I + r") -> (?P<next>" +
                         _N + r")\s*$")
_TRANSPORT = re.compile(
    r"^(?:Channel|Ring) (?P<c>" + _I + r")(?:/(?P<conn>" + _I + r"))? : (?P<a>" + _I +
    r")(?:\[(?P<adev>[0-9a-fA-F]+)\])? -> (?P<b>" + _I + r")(?:\[(?P<bdev>[0-9a-fA-F]+)\])?"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
_DOWNS = r"(?P<d0>" + _N + r")/(?P<d1>" + _N + r")/(?P<d2>" + _N + r")"
_TREE_OLD = re.compile(r"^Tree (?P<c>" + _I + r") : (?P<up>" + _N + r") -> (?P<rank>" + _I + r") -> " + _DOWNS)
_TREES_ITEM = re.compile(r"\[(?P<c>" + _I + r")\]\s*(?P<body>\S+)")
_TREES_NEW = re.compile(r"^" + _DOWNS + r"->(?P<rank>" + _I + r")->(?P<up>" + _N + r")$")
_TREES_24 = re.compile(r"^(?P<up>" + _N + r")->(?P<rank>" + _I + r")->" + _DOWNS + r"$")
_PATTERN = re.compile(r"^Pattern (?P<p>" + _I + r"), crossNic (?P<cn>" + _I + r"), nChannels (?P<n>" + _I +
                      r"), (?:bw|speed) (?P<bi>" + _F + r")/(?P<be>" + _F + r"), type (?P<ti>[A-Z0-9]+)/"
                      r"(?P<te>[A-Z0-9]+), sameChannels (?P<same>" + _I + r")")
_GRAPH_CH = re.compile(r"^\s*(?P<c>" + _I + r") :(?P<toks>(?: +[A-Za-z]+/[0-9A-Fa-fx-]+)+)\s*$")
_SYSTEM = re.compile(r"=== System : maxBw (?P<max>" + _F + r") totalBw (?P<tot>" + _F + r") ===")
_TOPO_LINK = re.compile(r"^\s*\+ (?P<lt>[A-Z0-9]+)\[(?P<bw>" + _F + r")\] - (?P<kind>[A-Z]+)/(?P<id>[0-9A-Fa-f-]+)"
                        r"(?: \((?P<extra>[^)]*)\))?\s*$")
_PATH_LINE = re.compile(r"^(?P<kind>GPU|NET|CPU|NIC|NVS)/(?P<id>[0-9A-Fa-f-]+) :(?P<rest>.*)$")
_PATH_ITEM = re.compile(r"(?P<kind>[A-Z]+)/(?P<id>[0-9A-Fa-f-]+) \((?P<hops>" + _I + r")/(?P<bw>" + _F +
                        r")/(?P<type>[A-Z0-9]+)\)")
_NET_USING = re.compile(r"^NET/(?P<net>\w+) : Using (?P<rest>.*)$")
_NIC_ITEM = re.compile(r"\[(?P<i>" + _I + r")\](?P<name>[^\s:\[\]<>]+)(?::(?P<port>" + _I +
                       r")/(?P<ll>[A-Za-z]+)(?P<sharp>/SHARP)?)?")
_USING_NET = re.compile(r"^Using network (?P<net>\S+)")
_ENV = re.compile(r"^(?P<k>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<v>.*?)\.?\s*$")
_COLL_CH = re.compile(r"(?P<n>" + _I + r") (?P<what>coll|collnet|nvls|p2p) channels(?P<pp> per peer)?")
_NVLS_MC = re.compile(r"NVLS multicast support is (?P<not>not )?available")
_NVLS_HEAD = re.compile(r"^NVLS Head\s+(?P<h>" + _I + r"):(?P<ranks>(?:\s+" + _N + r")+)\s*$")


def nccl_bus_id(token: str) -> Optional[str]:
    """NCCL's int64 bus id as printed (``F000``, ``9B000``, ``0x10f000``; busIdToInt64 drops ``:``
    and ``.`` from ``dddd:bb:dd.f``) -> ``0000:0f:00.0``; None when not hex."""
    try:
        v = int(str(token).lower().replace("0x", ""), 16)
    except ValueError:
        return None
    if v < 0 or v >> 36:
        return None
    return f"{v >> 20:04x}:{(v >> 12) & 0xff:02x}:{(v >> 4) & 0xff:02x}.{v & 0xf:x}"


def header_bus_id(text: str) -> Optional[str]:
    """nccl-tests' device bracket: ``0x0f`` (bus only) or ``0000:18:00`` (domain:bus:device)."""
    t = str(text).strip().lower()
    m = re.fullmatch(r"0x([0-9a-f]{1,2})", t)
    if m:
        return f"0000:{int(m.group(1), 16):02x}:00.0"
    m = re.fullmatch(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-9a-f]))?", t)
    if m:
        return f"{m.group(1)}:{m.group(2)}:{m.group(3)}.{m.group(4) or '0'}"
    return None


def _num(text: str) -> Optional[float]:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _transport_kind(via: str) -> dict:
    """``P2P/IPC/read`` -> kind P2P; ``NET/IBext_v8/7/GDRDMA`` -> kind NET, plugin, NIC index, GDR;
    ``SHM/direct/direct`` and 2.4's ``direct shared memory`` -> SHM."""
    parts = via.split("/")
    head = parts[0].strip()
    if via.startswith("direct shared memory") or head == "SHM":
        return {"kind": "SHM"}
    if head == "NET":
        out: dict = {"kind": "NET", "plugin": parts[1] if len(parts) > 1 else None, "nic": None,
                     "gdr": any(p.strip() == "GDRDMA" for p in parts[2:])}
        if len(parts) > 2 and parts[2].isdigit():
            out["nic"] = int(parts[2])
        return out
    if head == "P2P":
        return {"kind": "P2P", "read": via.endswith("/read")}
    return {"kind": head.split()[0] if head.split() else "?"}


class _State:
    """Accumulators while reading one log."""

    def __init__(self, path: str):
        self.path = path
        self.warnings: list = []
        self.more_warnings = 0
        self.versions: list = []
        self.host_versions: dict = {}
        self.hosts: list = []
        self.comms: list = []          # (nranks, nnodes, local_ranks) in order of appearance
        self.ranks: dict = {}          # rank -> info
        self.ring_sets: list = []      # {"n": NN, "thread": key, "line": ln, "rings": {c: [ranks]}}
        self.open_ring_set: dict = {}  # thread -> index in ring_sets
        self.neigh: dict = {}          # channel -> {rank: (prev, next)}
        self.trees: dict = {}          # (channel, rank) -> (up, [down])
        self.graphs: list = []         # unique graphs
        self.pending: dict = {}        # thread -> (graph dict, header line)
        self.transports: dict = {}     # (a, b, via, dir) -> set(channels)
        self.transport_devs: dict = {}
        self.nics: list = []
        self.net_kind: Optional[str] = None
        self.network: Optional[str] = None
        self.env: dict = {}
        self.coll: Optional[dict] = None
        self.nvls_mc: Optional[bool] = None
        self.nvls_heads: dict = {}
        self.connected = {"rings": False, "trees": False, "nvls": False}
        self.system: Optional[dict] = None
        self.topo_gpus: dict = {}      # (host, bus) -> rank
        self.topo_links: dict = {}     # link type -> max bw
        self.topo_nets: dict = {}      # (host, NET id) -> bw
        self.paths: dict = {}          # (host, src, dst) -> (hops, bw, type)
        self.nccl_warnings: list = []
        self.tests_ranks: dict = {}    # rank -> (host, dev, bus, name) from the nccl-tests header
        self.nccl_lines = 0

    def warn(self, lineno: Optional[int], msg: str) -> None:
        if len(self.warnings) >= MAX_WARNINGS:
            self.more_warnings += 1
            return
        where = f"{self.path}:{lineno}" if lineno else self.path
        self.warnings.append(f"{where}: {msg}")

    def rank_info(self, rank: int) -> dict:
        return self.ranks.setdefault(rank, {"rank": rank, "host": None, "cuda_dev": None, "bus_id": None,
                                            "local_rank": None, "gpu_name": None})

    def bind(self, key: tuple, rank: int, dev: int) -> None:
        """The thread ``key`` printed a line as ``rank``: remember the rank's host and CUDA device."""
        info = self.rank_info(rank)
        info["host"] = info["host"] or key[0]
        if info["cuda_dev"] is None:
            info["cuda_dev"] = dev


def _short(msg: str, n: int = 60) -> str:
    msg = " ".join(msg.split())
    return msg if len(msg) <= n else msg[:n - 3] + "..."


def _split_messages(line: str) -> list:
    """[(prefix match or None, message)] for one physical line."""
    found = list(_PREFIX.finditer(line))
    if not found:
        return [(None, line)]
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(line)
        out.append((m, line[m.end():end].rstrip()))
    return out


def parse_nccl_log(text: Any, path: Optional[str] = None) -> dict:
    """Parse an NCCL debug log into a ``gpucomm.nccllog/v1`` dict (module docstring for the lines
    read).  Keys: ``version`` (``host_versions`` when prefixed; hosts that disagree are warned
    about), ``hosts``, ``nranks``/``nnodes``/``local_ranks`` (``layout_from``
    says from what), ``ranks`` (host, CUDA device, bus id, local rank), ``channels`` (the final
    channel count, ``channels_from``), ``coll_channels``, ``rings`` ([{channel, ranks, complete}]),
    ``trees`` ([{channel, rank, up, down}]), ``graphs`` ([{pattern, pattern_name, n_channels,
    bw_intra, bw_inter, type_intra, type_inter, cross_nic, same_channels, channels: [{nets,
    ranks}], hosts}]), ``transports`` ([{from, to, via, kind, direction, channels, ...}]),
    ``transport_kinds``, ``network``, ``nics``, ``env``, ``nvls``, ``collnet``, ``system``,
    ``topology`` (bus id -> rank, link bandwidths), ``paths`` (NCCL's path types), ``connected``,
    ``nccl_warnings`` (WARN lines) and ``warnings`` (lines that could not be read).

    Raises InputError for a non-string, binary data, or text without a single NCCL line."""
    path = path or "<nccl log>"
    if not isinstance(text, str):
        raise InputError("not text", path, expected="an NCCL_DEBUG=INFO log")
    st = _State(path)
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, 1):
        if "\x00" in raw:
            raise InputError("binary data in the log", path, lineno, expected="an NCCL_DEBUG=INFO text log")
        vm = _VERSION.search(raw)
        if vm:
            if vm.group("v") not in st.versions:
                st.versions.append(vm.group("v"))
            pm = _PREFIX.search(raw)
            if pm and pm.start() < vm.start():
                st.host_versions.setdefault(pm.group("host"), vm.group("v"))
        if "#" in raw and "Rank" in raw:
            tm = _TESTS_RANK.search(raw)
            if tm:
                st.tests_ranks[int(tm.group("rank"))] = (tm.group("host"), int(tm.group("dev")),
                                                         header_bus_id(tm.group("bus")), tm.group("name") or None)
                continue
        for m, msg in _split_messages(raw):
            if m is None:
                continue
            st.nccl_lines += 1
            key = (m.group("host"), m.group("pid"), m.group("tid"))
            if key[0] not in st.hosts:
                st.hosts.append(key[0])
            if m.group("level") in ("WARN", "ABORT"):
                if len(st.nccl_warnings) < MAX_NCCL_WARNINGS:
                    st.nccl_warnings.append(f"{key[0]}: {_short(msg, 200)}")
                continue
            _message(st, key, int(m.group("dev")), msg, lineno)
    for key, (g, ln) in st.pending.items():
        st.warn(ln, f"graph print stops after {len(g['channels'])} of its {g['n_channels']} channels "
                    f"(Pattern {g['pattern']}; truncated log?)")
        _add_graph(st, g, key)
    if st.nccl_lines == 0 and not st.versions:
        first = next((i for i, ln in enumerate(lines, 1) if ln.strip()), None)
        raise InputError("no NCCL debug lines found", path, first,
                         expected="NCCL_DEBUG=INFO output with lines like 'host:pid:tid [0] NCCL INFO ...'")
    return _finish(st)


def _message(st: _State, key: tuple, dev: int, msg: str, lineno: int) -> None:
    """One ``NCCL INFO`` message."""
    body = msg.strip()
    # A graph print in progress on this thread takes its channel lines first.
    pend = st.pending.get(key)
    if pend is not None:
        g, ln = pend
        cm = _GRAPH_CH.match(msg)
        if cm and int(cm.group("c")) == len(g["channels"]):
            toks = cm.group("toks").split()
            nets = [t.split("/", 1)[1] for t in toks if t.startswith("NET/")]
            ranks = []
            for t in toks:
                if t.startswith("GPU/"):
                    v = t.split("/", 1)[1]
                    if v.isdigit():
                        ranks.append(int(v))
            g["channels"].append({"nets": nets, "ranks": ranks})
            if len(g["channels"]) >= g["n_channels"]:
                del st.pending[key]
                _add_graph(st, g, key)
            return
        st.warn(ln, f"graph print stops after {len(g['channels'])} of its {g['n_channels']} channels "
                    f"(Pattern {g['pattern']})")
        del st.pending[key]
        _add_graph(st, g, key)
    if not body:
        return
    head = body.split(None, 1)[0]
    if head == "NCCL" and body.startswith("NCCL version"):
        return
    if "comm 0x" in body:
        cm = _COMM_NEW.search(body)
        if cm:
            rank, n, nodes, lr, l_ = (int(cm.group(k)) for k in ("rank", "n", "nodes", "lr", "l"))
            if rank >= n or l_ >= lr or nodes > n or lr > n or nodes < 1:
                st.warn(lineno, f"comm line with impossible values (rank {rank} of {n}, "
                                f"localRank {l_} of {lr}, {nodes} nodes)")
                return
            st.comms.append((n, nodes, lr))
            st.bind(key, rank, dev)
            st.rank_info(rank)["local_rank"] = l_
            return
        cm = _COMM_OLD.search(body)
        if cm:
            rank, n = int(cm.group("rank")), int(cm.group("n"))
            if rank >= n:
                st.warn(lineno, f"comm line with rank {rank} of {n} ranks")
                return
            st.comms.append((n, None, None))
            st.bind(key, rank, int(cm.group("dev")))
            info = st.rank_info(rank)
            info["cuda_dev"] = int(cm.group("dev"))
            if cm.group("bus"):
                info["bus_id"] = info["bus_id"] or nccl_bus_id(cm.group("bus"))
            return
    if head == "Channel" or head == "Ring":
        if " via " in body:
            tm = _TRANSPORT.match(body)
            if not tm:
                st.warn(lineno, f"unreadable transport line {_short(body)!r}")
                return
            a, b = int(tm.group("a")), int(tm.group("b"))
            d = tm.group("dir")
            k = (a, b, tm.group("via"), d)
            st.transports.setdefault(k, set()).add(int(tm.group("c")))
            for r, dv in ((a, tm.group("adev")), (b, tm.group("bdev"))):
                if dv is not None:
                    st.transport_devs.setdefault(r, dv)
            me = b if d == "receive" else a
            st.bind(key, me, dev)
            return
        rm = _RING_PRINT.match(body)
        if rm:
            c, n = int(rm.group("c")), int(rm.group("n"))
            ranks = [int(x) for x in rm.group("ranks").split()]
            if c >= n or not ranks or len(set(ranks)) != len(ranks):
                st.warn(lineno, f"unreadable ring line {_short(body)!r} (channel {c} of {n}, "
                                f"{len(ranks)} ranks{', repeated ranks' if len(set(ranks)) != len(ranks) else ''})")
                return
            idx = st.open_ring_set.get(key)
            cur = st.ring_sets[idx] if idx is not None else None
            if cur is None or c in cur["rings"] or cur["n"] != n or len(ranks) != cur["size"]:
                st.ring_sets.append({"n": n, "size": len(ranks), "line": lineno, "rings": {}})
                st.open_ring_set[key] = len(st.ring_sets) - 1
                cur = st.ring_sets[-1]
            cur["rings"][c] = ranks
            return
        nm = _RING_NEIGH.match(body)
        if nm:
            c, prev, me, nxt = (int(nm.group(k)) for k in ("c", "prev", "me", "next"))
            old = st.neigh.setdefault(c, {}).get(me)
            if old is not None and old != (prev, nxt):
                st.warn(lineno, f"ring {c}: rank {me} listed twice with different neighbours (several communicators?)")
                return
            st.neigh[c][me] = (prev, nxt)
            st.bind(key, me, dev)
            return
        if re.match(r"^(Channel|Ring) \d+", body) and ":" in body:
            st.warn(lineno, f"unreadable ring line {_short(body)!r}")
        return
    if head == "Trees":
        items = list(_TREES_ITEM.finditer(body))
        if not items:
            st.warn(lineno, f"unreadable tree line {_short(body)!r}")
            return
        for it in items:
            b = it.group("body")
            tn = _TREES_NEW.match(b)
            if tn:
                _tree(st, key, dev, lineno, int(it.group("c")), int(tn.group("rank")), int(tn.group("up")),
                      [int(tn.group(x)) for x in ("d0", "d1", "d2")])
                continue
            to = _TREES_24.match(b)
            if to:
                _tree(st, key, dev, lineno, int(it.group("c")), int(to.group("rank")), int(to.group("up")),
                      [int(to.group(x)) for x in ("d0", "d1", "d2")])
                continue
            st.warn(lineno, f"unreadable tree entry {_short(it.group(0))!r}")
        return
    if head == "Tree":
        tm = _TREE_OLD.match(body)
        if tm:
            _tree(st, key, dev, lineno, int(tm.group("c")), int(tm.group("rank")), int(tm.group("up")),
                  [int(tm.group(x)) for x in ("d0", "d1", "d2")])
        elif re.match(r"^Tree \d+ :", body):
            st.warn(lineno, f"unreadable tree line {_short(body)!r}")
        return
    if head == "Pattern":
        pm = _PATTERN.match(body)
        if not pm:
            st.warn(lineno, f"unreadable graph header {_short(body)!r}")
            return
        bi, be = _num(pm.group("bi")), _num(pm.group("be"))
        ti, te = pm.group("ti"), pm.group("te")
        if bi is None or be is None or ti not in PATH_TYPES or te not in PATH_TYPES:
            st.warn(lineno, f"graph header with unknown values {_short(body)!r}")
            return
        p = int(pm.group("p"))
        g = {"pattern": p, "pattern_name": PATTERNS.get(p, f"pattern{p}"), "cross_nic": int(pm.group("cn")),
             "n_channels": int(pm.group("n")), "bw_intra": bi, "bw_inter": be, "type_intra": ti,
             "type_inter": te, "same_channels": int(pm.group("same")), "channels": [], "line": lineno}
        if g["n_channels"] == 0:
            _add_graph(st, g, key)
        else:
            st.pending[key] = (g, lineno)
        return
    sm = _SYSTEM.search(body)
    if sm:
        st.system = {"max_bw": _num(sm.group("max")), "total_bw": _num(sm.group("tot"))}
        return
    if body.startswith("+ "):
        lm = _TOPO_LINK.match(body)
        if lm:
            bw = _num(lm.group("bw"))
            if bw is not None:
                lt = lm.group("lt")
                st.topo_links[lt] = max(st.topo_links.get(lt, 0.0), bw)
            if lm.group("kind") == "GPU" and lm.group("extra") and lm.group("extra").strip().isdigit():
                bus = nccl_bus_id(lm.group("id"))
                if bus:
                    st.topo_gpus[(key[0], bus)] = int(lm.group("extra"))
            elif lm.group("kind") == "NET" and bw is not None:
                st.topo_nets[(key[0], lm.group("id"))] = bw
        return
    if "(" in body and " :" in body:
        pl = _PATH_LINE.match(body)
        if pl:
            items = list(_PATH_ITEM.finditer(pl.group("rest")))
            if not items and pl.group("rest").strip():
                st.warn(lineno, f"unreadable path line {_short(body)!r}")
            src = f"{pl.group('kind')}/{pl.group('id').upper()}"
            for it in items:
                bw = _num(it.group("bw"))
                if bw is None or it.group("type") not in PATH_TYPES:
                    continue
                dst = f"{it.group('kind')}/{it.group('id').upper()}"
                st.paths[(key[0], src, dst)] = (int(it.group("hops")), bw, it.group("type"))
            return
    if head.startswith("NET/") and " : Using " in body:
        um = _NET_USING.match(body)
        if um:
            st.net_kind = um.group("net")
            nics = []
            for it in _NIC_ITEM.finditer(um.group("rest").split(";")[0]):
                nics.append({"index": int(it.group("i")), "name": it.group("name"),
                             "port": int(it.group("port")) if it.group("port") else None,
                             "link_layer": it.group("ll"), "sharp": bool(it.group("sharp")), "net": um.group("net")})
            if nics and (not st.nics or len(nics) > len(st.nics)):
                st.nics = nics
        return
    if head == "Using":
        um = _USING_NET.match(body)
        if um:
            st.network = um.group("net")
        return
    if head.startswith("NCCL_"):
        em = _ENV.match(body)
        if em:
            st.env.setdefault(em.group("k"), em.group("v"))
        return
    if "coll channels" in body:
        found = {}
        for cm in _COLL_CH.finditer(body):
            found[cm.group("what") + ("_per_peer" if cm.group("pp") else "")] = int(cm.group("n"))
        if "coll" in found:
            st.coll = found
        return
    if body.startswith("NVLS"):
        mm = _NVLS_MC.search(body)
        if mm:
            st.nvls_mc = (mm.group("not") is None) or bool(st.nvls_mc)
            return
        hm = _NVLS_HEAD.match(body)
        if hm:
            st.nvls_heads[int(hm.group("h"))] = [int(x) for x in hm.group("ranks").split()]
            return
    if body.startswith("Connected all rings"):
        st.connected["rings"] = True
    elif body.startswith("Connected all trees"):
        st.connected["trees"] = True
    elif body.startswith("Connected NVLS"):
        st.connected["nvls"] = True


def _tree(st: _State, key: tuple, dev: int, lineno: int, c: int, rank: int, up: int, downs: list) -> None:
    down = [d for d in downs if d != -1]
    if up == rank or rank in down or len(set(down)) != len(down) or min([up] + downs) < -1:
        st.warn(lineno, f"tree channel {c}: impossible entry for rank {rank} (up {up}, down {downs})")
        return
    old = st.trees.get((c, rank))
    if old is not None and old != (up, down):
        st.warn(lineno, f"tree channel {c}: rank {rank} listed twice with different links (several communicators?)")
        return
    st.trees[(c, rank)] = (up, down)
    st.bind(key, rank, dev)


def _add_graph(st: _State, g: dict, key: tuple) -> None:
    """Keep each distinct graph once; ``hosts`` says who printed it."""
    sig = (g["pattern"], g["cross_nic"], g["n_channels"], g["bw_intra"], g["bw_inter"], g["type_intra"],
           g["type_inter"], g["same_channels"], tuple((tuple(c["nets"]), tuple(c["ranks"])) for c in g["channels"]))
    for old in st.graphs:
        if old["_sig"] == sig:
            if key[0] not in old["hosts"]:
                old["hosts"].append(key[0])
            return
    g = dict(g)
    g["_sig"] = sig
    g["hosts"] = [key[0]]
    st.graphs.append(g)


def _ring_from_neighbours(nb: dict) -> tuple:
    """Ring order from ``Ring c : prev -> me -> next`` lines: start at the lowest rank and follow
    ``next``; (order, complete)."""
    start = min(nb)
    order = [start]
    seen = {start}
    cur = start
    while True:
        nxt = nb[cur][1]
        if nxt == start:
            return order, True
        if nxt in seen or nxt < 0:
            return order, False
        order.append(nxt)
        seen.add(nxt)
        if nxt not in nb:
            return order, False
        cur = nxt


def _finish(st: _State) -> dict:
    """Assemble the result dict from the accumulators."""
    # Layout: the communicator with the most ranks.
    comms = list(dict.fromkeys(st.comms))
    nranks = nnodes = local = None
    layout_from = None
    if comms:
        best = max(comms, key=lambda c: (c[0], c[1] is not None))
        nranks, nnodes, local = best
        layout_from = "comm lines"
        if len({c[0] for c in comms}) > 1:
            st.warn(None, f"the log holds {len({c[0] for c in comms})} communicators "
                          f"({', '.join(str(c) for c in sorted({c[0] for c in comms}))} ranks); "
                          f"the one with {nranks} ranks is reported")
    # nccl-tests header: rank -> host/device/bus.
    for r, (host, dev, bus, name) in st.tests_ranks.items():
        info = st.rank_info(r)
        info["host"] = info["host"] or host
        info["cuda_dev"] = dev if info["cuda_dev"] is None else info["cuda_dev"]
        info["bus_id"] = info["bus_id"] or bus
        info["gpu_name"] = name
    for (host, bus), r in st.topo_gpus.items():
        info = st.rank_info(r)
        if info["host"] in (None, host):
            info["host"] = host
            info["bus_id"] = bus
    for r, dv in st.transport_devs.items():
        info = st.rank_info(r)
        if len(dv) >= 4 or not dv.isdigit():
            info["bus_id"] = info["bus_id"] or nccl_bus_id(dv)
    if nranks is None:
        seen = set(st.ranks) | {r for (_, r) in st.trees} | \
            {x for (up, down) in st.trees.values() for x in [up] + down if x >= 0}
        for rs in st.ring_sets:
            for order in rs["rings"].values():
                seen |= set(order)
        for nb in st.neigh.values():
            seen |= {x for me, (p, n) in nb.items() for x in (me, p, n) if x >= 0}
        if seen:
            nranks = max(seen) + 1
            layout_from = "highest rank seen"
    if local is None:
        hosts_ranks: dict = {}
        for r, info in st.ranks.items():
            if info["host"]:
                hosts_ranks.setdefault(info["host"], set()).add(r)
        graph_sizes = {len(c["ranks"]) for g in st.graphs if g["pattern"] in (4, 1, 2, 3) for c in g["channels"]}
        if len(graph_sizes) == 1 and list(graph_sizes)[0] > 0:
            local = list(graph_sizes)[0]
            layout_from = (layout_from + ", " if layout_from else "") + "graph print"
        elif st.tests_ranks and len(hosts_ranks) > 0:
            sizes = {len(v) for v in hosts_ranks.values()}
            if len(sizes) == 1:
                local = sizes.pop()
                layout_from = (layout_from + ", " if layout_from else "") + "nccl-tests header"
    if nnodes is None and nranks and local:
        nnodes = -(-nranks // local)
    if local:
        for r, info in st.ranks.items():
            if info["local_rank"] is None and (nnodes or 1) >= 1:
                info["local_rank"] = r % local
    # Rings: the first ring print of the reported communicator, else the Ring neighbour lines.
    rings = []
    ring_n = None
    uniq: list = []
    for s_ in st.ring_sets:   # the same communicator re-created prints the same rings again
        if all(u["rings"] != s_["rings"] for u in uniq):
            uniq.append(s_)
    sets = [s_ for s_ in uniq if nranks is None or s_["size"] == nranks] or uniq
    if sets:
        chosen = sets[0]
        ring_n = chosen["n"]
        if len(uniq) > 1:
            st.warn(chosen["line"], f"{len(uniq)} different ring prints (communicators) in the log; "
                                    f"the one at this line ({chosen['size']} ranks) is reported")
        for c in sorted(chosen["rings"]):
            rings.append({"channel": c, "ranks": chosen["rings"][c], "complete": True, "from": "ring print"})
    elif st.neigh:
        for c in sorted(st.neigh):
            order, complete = _ring_from_neighbours(st.neigh[c])
            if nranks and complete and len(order) != nranks:
                complete = False
            rings.append({"channel": c, "ranks": order, "complete": complete, "from": "ring lines"})
    trees = [{"channel": c, "rank": r, "up": up, "down": list(down)}
             for (c, r), (up, down) in sorted(st.trees.items())]
    # Final channel count: the ring print's NN, then "N coll channels", then what the lines show.
    channels, channels_from = None, None
    if ring_n is not None:
        channels, channels_from = ring_n, "Channel NN/CC lines"
    elif st.coll is not None:
        channels, channels_from = st.coll["coll"], "coll channels line"
    elif trees:
        channels, channels_from = max(t["channel"] for t in trees) + 1, "tree lines"
    elif st.neigh:
        channels, channels_from = max(st.neigh) + 1, "Ring lines"
    graphs = []
    for g in st.graphs:
        g = {k: v for k, v in g.items() if k != "_sig"}
        graphs.append(g)
    transports = []
    kinds: dict = {}
    for (a, b, via, d), chans in sorted(st.transports.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                                                 kv[0][3] or "")):
        t = {"from": a, "to": b, "via": via, "direction": d, "channels": sorted(chans)}
        t.update(_transport_kind(via))
        transports.append(t)
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + len(chans)
    paths = [{"host": h, "from": s, "to": d, "hops": v[0], "bw": v[1], "type": v[2]}
             for (h, s, d), v in sorted(st.paths.items())]
    if len(set(st.host_versions.values())) > 1:
        st.warn(None, "hosts run different NCCL versions: " +
                ", ".join(f"{h} {v}" for h, v in sorted(st.host_versions.items())))
    if st.more_warnings:
        st.warnings.append(f"{st.path}: ... and {st.more_warnings} more unreadable lines")
    if not (rings or trees or graphs or channels or st.coll or st.transports):
        st.warnings.append(f"{st.path}: no ring, tree or graph lines in the log (run with NCCL_DEBUG=INFO "
                           f"NCCL_DEBUG_SUBSYS=INIT,GRAPH to get them)")
    heads = [st.nvls_heads[h] for h in sorted(st.nvls_heads)]
    return {
        "schema": SCHEMA,
        "source": st.path,
        "nccl_lines": st.nccl_lines,
        "version": st.versions[0] if st.versions else None,
        "versions": list(st.versions),
        "host_versions": dict(sorted(st.host_versions.items())),
        "hosts": sorted(set(st.hosts) | {v[0] for v in st.tests_ranks.values()}),
        "nranks": nranks,
        "nnodes": nnodes,
        "local_ranks": local,
        "layout_from": layout_from,
        "communicators": [{"nranks": c[0], "nnodes": c[1], "local_ranks": c[2]} for c in comms],
        "ranks": [st.ranks[r] for r in sorted(st.ranks)],
        "channels": channels,
        "channels_from": channels_from,
        "coll_channels": st.coll,
        "rings": rings,
        "trees": trees,
        "graphs": graphs,
        "transports": transports,
        "transport_kinds": kinds,
        "network": st.network,
        "nics": st.nics,
        "env": dict(sorted(st.env.items())),
        "nvls": {"multicast": st.nvls_mc, "heads": heads,
                 "channels": (st.coll or {}).get("nvls"), "connected": st.connected["nvls"]},
        "collnet": None if st.coll is None or "collnet" not in st.coll else st.coll["collnet"] > 0,
        "system": st.system,
        "topology": {"gpus": [{"host": h, "bus_id": b, "rank": r} for (h, b), r in sorted(st.topo_gpus.items())],
                     "link_bw": dict(sorted(st.topo_links.items())),
                     "nets": [{"host": h, "net": n, "bw": bw} for (h, n), bw in sorted(st.topo_nets.items())]},
        "paths": paths,
        "connected": dict(st.connected),
        "nccl_warnings": list(st.nccl_warnings),
        "warnings": list(st.warnings),
    }


# ----------------------------------------------------------------------------------------------
# Comparison with a rings/trees plan and the reference model
def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def pick_graph(log: dict, patterns: tuple) -> Optional[dict]:
    """The graph of one of ``patterns`` printed for the lowest ranks (node 0's view; every node
    prints its own ranks)."""
    cands = [g for g in log.get("graphs") or [] if g["pattern"] in patterns]
    if not cands:
        return None
    return min(cands, key=lambda g: (min((r for c in g["channels"] for r in c["ranks"]), default=1 << 40),
                                     g.get("line") or 0))


def _doc_gpus(doc: dict) -> dict:
    """GPU index -> normalised PCI bus id (lower case) of a topology document."""
    out = {}
    for g in doc.get("gpus") or []:
        if isinstance(g, dict) and isinstance(g.get("index"), int) and g.get("pci_bus_id"):
            out[g["index"]] = str(g["pci_bus_id"]).lower()
    return out


def rank_to_gpu(log: dict, doc: dict, gpus: list) -> tuple:
    """Local rank -> GPU index of ``doc`` for the ``len(gpus)`` ranks of a node: by PCI bus id (the
    log's topology dump, comm lines or nccl-tests header), else by CUDA device (assumes no
    CUDA_VISIBLE_DEVICES reordering), else local rank k = k-th of ``gpus``.  Returns (mapping,
    how, warnings)."""
    L = log.get("local_ranks") or len(gpus)
    n = len(gpus)
    bus_to_idx = {b: i for i, b in _doc_gpus(doc).items() if i in gpus}
    by_bus: dict = {}
    by_dev: dict = {}
    for info in sorted(log.get("ranks") or [], key=lambda x: x["rank"]):
        lr = info["rank"] % L if L else None
        if lr is None or lr >= n:
            continue
        if info.get("bus_id") and info["bus_id"] in bus_to_idx:
            by_bus.setdefault(lr, bus_to_idx[info["bus_id"]])
        if info.get("cuda_dev") is not None and info["cuda_dev"] in gpus:
            by_dev.setdefault(lr, info["cuda_dev"])
    warnings = []
    mapping, hows = {}, set()
    for lr in range(n):
        if lr in by_bus:
            mapping[lr] = by_bus[lr]
            hows.add("PCI bus id")
        elif lr in by_dev:
            mapping[lr] = by_dev[lr]
            hows.add("CUDA device")
        else:
            mapping[lr] = gpus[lr]
            hows.add("local rank order")
    if len(set(mapping.values())) != len(mapping):
        warnings.append("the log's ranks map to the same GPU twice (CUDA_VISIBLE_DEVICES?); "
                        "ranks are matched to GPUs in local rank order instead")
        mapping = {lr: gpus[lr] for lr in range(n)}
        hows = {"local rank order"}
    order = ("PCI bus id", "CUDA device", "local rank order")
    return mapping, " + ".join(h for h in order if h in hows), warnings


def _layout_warnings(log: dict, nodes: int, ngpus: int) -> list:
    out = []
    lnodes, local, nranks = log.get("nnodes"), log.get("local_ranks"), log.get("nranks")
    if lnodes is not None and lnodes != nodes:
        out.append(f"the log is from {lnodes} node(s) ({nranks} ranks); this plan is for --nodes {nodes}: "
                   f"rerun with --nodes {lnodes} to compare like with like")
    if local is not None and local != ngpus:
        out.append(f"the log has {local} ranks per node; this plan uses {ngpus} GPUs per node "
                   f"(--gpus to pick the same ones)")
    if lnodes is None and local is None and nranks is not None and nranks != nodes * ngpus:
        out.append(f"the log has {nranks} ranks; this plan has {nodes} x {ngpus}")
    return out


def _graph_summary(g: Optional[dict], L: Optional[int], mapping: dict) -> Optional[dict]:
    if g is None:
        return None
    chans = []
    for c in g["channels"]:
        gpus_ = None
        if L and c["ranks"] and all((r % L) in mapping for r in c["ranks"]):
            gpus_ = [mapping[r % L] for r in c["ranks"]]
        chans.append({"nets": list(c["nets"]), "ranks": list(c["ranks"]), "gpus": gpus_})
    return {k: g[k] for k in ("pattern", "pattern_name", "n_channels", "bw_intra", "bw_inter", "type_intra",
                              "type_inter", "cross_nic", "same_channels", "hosts")} | {"channels": chans}


def _node_chain(order: list, L: int, node: int = 0) -> Optional[list]:
    """The stretch of a cyclic ring order that runs through ``node`` (ranks node*L ..), rotated so
    it is contiguous; None when the node's ranks are not one stretch."""
    mine = [i for i, r in enumerate(order) if r // L == node]
    if not mine:
        return None
    n = len(order)
    start = next((i for i in mine if order[(i - 1) % n] // L != node), mine[0])
    chain = []
    i = start
    while order[i % n] // L == node and len(chain) < n:
        chain.append(order[i % n])
        i += 1
    return chain if len(chain) == len(mine) else None


def _paths_vs_ours(log: dict, doc: dict) -> dict:
    """NCCL's GPU->GPU path types (its path print, for the first host that printed one) next to our
    model's (gpucomm.planners.nccl.paths, NCCL rule), matched by PCI bus id."""
    from gpucomm.planners.nccl.paths import RANK, compute_path_set

    rows = [p for p in log.get("paths") or [] if p["from"].startswith("GPU/") and p["to"].startswith("GPU/")
            and p["from"] != p["to"]]
    if not rows:
        return {"compared": 0, "same": 0, "differ": [], "p2p_off": []}
    host = rows[0]["host"]
    gpus = _doc_gpus(doc)
    by_bus = {b: i for i, b in gpus.items()}
    ps = compute_path_set(doc)   # the plan was built from this document, so it has valid paths
    compared = same = 0
    differ, off = [], []
    for p in rows:
        if p["host"] != host:
            continue
        a, b = nccl_bus_id(p["from"].split("/", 1)[1]), nccl_bus_id(p["to"].split("/", 1)[1])
        if a not in by_bus or b not in by_bus:
            continue
        ours = ps.get(a, b)
        if ours is None:
            continue
        compared += 1
        if ours.type == p["type"]:
            same += 1
            continue
        differ.append({"from": by_bus[a], "to": by_bus[b], "nccl": p["type"], "ours": ours.type})
        if RANK.get(p["type"], 0) >= RANK["PHB"] > RANK[ours.type]:
            off.append(tuple(sorted((by_bus[a], by_bus[b]))))
    differ.sort(key=lambda d: (d["from"], d["to"]))
    return {"compared": compared, "same": same, "differ": differ, "p2p_off": sorted(set(off)), "host": host}


def _shm_pairs(log: dict, mapping: dict) -> list:
    """GPU pairs of one node that NCCL connected through shared memory (no P2P between them)."""
    L = log.get("local_ranks")
    if not L:
        return []
    out = []
    for t in log.get("transports") or []:
        if t.get("kind") == "SHM" and t["from"] // L == t["to"] // L:
            a, b = mapping.get(t["from"] % L), mapping.get(t["to"] % L)
            if a is not None and b is not None and a != b:
                out.append(tuple(sorted((a, b))))
    return sorted(set(out))


def _adjusted_reference(doc: dict, pairs: list, nodes: int, gpus: list) -> Optional[dict]:
    """nccl_reference on a copy of ``doc`` with NVML P2P status NOT_SUPPORTED between ``pairs``."""
    import copy

    from gpucomm.probes.errors import GpucommError

    from gpucomm.planners.nccl.search import nccl_reference

    d2 = copy.deepcopy(doc)
    bus = _doc_gpus(d2)
    for g in d2.get("gpus") or []:
        mine = g.get("index")
        for a, b in pairs:
            other = b if mine == a else a if mine == b else None
            if other is not None and other in bus:
                p2p = g.get("p2p") if isinstance(g.get("p2p"), dict) else {}
                p2p[bus[other]] = "NOT_SUPPORTED"
                g["p2p"] = p2p
    try:
        return nccl_reference(d2, nodes=nodes, gpus=gpus)
    except GpucommError:
        return None


def _cmp(nccl: Any, model: Any) -> dict:
    match = None
    if nccl is not None and model is not None:
        match = abs(nccl - model) < 1e-6 if isinstance(nccl, (int, float)) and isinstance(model, (int, float)) \
            else nccl == model
    return {"nccl": nccl, "model": model, "match": match}


def _graph_diffs(g: Optional[dict], ref: Optional[dict], inter: bool) -> tuple:
    """Field-by-field comparison of a logged graph with a graph of the reference model."""
    rows = {}
    if g is None or ref is None:
        return rows, []
    rows["search_channels"] = _cmp(g["n_channels"], ref.get("search_channels"))
    rows["bw_intra"] = _cmp(g["bw_intra"], ref.get("bw_intra"))
    rows["type_intra"] = _cmp(g["type_intra"], ref.get("type_intra"))
    if inter:
        rows["bw_inter"] = _cmp(g["bw_inter"], ref.get("bw_inter"))
        rows["type_inter"] = _cmp(g["type_inter"], ref.get("type_inter"))
    diffs = [f"{k} {_fmt(v['nccl'])} vs {_fmt(v['model'])}" for k, v in rows.items() if v["match"] is False]
    return rows, diffs


def _model_summary(ref: Optional[dict], key: str) -> Optional[dict]:
    """The reference model's graph (ring, or the tree graph for ``key="tree"``) in the log's terms."""
    if not ref:
        return None
    src = ref if key == "ring" else (ref.get("tree") or {})
    return {"channels": ref.get("channels"), "pattern": src.get("pattern"),
            "search_channels": src.get("search_channels"), "bw_intra": src.get("bw_intra"),
            "bw_inter": src.get("bw_inter"), "type_intra": src.get("type_intra"),
            "type_inter": src.get("type_inter"), "total_bw": ref.get("total_bw") if key == "ring" else None}


def _version_note(log: dict, diffs: list) -> list:
    """Our model follows NCCL 2.30's search; say so when an older log differs only in typeInter."""
    v = log.get("version") or ""
    m = re.match(r"(\d+)\.(\d+)", v)
    if diffs and all(d.startswith("type_inter") for d in diffs) and m and (int(m.group(1)), int(m.group(2))) < (2, 30):
        return [f"our model follows NCCL 2.30's search; this log is from NCCL {v}, whose search can settle on a "
                f"higher typeInter for the same rings"]
    return []


def _base_section(log: dict, nodes: int, gpus: list, doc: dict) -> tuple:
    mapping, how, warns = rank_to_gpu(log, doc, gpus)
    warns = _layout_warnings(log, nodes, len(gpus)) + warns
    kinds = dict(log.get("transport_kinds") or {})
    by_via: dict = {}
    for t in log.get("transports") or []:
        by_via[t["via"]] = by_via.get(t["via"], 0) + len(t["channels"])
    sec = {
        "source": log.get("source"),
        "version": log.get("version"),
        "hosts": list(log.get("hosts") or []),
        "nranks": log.get("nranks"), "nnodes": log.get("nnodes"), "local_ranks": log.get("local_ranks"),
        "layout_from": log.get("layout_from"),
        "channels": log.get("channels"), "channels_from": log.get("channels_from"),
        "coll_channels": log.get("coll_channels"),
        "transports": {"kinds": kinds, "by_via": dict(sorted(by_via.items())),
                       "gdr": any(t.get("gdr") for t in log.get("transports") or []) if kinds.get("NET") else None},
        "network": log.get("network"), "nics": [n["name"] for n in log.get("nics") or []],
        "nvls": log.get("nvls"), "env": log.get("env") or {},
        "rank_to_gpu": [{"local_rank": k, "gpu": v} for k, v in sorted(mapping.items())],
        "rank_to_gpu_from": how,
        "log_warnings": list(log.get("warnings") or [])[:10],
        "nccl_warnings": list(log.get("nccl_warnings") or [])[:10],
    }
    return sec, mapping, warns


def _p2p_note(log: dict, doc: dict, mapping: dict, nodes: int, gpus: list,
              g: Optional[dict], key: str = "ring") -> tuple:
    """Pairs where NCCL had no P2P but our topology would (path print or SHM transports), and what
    our model of NCCL predicts with P2P off there.  Returns (paths summary, adjusted dict, notes)."""
    paths = _paths_vs_ours(log, doc)
    pairs = sorted(set(paths.pop("p2p_off")) | set(_shm_pairs(log, mapping)))
    notes = []
    if paths["compared"]:
        notes.append(f"path types: {paths['same']} of {paths['compared']} GPU pairs in NCCL's path print "
                     f"({paths['host']}) have our model's type" +
                     ("; differing: " + ", ".join(f"GPU{d['from']}->GPU{d['to']} NCCL {d['nccl']} vs ours "
                                                  f"{d['ours']}" for d in paths["differ"][:4]) +
                      (f" (+{len(paths['differ']) - 4} more)" if len(paths["differ"]) > 4 else "")
                      if paths["differ"] else ""))
    adjusted = None
    if pairs:
        why = [k for k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL") if k in (log.get("env") or {})]
        adj = _adjusted_reference(doc, pairs, nodes, gpus)
        if adj is not None:
            adjusted = dict(_model_summary(adj, key) or {}, p2p_off_pairs=[list(p) for p in pairs])
            _, diffs = _graph_diffs(g, adjusted, (log.get("nnodes") or nodes) > 1)
            verdict = "" if g is None else \
                " -- " + ("matches the log" if not diffs else "still differs: " + ", ".join(diffs))
            adjusted["matches_log"] = None if g is None else not diffs
            notes.append(
                f"NCCL had no P2P between {len(pairs)} GPU pair(s) that our topology connects directly "
                f"({'set by ' + ', '.join(why) if why else 'e.g. GeForce cards, ACS/IOMMU, or a VM'}); with P2P "
                f"off there our model of NCCL predicts {adjusted['channels']} channels, {key} graph "
                f"{_fmt(adjusted['search_channels'])} x {_fmt(adjusted['bw_intra'])}/{_fmt(adjusted['bw_inter'])} GB/s "
                f"{adjusted['type_intra']}/{_fmt(adjusted['type_inter'])}{verdict}")
            notes.extend(_version_note(log, diffs))
    return paths, adjusted, notes


def compare_rings(log: dict, plan: dict, ref: Optional[dict], doc: dict, nodes: int) -> dict:
    """The ``nccl_log`` section of ``gpucomm rings --compare``: what NCCL did per the log (channels,
    ring graph, per-channel orders, transports) next to our model of NCCL (``ref``, the full
    :func:`gpucomm.planners.nccl.search.nccl_reference` dict) and our rings (``plan``, gpucomm.rings/v1),
    with a one-line verdict."""
    gpus = list(plan.get("gpus") or [])
    sec, mapping, warns = _base_section(log, nodes, gpus, doc)
    L = log.get("local_ranks") or len(gpus)
    lnodes = log.get("nnodes") or nodes
    g = pick_graph(log, (4,))
    sec["graph"] = _graph_summary(g, L, mapping)
    sec["model"] = _model_summary(ref, "ring")
    rings = []
    for r in log.get("rings") or []:
        chain = _node_chain(r["ranks"], L) if r["complete"] else \
            [x for x in r["ranks"] if x // L == 0] or None
        rings.append({"channel": r["channel"], "ranks": list(r["ranks"]), "complete": r["complete"],
                      "node0_gpus": [mapping.get(x % L) for x in chain] if chain else None})
    sec["rings"] = rings
    inter = lnodes > 1
    comp: dict = {"channels": _cmp(log.get("channels"), ref.get("channels") if ref else None)}
    comp["channels"]["ours"] = len(plan.get("channels") or [])
    rows, diffs = _graph_diffs(g, ref, inter)
    comp.update(rows)
    nccl_bw = None
    if g is not None:
        nccl_bw = round(g["n_channels"] * (g["bw_intra"] if lnodes <= 2 else g["bw_inter"]), 4)
    comp["busbw_GBps"] = {"nccl": nccl_bw, "model": ref.get("total_bw") if ref else None,
                          "ours": plan.get("total_bw_GBps")}
    order_nccl = None
    if sec["graph"] and sec["graph"]["channels"]:
        order_nccl = sec["graph"]["channels"][0]["gpus"]
    elif rings and rings[0]["node0_gpus"] and None not in rings[0]["node0_gpus"]:
        order_nccl = rings[0]["node0_gpus"]
    ours0 = (plan.get("channels") or [{}])[0].get("gpus")
    model0 = [int(str(x).replace("GPU", "")) if str(x).replace("GPU", "").isdigit() else x
              for x in ((ref or {}).get("rings") or [{}])[0].get("gpus") or []] or None
    comp["order_channel0"] = {"nccl": order_nccl, "model": model0, "ours": ours0,
                              "same_as_ours": None if not order_nccl or not ours0 else
                              (_same_cycle(order_nccl, ours0) if not inter else order_nccl == ours0)}
    paths, adjusted, notes = _p2p_note(log, doc, mapping, nodes, gpus, g, "ring")
    comp["paths"] = paths
    comp["adjusted_model"] = adjusted
    if order_nccl and ours0 and len(order_nccl) == len(ours0) and not comp["order_channel0"]["same_as_ours"]:
        if set(order_nccl) == set(ours0) and _one_nvswitch(doc):
            notes.append("channel orders differ, which costs nothing here: every GPU hangs off one NVSwitch, "
                         "so any order loads each NVLink the same")
    sec["comparison"] = comp
    # Verdict
    C = log.get("channels")
    if C is not None:
        s = f"NCCL used {C} channels"
        if g is not None:
            s += f" (ring graph {g['n_channels']} x {_fmt(g['bw_intra'])} GB/s, {g['type_intra']}" + \
                 (f"/{g['type_inter']}" if inter else "") + ")"
    elif g is not None:
        s = f"NCCL's ring graph: {g['n_channels']} x {_fmt(g['bw_intra'])} GB/s ({g['type_intra']}" + \
            (f"/{g['type_inter']}" if inter else "") + "), final channel count not in the log"
    else:
        s = "the log shows neither a channel count nor a ring graph (NCCL_DEBUG_SUBSYS=INIT,GRAPH prints both)"
    parts = [s]
    if ref:
        cdiff = [] if comp["channels"]["match"] is not False else [f"channels {C} vs {ref['channels']}"]
        alld = cdiff + diffs
        m = f"our model of NCCL predicted {ref['channels']}"
        if g is not None:
            m += f" ({ref['search_channels']} x {_fmt(ref['bw_intra'])}, {ref['type_intra']}" + \
                 (f"/{_fmt(ref['type_inter'])}" if inter else "") + ")"
        known = comp["channels"]["match"] is not None or g is not None
        if known:
            m += " (match)" if not alld else f" (differs: {', '.join(alld)})"
        else:
            m += " (nothing in the log to check it against)"
        parts.append(m)
    ours_bw = plan.get("total_bw_GBps")
    parts.append(f"our rings give {_fmt(ours_bw)} GB/s" +
                 (f" vs NCCL's {_fmt(nccl_bw)}" if nccl_bw is not None else ""))
    sec["verdict"] = "; ".join(parts)
    sec["notes"] = notes + [n for n in _version_note(log, diffs) if n not in notes]
    sec["warnings"] = warns
    return sec


def _same_cycle(a: list, b: list) -> bool:
    """Same ring up to rotation and direction."""
    if len(a) != len(b) or set(a) != set(b) or not a:
        return False
    i = b.index(a[0])
    rot = b[i:] + b[:i]
    return rot == a or [rot[0]] + rot[1:][::-1] == a


def _one_nvswitch(doc: dict) -> bool:
    """Every GPU's NVLinks go to NVSwitches (HGX/DGX): any ring order loads each link the same."""
    nvs = {s.get("id") for s in doc.get("switches") or [] if isinstance(s, dict) and s.get("kind") == "nvswitch"}
    gpus = [g.get("pci_bus_id") or f"GPU{g.get('index')}" for g in doc.get("gpus") or [] if isinstance(g, dict)]
    if not nvs or not gpus:
        return False
    ends: dict = {}
    for lk in doc.get("links") or []:
        if isinstance(lk, dict) and lk.get("kind") == "nvlink":
            for a, b in ((lk.get("a"), lk.get("b")), (lk.get("b"), lk.get("a"))):
                ends.setdefault(a, set()).add(b)
    return all(ends.get(g) and ends[g] <= nvs for g in gpus)


def compare_trees(log: dict, plan: dict, ref: Optional[dict], doc: dict, nodes: int) -> dict:
    """The ``nccl_log`` section of ``gpucomm trees --compare``: NCCL's tree channels and tree graph
    per the log next to our model of NCCL and our trees (``plan``, gpucomm.trees/v1); every logged
    ``(channel, rank) -> up/down`` entry is checked against our trees and against trees rebuilt
    (:func:`gpucomm.planners.collectives.trees.connect_trees`) from NCCL's own tree-graph chains."""
    from gpucomm.probes.errors import GpucommError

    from gpucomm.planners.collectives.trees import TREE_PATTERNS as TP, connect_trees

    # our rank space: node * gpn + local rank, local rank k = the plan's k-th GPU (index order)
    first = (plan.get("channels") or [{}])[0].get("ranks") or []
    sel = [r["gpu"] for r in sorted(first, key=lambda r: r["rank"]) if r.get("node") == 0]
    gpn = plan.get("gpus_per_node") or len(sel)
    sec, mapping, warns = _base_section(log, nodes, sel, doc)
    L = log.get("local_ranks") or gpn
    lnodes = log.get("nnodes") or nodes
    g = pick_graph(log, TREE_PATTERNS)
    sec["graph"] = _graph_summary(g, L, mapping)
    sec["model"] = _model_summary(ref, "tree")
    pos = {idx: k for k, idx in enumerate(sel)}
    back = {idx: lr for lr, idx in mapping.items()}

    def ours_rank(r: int) -> Optional[int]:
        if r < 0:
            return -1
        idx = mapping.get(r % L)
        if idx is None or idx not in pos:
            return None
        return (r // L) * gpn + pos[idx]

    entries = log.get("trees") or []
    tree_channels = (max(t["channel"] for t in entries) + 1) if entries else None
    ours_ch = {c["channel"]: {r["rank"]: (r["up"], r["down"]) for r in c["ranks"]} for c in plan.get("channels") or []}

    def log_rank(q: int) -> Optional[int]:
        """Our rank -> the log's numbering (inverse of ours_rank)."""
        if q < 0:
            return -1
        lr = back.get(sel[q % gpn]) if q % gpn < len(sel) else None
        return None if lr is None else (q // gpn) * L + lr

    def check(chans: dict) -> dict:
        ok = total = 0
        bad = []
        if not chans:
            return {"checked": 0, "match": 0, "differ": []}
        K = len(chans)
        for t in entries:
            r = ours_rank(t["rank"])
            up = ours_rank(t["up"])
            down = [ours_rank(d) for d in t["down"]]
            ch = chans.get(t["channel"] % K)
            if r is None or up is None or None in down or ch is None or r not in ch:
                continue
            total += 1
            if ch[r] == (up, down):
                ok += 1
            elif len(bad) < 6:
                bad.append({"channel": t["channel"], "rank": t["rank"], "nccl": {"up": t["up"], "down": t["down"]},
                            "ours": {"up": log_rank(ch[r][0]), "down": [log_rank(x) for x in ch[r][1]]}})
        return {"checked": total, "match": ok, "differ": bad}

    comp: dict = {"channels": _cmp(tree_channels if tree_channels is not None else log.get("channels"),
                                   ref.get("channels") if ref else None)}
    comp["channels"]["ours"] = len(plan.get("channels") or [])
    rows, diffs = _graph_diffs(g, (ref or {}).get("tree"), lnodes > 1)
    comp.update(rows)
    same_layout = log.get("nnodes") in (None, nodes) and L == gpn
    comp["links_vs_ours"] = check(ours_ch) if same_layout else {"checked": 0, "match": 0, "differ": [],
                                                                 "skipped": "layout differs"}
    rebuilt = None
    # (bounded: a damaged comm line must not make us build millions of ranks)
    if g is not None and g["pattern_name"] in TP and L == gpn and 1 <= lnodes and lnodes * gpn <= 1 << 16:
        chains = []
        for c in g["channels"]:
            loc = [ours_rank(r % L) for r in c["ranks"]]
            if None in loc or sorted(loc) != list(range(gpn)):
                chains = []
                break
            chains.append(loc)
        if chains:
            try:
                rb = connect_trees(lnodes, chains, g["pattern_name"])
                rebuilt = check({c["channel"]: {r: (c["up"][r], list(c["down"][r])) for r in c["up"]} for c in rb})
            except GpucommError:
                rebuilt = None
    comp["links_vs_nccl_chains"] = rebuilt
    paths, adjusted, notes = _p2p_note(log, doc, mapping, nodes, sel, g, "tree")
    comp["paths"] = paths
    comp["adjusted_model"] = adjusted
    sec["trees"] = [dict(t) for t in entries[:512]]
    sec["comparison"] = comp
    C = comp["channels"]["nccl"]
    s = f"NCCL used {C} tree channels" if C is not None else "the log shows no tree channels"
    if g is not None:
        s += f" (tree graph {g['pattern_name']} {g['n_channels']} x {_fmt(g['bw_intra'])}/" \
             f"{_fmt(g['bw_inter'])} GB/s, " \
             f"{g['type_intra']}/{g['type_inter']})"
    parts = [s]
    if ref:
        cd = [] if comp["channels"]["match"] is not False else [f"channels {C} vs {ref['channels']}"]
        tr = ref.get("tree") or {}
        m = f"our model of NCCL predicted {ref['channels']}"
        if g is not None and tr:
            m += f" ({tr.get('search_channels')} x {_fmt(tr.get('bw_intra'))}/{_fmt(tr.get('bw_inter'))})"
        known = comp["channels"]["match"] is not None or g is not None
        m += (" (match)" if not cd + diffs else f" (differs: {', '.join(cd + diffs)})") if known else ""
        parts.append(m)
    lv = comp["links_vs_ours"]
    if lv["checked"]:
        parts.append(f"our trees: {lv['match']} of {lv['checked']} logged tree links agree")
    if rebuilt and rebuilt["checked"]:
        parts.append(f"rebuilt from NCCL's own chains: {rebuilt['match']} of {rebuilt['checked']}")
    sec["verdict"] = "; ".join(parts)
    sec["notes"] = notes + [n for n in _version_note(log, diffs) if n not in notes]
    sec["warnings"] = warns
    return sec
