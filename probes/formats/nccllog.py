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

:func:`load_nccl_log` reads a file (bounded, with one-line errors) and parses it;
:mod:`gpucomm.planners.collectives.logcompare` puts a parsed log next to our rings/trees and our model
of NCCL.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import GraphPattern, PathType

SCHEMA = "gpucomm.nccllog/v1"

# graph.h NCCL_TOPO_PATTERN_*.
PATTERNS = {int(p): p.name.lower() for p in GraphPattern}
TREE_PATTERNS = (int(GraphPattern.BALANCED_TREE), int(GraphPattern.SPLIT_TREE), int(GraphPattern.TREE))
PATH_TYPES = tuple(t.name for t in PathType)
MAX_WARNINGS = 50
MAX_NCCL_WARNINGS = 20

# Numbers are bounded (ranks/channels: 9 digits, so int() never meets a 5000-digit string).
_I = r"\d{1,9}"
_N = r"-?\d{1,9}"
_F = r"\d{1,12}(?:\.\d*)?"
# ``host:pid:tid [dev] NCCL LEVEL `` anywhere in a line (debug.cc ncclDebugLog).  A host never holds
# ``:`` or brackets, so labels glued to it (``[1,0]<stdout>:host``) stay out.
# NCCL formats each debug message into a 1024-byte buffer (debug.cc ncclDebugLog): a longer line,
# such as "Trees" over 48+ channels, ends cut at 1023 characters.
NCCL_LINE_MAX = 1023
# The host starts where its run of host characters starts (the look-behind): a search then crosses a
# long run once, not once per character of it (linear in the line).
_PREFIX = re.compile(r"(?<![^\s:\[\]])(?P<host>[^\s:\[\]]+):(?P<pid>" + _I + r"):(?P<tid>" + _I + r") \[(?P<dev>" + _N +
                     r")\] NCCL (?P<level>INFO|WARN|TRACE|ABORT)\b ?")
_VERSION = re.compile(r"\bNCCL version (?P<v>" + _I + r"\." + _I + r"\." + _I + r"[\w.+-]*)")
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
_USING_NET = re.compile(r"^Using network (?P<net>.+?)\s*$")
# NET/Plugin: Loaded net plugin AWS Libfabric (v6) / NET/OFI Using aws-ofi-nccl 1.6.0 / Plugin name set by env ...
_PLUGIN_LOADED = re.compile(r"^NET/Plugin ?: ?Loaded (?:net|coll) plugin (?P<name>.+?)(?: \((?P<api>v\d+)\))?\s*$")
_PLUGIN_NONE = re.compile(r"^NET/Plugin ?: ?(?:Could not find|No plugin found|Plugin load returned|Failed to find ncclNetPlugin)")
_PLUGIN_BANNER = re.compile(r"^NET/(?P<net>[\w-]+) (?:Using |Initializing |ver\. ?)(?P<family>aws-ofi-nccl )?"
                            r"(?P<v>\d+\.\d+\.\d+[\w.-]*)\s*$")
_ENV = re.compile(r"^(?P<k>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<v>.*?)\.?\s*$")
_COLL_CH = re.compile(r"(?P<n>" + _I + r") (?P<what>coll|collnet|nvls|p2p) channels(?P<pp> per peer)?")
_NVLS_MC = re.compile(r"NVLS multicast support is (?P<not>not )?available")
_NVLS_HEAD = re.compile(r"^NVLS Head\s+(?P<h>" + _I + r"):(?P<ranks>(?:\s+" + _N + r")+)\s*$")
# init.cc fillInfo / mnnvl.cc ncclMnnvlCheck / init.cc initTransportsRank (2.19+)
_MNNVL_GPU = re.compile(r"^MNNVL busId (?P<bus>(?:0x)?[0-9a-fA-F]{1,16}) fabric UUID (?P<uuid>[0-9a-fA-F]{1,16}\.[0-9a-fA-F]{1,16}|\S{1,64})"
                        r" cliqueId (?P<clique>(?:0x)?[0-9a-fA-F]{1,8}) state (?P<state>\d{1,3})"
                        r"(?: healthMask (?P<health>(?:0x)?[0-9a-fA-F]{1,8}))?")
_MNNVL_COMM = re.compile(r"^MNNVL (?P<on>\d) cliqueId (?P<clique>[0-9a-fA-F]{1,8}) cliqueSize (?P<size>" + _I +
                         r") cliqueRank (?P<rank>" + _I + r")(?: nvlDomainSize (?P<dom>" + _I + r"))?")
_CROSS_CLIQUE = re.compile(r"^Cross-clique P2P enabled: nvlDomainSize=(?P<dom>" + _I + r") cliqueSize=(?P<size>" + _I + r")")
_COMM_MNNVL = re.compile(r"\bMNNVL (?P<on>\d)\s*$")


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
        self.plugin: dict = {}         # loaded (NET name), family and version (banner), none (no plugin)
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
        self.line_cut = False      # the line being read reached NCCL's message limit (NCCL_LINE_MAX)
        self.mnnvl_gpus: dict = {}     # (host, bus id) -> {cuda_dev, cluster_uuid, clique_id, state, health_mask}
        self.mnnvl_comms: dict = {}    # (clique id, size, nvlDomainSize) -> ranks that printed it
        self.comm_mnnvl: set = set()   # the MNNVL flag of the comm lines (0/1)
        self.cross_clique: Optional[tuple] = None
        self.mnnvl_env: dict = {}      # NCCL_MNNVL_* -> every value the log shows (several runs)

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


_ROW_TAIL = re.compile(r"^[-+]?[\d.]{1,24}$")


def _unglued(host: str, pid: str, seen: dict) -> str:
    """The host of an NCCL line a process wrote into the middle of a table row (nccl-tests'
    ``... sum      -1gcn151:1904979:1905073 [0] NCCL INFO ...``): the row's last figure sticks to the
    host name.  Such a host starts like a number and ends with a host this pid already printed; the
    number goes back to the row.  ``seen``: pid -> the hosts it printed so far (updated)."""
    if host[:1] in "-+.0123456789":
        for h in seen.get(pid, ()):
            if h != host and host.endswith(h) and _ROW_TAIL.match(host[:-len(h)]):
                return h
    seen.setdefault(pid, set()).add(host)
    return host


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
    seen: dict = {}
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
        st.line_cut = len(raw) >= NCCL_LINE_MAX
        for m, msg in _split_messages(raw):
            if m is None:
                continue
            st.nccl_lines += 1
            key = (_unglued(m.group("host"), m.group("pid"), seen), m.group("pid"), m.group("tid"))
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
    if st.pending.get(key) is not None and _graph_channel(st, key, msg):
        return
    if not body:
        return
    head = body.split(None, 1)[0]
    if head == "NCCL" and body.startswith("NCCL version"):
        return
    for handler in _HANDLERS:
        if handler(st, key, dev, body, head, lineno):
            return


def _graph_channel(st: _State, key: tuple, msg: str) -> bool:
    """Channel line `` 0 : NET/0 GPU/0 ...`` of the thread's pending graph print (search.cc); False if it ended."""
    g, ln = st.pending[key]
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
        return True
    st.warn(ln, f"graph print stops after {len(g['channels'])} of its {g['n_channels']} channels "
                f"(Pattern {g['pattern']})")
    del st.pending[key]
    _add_graph(st, g, key)
    return False


# Message handlers, tried in order by _message: each returns True when the message is its family's
# (read, or warned about), False to let the next one try.
def _on_comm(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``comm 0x.. rank R nRanks N nNodes M localRanks L localRank l`` (init.cc 2.19+) or ``... nranks N cudaDev D``."""
    if "comm 0x" not in body:
        return False
    cm = _COMM_NEW.search(body)
    if cm:
        rank, n, nodes, lr, l_ = (int(cm.group(k)) for k in ("rank", "n", "nodes", "lr", "l"))
        if rank >= n or l_ >= lr or nodes > n or lr > n or nodes < 1:
            st.warn(lineno, f"comm line with impossible values (rank {rank} of {n}, "
                            f"localRank {l_} of {lr}, {nodes} nodes)")
            return True
        st.comms.append((n, nodes, lr))
        st.bind(key, rank, dev)
        st.rank_info(rank)["local_rank"] = l_
        fm = _COMM_MNNVL.search(body)
        if fm:
            st.comm_mnnvl.add(int(fm.group("on")))
        return True
    cm = _COMM_OLD.search(body)
    if cm:
        rank, n = int(cm.group("rank")), int(cm.group("n"))
        if rank >= n:
            st.warn(lineno, f"comm line with rank {rank} of {n} ranks")
            return True
        st.comms.append((n, None, None))
        st.bind(key, rank, int(cm.group("dev")))
        info = st.rank_info(rank)
        info["cuda_dev"] = int(cm.group("dev"))
        if cm.group("bus"):
            info["bus_id"] = info["bus_id"] or nccl_bus_id(cm.group("bus"))
        return True
    return False


def _on_channel(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``Channel``/``Ring`` lines: transports (``... via ...``), ring prints and ring neighbour lines (rings.cc)."""
    if head != "Channel" and head != "Ring":
        return False
    if " via " in body:
        _transport(st, key, dev, body, lineno)
        return True
    rm = _RING_PRINT.match(body)
    if rm:
        _ring_print(st, key, body, rm, lineno)
        return True
    nm = _RING_NEIGH.match(body)
    if nm:
        c, prev, me, nxt = (int(nm.group(k)) for k in ("c", "prev", "me", "next"))
        old = st.neigh.setdefault(c, {}).get(me)
        if old is not None and old != (prev, nxt):
            st.warn(lineno, f"ring {c}: rank {me} listed twice with different neighbours (several communicators?)")
            return True
        st.neigh[c][me] = (prev, nxt)
        st.bind(key, me, dev)
        return True
    if re.match(r"^(Channel|Ring) \d+", body) and ":" in body:
        st.warn(lineno, f"unreadable ring line {_short(body)!r}")
    return True


def _transport(st: _State, key: tuple, dev: int, body: str, lineno: int) -> None:
    """``Channel 00/0 : 0[0] -> 1[1] [send] via P2P/IPC/read``, 2.4's ``Ring 00 : a -> b via ...`` (p2p/shm/net.cc)."""
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


def _ring_print(st: _State, key: tuple, body: str, rm: re.Match, lineno: int) -> None:
    """``Channel 00/24 :    0   1   2 ...`` (rings.cc; rank 0 prints every ring, NN = the final channel count)."""
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


def _on_trees(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``Trees [c] d0/d1/d2->rank->up ...`` (2.7+) and ``Trees [c] up->rank->d0/d1/d2`` (2.4-2.6)."""
    if head != "Trees":
        return False
    items = list(_TREES_ITEM.finditer(body))
    if not items:
        st.warn(lineno, f"unreadable tree line {_short(body)!r}")
        return True
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
        if it is items[-1] and st.line_cut:
            st.warn(lineno, f"Trees line cut at NCCL's {NCCL_LINE_MAX + 1}-byte message limit: its channels "
                            f"from {it.group('c')} on are not in that line")
            continue
        st.warn(lineno, f"unreadable tree entry {_short(it.group(0))!r}")
    return True


def _on_tree(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``Tree c : up -> rank -> d0/d1/d2`` (the Panlichen fork)."""
    if head != "Tree":
        return False
    tm = _TREE_OLD.match(body)
    if tm:
        _tree(st, key, dev, lineno, int(tm.group("c")), int(tm.group("rank")), int(tm.group("up")),
              [int(tm.group(x)) for x in ("d0", "d1", "d2")])
    elif re.match(r"^Tree \d+ :", body):
        st.warn(lineno, f"unreadable tree line {_short(body)!r}")
    return True


def _on_pattern(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """Graph header ``Pattern 4, crossNic 0, nChannels 1, bw 4.0/4.0, ...`` (search.cc ncclTopoPrintGraph)."""
    if head != "Pattern":
        return False
    pm = _PATTERN.match(body)
    if not pm:
        st.warn(lineno, f"unreadable graph header {_short(body)!r}")
        return True
    bi, be = _num(pm.group("bi")), _num(pm.group("be"))
    ti, te = pm.group("ti"), pm.group("te")
    if bi is None or be is None or ti not in PATH_TYPES or te not in PATH_TYPES:
        st.warn(lineno, f"graph header with unknown values {_short(body)!r}")
        return True
    p = int(pm.group("p"))
    g = {"pattern": p, "pattern_name": PATTERNS.get(p, f"pattern{p}"), "cross_nic": int(pm.group("cn")),
         "n_channels": int(pm.group("n")), "bw_intra": bi, "bw_inter": be, "type_intra": ti,
         "type_inter": te, "same_channels": int(pm.group("same")), "channels": [], "line": lineno}
    if g["n_channels"] == 0:
        _add_graph(st, g, key)
    else:
        st.pending[key] = (g, lineno)
    return True


def _on_system(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``=== System : maxBw 7.0 totalBw 24.0 ===`` (topo.cc ncclTopoPrint)."""
    sm = _SYSTEM.search(body)
    if sm:
        st.system = {"max_bw": _num(sm.group("max")), "total_bw": _num(sm.group("tot"))}
        return True
    return False


def _on_topo_link(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """Topology dump links ``+ PCI[24.0] - GPU/F000 (8)``, ``+ NET[7.0] - NET/0`` (topo.cc ncclTopoPrint)."""
    if not body.startswith("+ "):
        return False
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
    return True


def _on_path(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """Path lines ``GPU/F000 :GPU/10000 (4/24.000000/PHB) ...`` (paths.cc printNodePaths: hops/bw/type)."""
    if not ("(" in body and " :" in body):
        return False
    pl = _PATH_LINE.match(body)
    if not pl:
        return False
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
    return True


def _on_net_using(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]; OOB ...``: the NICs of the longest such list."""
    if not (head.startswith("NET/") and " : Using " in body):
        return False
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
    return True


def _on_using_network(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``Using network IB`` / ``Using network AWS Libfabric``."""
    if head != "Using":
        return False
    um = _USING_NET.match(body)
    if um:
        st.network = um.group("net")
    return True


def _on_plugin(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``NET/Plugin: Loaded net plugin AWS Libfabric (v6)``, ``NET/Plugin : Could not find: libnccl-net.so``,
    ``NET/OFI Using aws-ofi-nccl 1.6.0`` (plugin/net.cc, aws-ofi-nccl's banner)."""
    if not head.startswith("NET/"):
        return False
    pm = _PLUGIN_LOADED.match(body)
    if pm:
        if "coll plugin" not in body:
            st.plugin["loaded"] = pm.group("name")
        return True
    if _PLUGIN_NONE.match(body):
        st.plugin.setdefault("none", True)
        return True
    bm = _PLUGIN_BANNER.match(body)
    if bm:
        fam = (bm.group("family") or "").strip() or {"GPUDirectTCPX": "gpudirect-tcpx"}.get(bm.group("net"), bm.group("net"))
        st.plugin.setdefault("family", fam)
        st.plugin.setdefault("version", bm.group("v"))
        return True
    return False


def _on_env(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``NCCL_X set by environment to Y`` (the first value of each variable is kept)."""
    if not head.startswith("NCCL_"):
        return False
    em = _ENV.match(body)
    if em:
        st.env.setdefault(em.group("k"), em.group("v"))
        if em.group("k").startswith("NCCL_MNNVL_"):
            seen = st.mnnvl_env.setdefault(em.group("k"), [])
            if em.group("v") not in seen and len(seen) < 8:
                seen.append(em.group("v"))
    return True


def _on_coll_channels(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``24 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, ...`` (init.cc)."""
    if "coll channels" not in body:
        return False
    found = {}
    for cm in _COLL_CH.finditer(body):
        found[cm.group("what") + ("_per_peer" if cm.group("pp") else "")] = int(cm.group("n"))
    if "coll" in found:
        st.coll = found
    return True


def _on_nvls(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``NVLS multicast support is (not) available`` and ``NVLS Head  0:  0  8``."""
    if not body.startswith("NVLS"):
        return False
    mm = _NVLS_MC.search(body)
    if mm:
        st.nvls_mc = (mm.group("not") is None) or bool(st.nvls_mc)
        return True
    hm = _NVLS_HEAD.match(body)
    if hm:
        st.nvls_heads[int(hm.group("h"))] = [int(x) for x in hm.group("ranks").split()]
        return True
    return False


def _on_connected(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``Connected all rings``, ``Connected all trees``, ``Connected NVLS``."""
    if body.startswith("Connected all rings"):
        st.connected["rings"] = True
    elif body.startswith("Connected all trees"):
        st.connected["trees"] = True
    elif body.startswith("Connected NVLS"):
        st.connected["nvls"] = True
    else:
        return False
    return True


def _on_mnnvl(st: _State, key: tuple, dev: int, body: str, head: str, lineno: int) -> bool:
    """``MNNVL busId 0x.. fabric UUID u0.u1 cliqueId 0x.. state 3 healthMask 0x..`` (init.cc, one per rank),
    ``MNNVL 1 cliqueId .. cliqueSize .. cliqueRank .. nvlDomainSize ..`` (mnnvl.cc) and ``Cross-clique P2P
    enabled: nvlDomainSize=.. cliqueSize=..`` (init.cc)."""
    if head == "Cross-clique":
        cm = _CROSS_CLIQUE.match(body)
        if cm:
            st.cross_clique = (int(cm.group("dom")), int(cm.group("size")))
        return True
    if head != "MNNVL":
        return False
    gm = _MNNVL_GPU.match(body)
    if gm:
        bus = nccl_bus_id(gm.group("bus"))
        if bus is None:
            st.warn(lineno, f"MNNVL line with bus id {gm.group('bus')!r}")
            return True
        state = int(gm.group("state"))
        st.mnnvl_gpus.setdefault((key[0], bus), {
            "cuda_dev": dev if dev >= 0 else None, "cluster_uuid_nccl": gm.group("uuid"),
            "clique_id": int(gm.group("clique"), 16), "state": state,
            "health_mask": int(gm.group("health"), 16) if gm.group("health") else None})
        return True
    cm = _MNNVL_COMM.match(body)
    if cm:
        k = (int(cm.group("clique"), 16), int(cm.group("size")),
             int(cm.group("dom")) if cm.group("dom") else None, int(cm.group("on")))
        st.mnnvl_comms.setdefault(k, set()).add(int(cm.group("rank")))
        return True
    if body.startswith("MNNVL ") and ("cliqueId" in body or "busId" in body):
        st.warn(lineno, f"unreadable MNNVL line {_short(body)!r}")
    return True


_HANDLERS = (_on_comm, _on_channel, _on_trees, _on_tree, _on_pattern, _on_system, _on_topo_link, _on_path,
             _on_net_using, _on_using_network, _on_plugin, _on_env, _on_coll_channels, _on_nvls, _on_connected,
             _on_mnnvl)


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
    comms, nranks, nnodes, local, layout_from = _comm_layout(st)
    _merge_rank_sources(st)
    if nranks is None:
        nranks = _ranks_seen(st)
        if nranks is not None:
            layout_from = "highest rank seen"
    if local is None:
        local, layout_from = _infer_local_ranks(st, layout_from)
    if nnodes is None and nranks and local:
        nnodes = -(-nranks // local)
    if local:
        for r, info in st.ranks.items():
            if info["local_rank"] is None and (nnodes or 1) >= 1:
                info["local_rank"] = r % local
    rings, ring_n = _final_rings(st, nranks)
    trees = [{"channel": c, "rank": r, "up": up, "down": list(down)}
             for (c, r), (up, down) in sorted(st.trees.items())]
    channels, channels_from = _channel_count(st, ring_n, trees)
    graphs = []
    for g in st.graphs:
        g = {k: v for k, v in g.items() if k != "_sig"}
        graphs.append(g)
    transports, kinds = _transport_list(st)
    _closing_warnings(st, rings, trees, graphs, channels)
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
        **_network_fields(st),
    }


def _comm_layout(st: _State) -> tuple[list, Optional[int], Optional[int], Optional[int], Optional[str]]:
    """(distinct comm lines, nranks, nnodes, local ranks, source) of the communicator with the most ranks."""
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
    return comms, nranks, nnodes, local, layout_from


def _merge_rank_sources(st: _State) -> None:
    """Fill rank host/device/bus id from the nccl-tests header, the topology dump and the transport brackets."""
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


def _ranks_seen(st: _State) -> Optional[int]:
    """1 + the highest rank any comm, tree or ring line names; None when there is none."""
    seen = set(st.ranks) | {r for (_, r) in st.trees} | \
        {x for (up, down) in st.trees.values() for x in [up] + down if x >= 0}
    for rs in st.ring_sets:
        for order in rs["rings"].values():
            seen |= set(order)
    for nb in st.neigh.values():
        seen |= {x for me, (p, n) in nb.items() for x in (me, p, n) if x >= 0}
    if seen:
        return max(seen) + 1
    return None


def _infer_local_ranks(st: _State, layout_from: Optional[str]) -> tuple[Optional[int], Optional[str]]:
    """Ranks per node from the graph prints (all the same size) or the nccl-tests header; (local, layout_from)."""
    local = None
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
    return local, layout_from


def _final_rings(st: _State, nranks: Optional[int]) -> tuple[list, Optional[int]]:
    """(rings, NN): the first ring print of the reported communicator, else rings from the Ring neighbour lines."""
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
    return rings, ring_n


def _channel_count(st: _State, ring_n: Optional[int], trees: list) -> tuple[Optional[int], Optional[str]]:
    """Final channel count: the ring print's NN, then "N coll channels", then what the lines show."""
    channels, channels_from = None, None
    if ring_n is not None:
        channels, channels_from = ring_n, "Channel NN/CC lines"
    elif st.coll is not None:
        channels, channels_from = st.coll["coll"], "coll channels line"
    elif trees:
        channels, channels_from = max(t["channel"] for t in trees) + 1, "tree lines"
    elif st.neigh:
        channels, channels_from = max(st.neigh) + 1, "Ring lines"
    return channels, channels_from


def _transport_list(st: _State) -> tuple[list, dict]:
    """(one entry per connection and transport with its channels, channel count per transport kind)."""
    transports = []
    kinds: dict = {}
    for (a, b, via, d), chans in sorted(st.transports.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                                                 kv[0][3] or "")):
        t = {"from": a, "to": b, "via": via, "direction": d, "channels": sorted(chans)}
        t.update(_transport_kind(via))
        transports.append(t)
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + len(chans)
    return transports, kinds


def _closing_warnings(st: _State, rings: list, trees: list, graphs: list, channels: Optional[int]) -> None:
    """Warn about hosts on different NCCL versions, unreadable lines past the cap, and a log without rings/trees."""
    if len(set(st.host_versions.values())) > 1:
        st.warn(None, "hosts run different NCCL versions: " +
                ", ".join(f"{h} {v}" for h, v in sorted(st.host_versions.items())))
    if st.more_warnings:
        st.warnings.append(f"{st.path}: ... and {st.more_warnings} more unreadable lines")
    if not (rings or trees or graphs or channels or st.coll or st.transports):
        st.warnings.append(f"{st.path}: no ring, tree or graph lines in the log (run with NCCL_DEBUG=INFO "
                           f"NCCL_DEBUG_SUBSYS=INIT,GRAPH to get them)")


def _network_fields(st: _State) -> dict:
    """The result's network, NVLS, topology-dump, path and warning fields, in their order."""
    heads = [st.nvls_heads[h] for h in sorted(st.nvls_heads)]
    paths = [{"host": h, "from": s, "to": d, "hops": v[0], "bw": v[1], "type": v[2]}
             for (h, s, d), v in sorted(st.paths.items())]
    return {
        "network": st.network,
        "net": net_summary(st.network, st.plugin, _transport_list(st)[0], st.versions[0] if st.versions else None),
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
        "mnnvl": _mnnvl_fields(st),
        "nccl_warnings": list(st.nccl_warnings),
        "warnings": list(st.warnings),
    }


def _mnnvl_fields(st: _State) -> Optional[dict]:
    """The log's multi-node NVLink: each GPU's fabric (``gpus``), the clique NCCL formed (``enabled``,
    ``clique_id``, ``clique_size``, ``nvl_domain_size``; the largest when several communicators
    printed one), ``cross_clique`` and the connections made over ``P2P/MNNVL``; None when the log
    says nothing about MNNVL."""
    from gpucomm.probes.facts import FABRIC_STATES, cluster_uuid_from_nccl

    gpus = []
    for (host, bus), g in sorted(st.mnnvl_gpus.items()):
        state = g["state"]
        gpus.append({"host": host, "bus_id": bus, "cuda_dev": g["cuda_dev"],
                     "cluster_uuid": cluster_uuid_from_nccl(g["cluster_uuid_nccl"]),
                     "cluster_uuid_nccl": g["cluster_uuid_nccl"], "clique_id": g["clique_id"],
                     "state": FABRIC_STATES[state] if state < len(FABRIC_STATES) else str(state),
                     "health_mask": g["health_mask"]})
    via = {}
    for (_a, _b, v, _d), chans in st.transports.items():
        if v.startswith("P2P/MNNVL") or v.startswith("P2P/CUMEM"):
            name = v.split()[0]
            via[name] = via.get(name, 0) + len(chans)
    if not (gpus or st.mnnvl_comms or st.comm_mnnvl or st.cross_clique or via or st.mnnvl_env):
        return None
    out: dict = {"gpus": gpus, "enabled": (1 in st.comm_mnnvl or any(k[3] for k in st.mnnvl_comms))
                 if (st.comm_mnnvl or st.mnnvl_comms) else None,
                 "clique_id": None, "clique_size": None, "nvl_domain_size": None,
                 "cross_clique": st.cross_clique is not None, "connections": dict(sorted(via.items())),
                 "settings": dict(sorted(st.mnnvl_env.items()))}
    if st.mnnvl_comms:
        clique, size, dom, _on = max(st.mnnvl_comms, key=lambda k: (k[1], k[2] or 0))
        out.update(clique_id=clique, clique_size=size, nvl_domain_size=dom)
        if len({k[:3] for k in st.mnnvl_comms}) > 1:
            out["communicators"] = [{"clique_id": k[0], "clique_size": k[1], "nvl_domain_size": k[2]}
                                    for k in sorted(st.mnnvl_comms)]
    if st.cross_clique is not None and out["nvl_domain_size"] is None:
        out["nvl_domain_size"] = st.cross_clique[0]
    return out


def net_summary(network: Optional[str], plugin: dict, transports: list, version: Optional[str]) -> Optional[dict]:
    """The inter-node transport a log shows: ``{name, gdr, plugin_family, plugin_version, version}``
    -- ``name`` from the channel lines ``via NET/<name>/...`` (what ran), else ``Using network <name>``
    (what was chosen), else the plugin NCCL loaded; ``gdr`` True when a NET channel says ``GDRDMA``,
    False when NET channels say none, None without NET channels.  None when the log shows no network."""
    nets = [t for t in transports if t.get("kind") == "NET"]
    name = None
    if nets:
        names = [t.get("plugin") for t in nets if t.get("plugin")]
        name = max(set(names), key=names.count) if names else None
    name = name or network or plugin.get("loaded")
    if not name:
        return None
    return {"name": name, "gdr": any(t.get("gdr") for t in nets) if nets else None,
            "plugin_family": plugin.get("family"), "plugin_version": plugin.get("version"),
            "plugin_loaded": plugin.get("loaded"), "version": version}


def load_nccl_log(path: str) -> dict:
    """Read and parse an NCCL debug log file (``--compare LOG``); InputError naming the file on any
    problem."""
    from pathlib import Path

    from gpucomm.probes.parse import read_text_input

    expected = "an NCCL_DEBUG=INFO log file"
    if Path(path).is_dir():
        raise InputError("is a directory", path, expected=expected)
    try:
        text = read_text_input(path)
    except InputError as e:
        if "file is empty" in str(e):
            raise InputError("file is empty", path, expected=expected) from None
        raise
    return parse_nccl_log(text, path)


def log_document(parsed: dict, path: Optional[str] = None) -> dict:
    """A parsed NCCL log as a topology document (``gpucomm show LOG``, ``gpucomm doctor LOG``): one GPU
    per rank (index = rank, ``local_index`` = its CUDA device, ``host`` = its host in order of their
    lowest rank; the bus id and name where the log gives them) or, in a log without rank lines, one per
    ``MNNVL busId`` line; each GPU's fabric from its ``MNNVL busId`` line; ``hosts`` when there are
    several; ``nccl``: the version, the ``NCCL_*`` settings and the MNNVL clique NCCL formed.  No PCI
    tree, NICs or NVLink links: a log does not describe them."""
    from gpucomm.probes import facts
    from gpucomm.probes.limits import MAX_HOST_GPUS
    from gpucomm.probes.model import fabric_record, finalize, gpu_record, new_document, source_record, warn

    doc = new_document(provenance="nccl-log")
    mn = parsed.get("mnnvl") or {}
    ranks = [r for r in parsed.get("ranks") or [] if r.get("host")]
    order: list = []
    for r in sorted(ranks, key=lambda r: r["rank"]):
        if r["host"] not in order:
            order.append(r["host"])
    for g in mn.get("gpus") or []:
        if g["host"] not in order:
            order.append(g["host"])
    for h in parsed.get("hosts") or []:
        if h not in order and not ranks:
            order.append(h)
    host_id = {h: i for i, h in enumerate(order)}
    fabric = {(g["host"], g["bus_id"]): g for g in mn.get("gpus") or []}
    fabric_dev = {(g["host"], g["cuda_dev"]): g for g in mn.get("gpus") or [] if g["cuda_dev"] is not None}
    used: set = set()
    entries: list = []   # (index, host, local, bus, name, fabric line)
    for r in sorted(ranks, key=lambda r: r["rank"]):
        f = fabric.get((r["host"], r.get("bus_id"))) or fabric_dev.get((r["host"], r.get("cuda_dev")))
        if f is not None:
            used.add((f["host"], f["bus_id"]))
        entries.append((r["rank"], r["host"], r.get("cuda_dev"), r.get("bus_id") or (f or {}).get("bus_id"),
                        r.get("gpu_name"), f))
    nxt = max((e[0] for e in entries), default=-1) + 1
    for (host, bus), f in sorted(fabric.items(), key=lambda kv: (host_id[kv[0][0]], kv[0][1])):
        if (host, bus) not in used:
            entries.append((nxt, host, f["cuda_dev"], bus, None, f))
            nxt += 1
    if len(entries) > MAX_HOST_GPUS * max(1, len(order)):
        raise InputError(f"{len(entries)} GPUs in the log, more than the limit", path,
                         expected=f"at most {MAX_HOST_GPUS} GPUs per host")
    seen_bus: set = set()
    for idx, host, local, bus, name, f in entries:
        h = host_id.get(host, 0)
        if bus is not None and (h, bus) in seen_bus:
            warn(doc, f"{path or 'NCCL log'}: rank {idx} uses GPU {bus} of {host} like another rank; its bus id is left out")
            bus = None
        if bus is not None:
            seen_bus.add((h, bus))
        rec = gpu_record(idx, pci_bus_id=bus, name=name)
        arch, sm = facts.arch_from_name(name)
        if arch:
            rec["arch"] = arch
        if len(order) > 1:
            rec["host"] = h
        if local is not None:
            rec["local_index"] = local
        if f is not None:
            fab = fabric_record(f)
            if fab:
                rec["fabric"] = fab
        doc["gpus"].append(rec)
    if len(order) > 1:
        doc["hosts"] = [{"id": i, "hostname": h, "host_hash": None} for i, h in enumerate(order)]
    elif order:
        doc["host"]["hostname"] = order[0]
    summary = {k: v for k, v in mn.items() if k != "gpus"} or None
    doc["nccl"] = {"version": parsed.get("version"), "env": dict(parsed.get("env") or {}), "mnnvl": summary}
    for w in parsed.get("warnings") or []:
        warn(doc, w)
    warn(doc, "NCCL log: the ranks' GPUs, hosts and NVLink fabric only (no PCI tree, NICs or NVLink links)")
    what = f"NCCL {parsed.get('version') or '(version not printed)'} log: {len(doc['gpus'])} GPU(s) on {len(order)} host(s)"
    if summary and summary.get("clique_size"):
        what += f"; MNNVL clique of {summary['clique_size']}"
    doc["sources"].append(source_record("nccl-log", "ok" if doc["gpus"] else "partial", what))
    return finalize(doc)


_MARKER = re.compile(r"\] NCCL (?:INFO|WARN|TRACE|ABORT)\b")


def looks_like(text: str) -> bool:
    """True when ``text`` holds NCCL debug lines (``host:pid:tid [dev] NCCL INFO``).  Linear: the
    literal ``] NCCL INFO`` is found first and the prefix checked in a short window before it (the
    prefix pattern alone, searched over a long line without ``:``, would try every start)."""
    if not isinstance(text, str):
        return False
    head = text[:65536]
    for i, m in enumerate(_MARKER.finditer(head)):
        if i >= 20:
            break
        if _PREFIX.search(head[max(0, m.start() - 200):m.end() + 1]):
            return True
    return False


__all__ = ["parse_nccl_log", "load_nccl_log", "log_document", "looks_like", "nccl_bus_id", "SCHEMA"]
