"""InfiniBand fabric captures (infiniband-diags), text in, one plain record out -- and the one
writer, ``ibnetdiscover`` text for synthetic fabrics.

Read, line by line, in any mix (users paste several commands into one file, prompts included):

* ``ibnetdiscover``: node records (``Switch 36 "S-<guid>"  # "desc" ... lid 48``, ``Ca 1 "H-<guid>"
  # "node01 HCA-1"``, ``Rt``) and their port lines (``[1]  "H-<guid>"[1](<portguid>)  # "desc" lid
  67 4xEDR``; a CA's ``[1](<portguid>)  "S-<guid>"[36]  # lid 83 lmc 0 "desc" lid 48 4xEDR``;
  ``[ext N]`` port suffixes), blank lines between records or not (a record starts at its node
  line);
* ``ibnetdiscover -p`` (ports): ``CA 134 1 0x<guid> 4x EDR - SW 1719 10 0x<guid> ( 'desc' - 'desc' )``
  and unconnected ports (``SW 2052 37 0x<guid> 4x ??? 'desc'``);
* ``iblinkinfo``: ``Switch: 0x<guid> desc:`` / ``CA: desc:`` sections and their port lines
  (``LID PORT[ ] ==( 4X 25.78125 Gbps Active/ LinkUp)==> LID PORT[ ] "desc" ( Could be 53.125 Gbps)``;
  a CA's lines start with its port GUID), ports ``Down/ Polling`` skipped;
* ``ibswitches`` / ``ibhosts`` / ``ibrouters``: ``Switch : 0x<guid> ports 41 "desc" base port 0 lid 10
  lmc 0`` (nodes, no links).

The record (JSON-serialisable)::

    {"formats": ["ibnetdiscover"], "nodes": [{"id", "type": "switch"|"ca"|"router"|None, "guid",
     "description", "lid", "ports", "line"}], "links": [{"a", "a_port", "b", "b_port", "width",
     "speed", "rate_gbps", "could_be": {"width", "speed", "rate_gbps"}|None, "line"}],
     "down_ports": N, "warnings": [...]}

Node ids are ``S-``/``H-``/``R-`` + the 16-digit GUID as ibnetdiscover names them; a node known only
by its LID (an iblinkinfo peer without a section of its own) is ``L-<lid>``.  A link seen from both
ends is one link.  Interpreting the graph (levels, hosts, rails, findings) is gpucomm.probes.fabric's.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOSTS

# ibnetdiscover: a node record's first line
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9A-Fa-f]{1,16})"\s*(?:#\s*"([^"]*)"(.*))?$')
# ibnetdiscover: a port line (switch ports have no GUID of their own; a CA's port line starts
# with its port GUID in parentheses)
_PORT = re.compile(r'^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9A-Fa-f]{1,16})\))?\s+"([SHR])-([0-9A-Fa-f]{1,16})"'
                   r'\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9A-Fa-f]{1,16})\))?\s*(?:#\s*(.*))?$')
_GUIDLINE = re.compile(r"^(?:vendid|devid|sysimgguid|switchguid|caguid|rtguid)\s*=", re.I)
_WIDTH_SPEED = re.compile(r"\b(\d{1,2})x([A-Z]{3}\d{0,2})\b")
_LID = re.compile(r"\blid\s+(\d+)")
_QUOTED = re.compile(r'"([^"]*)"')
# ibnetdiscover -p
_PORTS_LINK = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9A-Fa-f]{1,16})\s+(\d{1,2}x|\?+)\s+(\S+)\s+-\s+"
                         r"(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9A-Fa-f]{1,16})\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)\s*$")
_PORTS_FREE = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9A-Fa-f]{1,16})\s+(\d{1,2}x|\?+)\s+(\S+)\s+'(.*)'\s*$")
# iblinkinfo
_LI_SWITCH = re.compile(r"^Switch:?\s+0x([0-9A-Fa-f]{1,16})\s+(.*?):\s*$")
_LI_CA = re.compile(r"^(?:CA|Ca):\s+(.*?):\s*$")
_LI_PORT = re.compile(r"^\s*(?:0x([0-9A-Fa-f]{1,16})\s+)?(\d+)\s+(\d+)\[[^\]]*\]\s+==\(\s*(.*?)\s*\)==>\s*"
                      r"(?:(\d+)\s+(\d+))?\s*\[[^\]]*\]\s+\"(.*)\"\s*\(\s*(.*?)\s*\)\s*$")
_LI_LINK = re.compile(r"^(\d{1,2})X\s+([\d.]+)\s+Gbps\s+(\w+)\s*/\s*(\w+)", re.I)
_LI_COULD = re.compile(r"Could be\s+(?:(\d{1,2})X\s*)?(?:([\d.]+)\s+Gbps)?", re.I)
# ibswitches / ibhosts / ibrouters
_LIST = re.compile(r'^(Switch|Ca|Router)\s*:\s*0x([0-9A-Fa-f]{1,16})\s+ports\s+(\d+)\s+"(.*)"(.*)$')
# a shell prompt pasted with the output (``root@host:~# iblinkinfo``)
_PROMPT = re.compile(r"^\S*[@:]\S*[#$>]\s*\S*|^[#$]\s+\S")

_TYPE = {"S": "switch", "H": "ca", "R": "router", "Switch": "switch", "Ca": "ca", "Rt": "router", "Router": "router",
         "SW": "switch", "CA": "ca", "RT": "router"}
_PREFIX = {"switch": "S", "ca": "H", "router": "R"}


def guid_id(kind: str, guid: str) -> str:
    """``("switch", "ec0d9a0300ec8240")`` -> ``S-ec0d9a0300ec8240`` (ibnetdiscover's node name)."""
    return f"{_PREFIX[kind]}-{guid.lower().zfill(16)}"


def looks_like(text: str) -> Optional[str]:
    """The infiniband-diags command whose output ``text`` holds (the first recognised), else None."""
    for line in text[:200_000].splitlines()[:2000]:
        s = line.strip()
        if _NODE.match(s) or (_PORT.match(s) and "#" in s):
            return "ibnetdiscover"
        if _PORTS_LINK.match(s) or _PORTS_FREE.match(s):
            return "ibnetdiscover-p"
        if _LI_SWITCH.match(s) or ("==(" in s and _LI_PORT.match(line)):
            return "iblinkinfo"
        if _LIST.match(s):
            return "ibswitches"
    return None


class _Graph:
    def __init__(self, path: str) -> None:
        self.path = path
        self.nodes: Dict[str, dict] = {}
        self.links: Dict[Tuple, dict] = {}
        self.lid_of: Dict[int, str] = {}     # LID -> node id (guid-named)
        self.formats: List[str] = []
        self.warnings: List[str] = []
        self.down = 0

    def fmt(self, name: str) -> None:
        if name not in self.formats:
            self.formats.append(name)

    def node(self, nid: str, kind: Optional[str], desc: Optional[str] = None, lid: Optional[int] = None,
             ports: Optional[int] = None, line: Optional[int] = None, guid: Optional[str] = None) -> dict:
        n = self.nodes.get(nid)
        if n is None:
            if len(self.nodes) >= 4 * MAX_HOSTS:
                raise InputError(f"more than {4 * MAX_HOSTS} fabric nodes", self.path,
                                 expected="a fabric of at most that many switches and CAs")
            n = self.nodes[nid] = {"id": nid, "type": kind, "guid": guid, "description": None, "lid": None,
                                   "ports": None, "line": line}
        if kind and not n["type"]:
            n["type"] = kind
        if desc and not n["description"]:
            n["description"] = desc
        if lid is not None and n["lid"] is None and 0 < lid < 0xC000:
            n["lid"] = lid
            if not nid.startswith("L-"):
                self.lid_of.setdefault(lid, nid)
        if ports is not None and n["ports"] is None:
            n["ports"] = ports
        if guid and not n["guid"]:
            n["guid"] = guid
        return n

    def link(self, a: str, ap: int, b: str, bp: int, width, speed, line: int, could=None) -> None:
        key = (a, ap, b, bp) if (a, ap) <= (b, bp) else (b, bp, a, ap)
        if len(self.links) >= 16 * MAX_HOSTS and key not in self.links:
            raise InputError(f"more than {16 * MAX_HOSTS} links", self.path)
        w = f"{int(str(width).lower().rstrip('x'))}x" if width and str(width)[0].isdigit() else None
        sp = speed.upper() if speed and speed.upper() in facts.IB_LANE_GBPS else None
        rec = self.links.get(key)
        if rec is None:
            self.links[key] = {"a": key[0], "a_port": key[1], "b": key[2], "b_port": key[3], "width": w,
                               "speed": sp, "rate_gbps": facts.ib_rate_gbps(w, sp), "could_be": could, "line": line}
            return
        if rec["speed"] is None and sp:
            rec.update(width=w, speed=sp, rate_gbps=facts.ib_rate_gbps(w, sp))
        if could and not rec["could_be"]:
            rec["could_be"] = could


def _guid(text: str) -> str:
    return "0x" + text.lower().zfill(16)


def parse_ib_text(text: str, path: str = "<fabric>") -> dict:
    """Any mix of ibnetdiscover (plain and ``-p``), iblinkinfo and ibswitches/ibhosts output ->
    the fabric graph record (module docstring).  Raises InputError when nothing is recognised."""
    g = _Graph(path)
    current: Optional[str] = None        # the ibnetdiscover node whose port lines follow
    li_current: Optional[Tuple[str, Optional[str]]] = None   # iblinkinfo section: (kind, id or desc)
    li_pending: List[tuple] = []         # iblinkinfo port lines, resolved once every LID is known
    unknown: List[int] = []
    recognised = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        s = line.strip()
        if not s:
            current = None          # a blank line ends an ibnetdiscover record
            continue
        if s.startswith("#"):
            continue
        m = _NODE.match(s)
        if m:
            recognised += 1
            g.fmt("ibnetdiscover")
            kind = _TYPE[m.group(1)]
            nid = guid_id(kind, m.group(4))
            rest = m.group(6) or ""
            lm = _LID.search(rest)
            g.node(nid, kind, m.group(5), int(lm.group(1)) if lm else None, int(m.group(2)), lineno, _guid(m.group(4)))
            current = nid
            li_current = None
            continue
        m = _PORT.match(s)
        if m:
            recognised += 1
            if current is None:
                g.warnings.append(f"line {lineno}: a port line outside any node record, skipped")
                continue
            port, remote_kind, remote_guid, rport = int(m.group(1)), _TYPE[m.group(3)], m.group(4), int(m.group(5))
            rid = guid_id(remote_kind, remote_guid)
            comment = m.group(7) or ""
            quoted = _QUOTED.findall(comment)
            lids = [int(x) for x in _LID.findall(comment)]
            if g.nodes[current]["type"] == "ca" and lids:     # "lid 83 lmc 0 "sw" lid 48": own LID first
                g.node(current, None, lid=lids[0])
                lids = lids[1:]
            g.node(rid, remote_kind, quoted[-1] if quoted else None, lids[-1] if lids else None, guid=_guid(remote_guid))
            ws = _WIDTH_SPEED.findall(comment)
            width, speed = (ws[-1] if ws else (None, None))
            g.link(current, port, rid, rport, width, speed, lineno)
            continue
        if _GUIDLINE.match(s):
            recognised += 1
            continue
        m = _PORTS_LINK.match(s)
        if m:
            recognised += 1
            g.fmt("ibnetdiscover-p")
            ak, bk = _TYPE[m.group(1)], _TYPE[m.group(7)]
            a = guid_id(ak, m.group(4))
            b = guid_id(bk, m.group(10))
            g.node(a, ak, m.group(11), int(m.group(2)), line=lineno, guid=_guid(m.group(4)))
            g.node(b, bk, m.group(12), int(m.group(8)), line=lineno, guid=_guid(m.group(10)))
            g.link(a, int(m.group(3)), b, int(m.group(9)), m.group(5), m.group(6), lineno)
            continue
        m = _PORTS_FREE.match(s)
        if m:
            recognised += 1
            g.fmt("ibnetdiscover-p")
            k = _TYPE[m.group(1)]
            g.node(guid_id(k, m.group(4)), k, m.group(7), int(m.group(2)), line=lineno, guid=_guid(m.group(4)))
            g.down += 1
            continue
        m = _LIST.match(s)
        if m:
            recognised += 1
            g.fmt({"Switch": "ibswitches", "Ca": "ibhosts", "Router": "ibrouters"}[m.group(1)])
            k = _TYPE[m.group(1)]
            lm = _LID.search(m.group(5))
            g.node(guid_id(k, m.group(2)), k, m.group(4), int(lm.group(1)) if lm else None, int(m.group(3)), lineno,
                   _guid(m.group(2)))
            continue
        m = _LI_SWITCH.match(s)
        if m:
            recognised += 1
            g.fmt("iblinkinfo")
            nid = guid_id("switch", m.group(1))
            g.node(nid, "switch", m.group(2), line=lineno, guid=_guid(m.group(1)))
            li_current, current = ("switch", nid), None
            continue
        m = _LI_CA.match(s)
        if m:
            recognised += 1
            g.fmt("iblinkinfo")
            li_current, current = ("ca", m.group(1)), None
            continue
        if "==(" in s:
            m = _LI_PORT.match(line)
            if m and li_current is not None:
                recognised += 1
                li_pending.append((lineno, li_current, m.groups()))
                continue
        if _PROMPT.match(s):
            continue
        unknown.append(lineno)
    if not recognised:
        raise InputError("no ibnetdiscover, iblinkinfo or ibswitches/ibhosts line", path,
                         expected="the output of ibnetdiscover [-p], iblinkinfo or ibswitches/ibhosts")
    _resolve_linkinfo(g, li_pending)
    if unknown:
        g.warnings.append(f"{len(unknown)} line(s) not understood and skipped (first: line {unknown[0]})")
    # LID-only nodes that an ibswitches/ibhosts line or a section named: one node, by GUID
    for nid in [n for n in g.nodes if n.startswith("L-")]:
        real = g.lid_of.get(g.nodes[nid]["lid"])
        if real:
            _rename(g, nid, real)
    return {"formats": g.formats, "nodes": sorted(g.nodes.values(), key=lambda n: n["id"]),
            "links": [g.links[k] for k in sorted(g.links)], "down_ports": g.down, "warnings": g.warnings}


def _rename(g: _Graph, old: str, new: str) -> None:
    o = g.nodes.pop(old)
    n = g.nodes[new]
    for k in ("description", "type", "lid"):
        if n.get(k) is None:
            n[k] = o.get(k)
    relinked = {}
    for key, rec in g.links.items():
        if old in (rec["a"], rec["b"]):
            a, ap, b, bp = (new if rec["a"] == old else rec["a"]), rec["a_port"], (new if rec["b"] == old else rec["b"]), rec["b_port"]
            k2 = (a, ap, b, bp) if (a, ap) <= (b, bp) else (b, bp, a, ap)
            relinked[key] = (k2, dict(rec, a=k2[0], a_port=k2[1], b=k2[2], b_port=k2[3]))
    for key, (k2, rec) in relinked.items():
        del g.links[key]
        if k2 not in g.links or g.links[k2]["speed"] is None:
            g.links[k2] = rec


def _resolve_linkinfo(g: _Graph, pending: List[tuple]) -> None:
    """iblinkinfo port lines -> links.  A switch section's lines start with the switch's LID; a CA
    section's with the port GUID and LID; the peer is named by LID (and description)."""
    for lineno, (kind, ref), grp in pending:
        port_guid, lid, port, link, rlid, rport, rdesc, comment = grp
        lid, port = int(lid), int(port)
        if kind == "switch":
            me = ref
            g.node(me, "switch", lid=lid)
        else:
            if port_guid is None:
                continue
            me = guid_id("ca", port_guid)
            g.node(me, "ca", ref, lid, guid=_guid(port_guid))
    for lineno, (kind, ref), grp in pending:
        port_guid, lid, port, link, rlid, rport, rdesc, comment = grp
        m = _LI_LINK.match(link or "")
        if not m or rlid is None:
            g.down += 1
            continue
        me = ref if kind == "switch" else (guid_id("ca", port_guid) if port_guid else None)
        if me is None:
            continue
        rlid_i, rport_i = int(rlid), int(rport)
        rid = g.lid_of.get(rlid_i) or f"L-{rlid_i}"
        g.node(rid, None, rdesc or None, rlid_i)
        width, speed = m.group(1), facts.ib_speed_name(m.group(2))
        could = None
        cm = _LI_COULD.search(comment or "")
        if cm and (cm.group(1) or cm.group(2)):
            cw = f"{cm.group(1)}x" if cm.group(1) else f"{width}x"
            cs = facts.ib_speed_name(cm.group(2)) if cm.group(2) else speed
            could = {"width": cw, "speed": cs, "rate_gbps": facts.ib_rate_gbps(cw, cs)}
        g.link(me, int(port), rid, rport_i, width, speed, lineno, could)


# ============================================================================================
# The writer: ibnetdiscover text for a fabric (synthetic clusters)
def write_ibnetdiscover(switches: List[dict], cas: List[dict], links: List[dict], stamp: str = "gpucomm synth") -> str:
    """``ibnetdiscover`` output for a fabric given as plain records: ``switches`` and ``cas``
    [{"id": "S-<guid>"/"H-<guid>", "description", "lid", "ports"}], ``links`` [{"a", "a_port", "b",
    "b_port", "width", "speed"}].  Each link is written from both ends, as ibnetdiscover does."""
    by_id = {n["id"]: n for n in list(switches) + list(cas)}
    ports: Dict[str, List[tuple]] = {}
    for l in links:
        ws = f"{l.get('width') or '4x'}{l.get('speed') or ''}"
        ports.setdefault(l["a"], []).append((l["a_port"], l["b"], l["b_port"], ws))
        ports.setdefault(l["b"], []).append((l["b_port"], l["a"], l["a_port"], ws))
    out = ["#", f"# Topology file: generated by {stamp}", "#", ""]
    for sw in switches:
        g = sw["id"][2:]
        out += ["vendid=0x2c9", "devid=0xd2f2", f"sysimgguid=0x{g}", f"switchguid=0x{g}({g})",
                f'Switch\t{sw.get("ports") or 64} "{sw["id"]}"\t\t# "{sw["description"]}" enhanced port 0 lid {sw["lid"]} lmc 0']
        for p, rid, rp, ws in sorted(ports.get(sw["id"], [])):
            r = by_id[rid]
            guid = f"({rid[2:]}) " if rid.startswith("H-") else ""
            out.append(f'[{p}]\t"{rid}"[{rp}]{guid}\t\t# "{r["description"]}" lid {r["lid"]} {ws}')
        out.append("")
    for ca in cas:
        g = ca["id"][2:]
        out += ["vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{g}", f"caguid=0x{g}",
                f'Ca\t{ca.get("ports") or 1} "{ca["id"]}"\t\t# "{ca["description"]}"']
        for p, rid, rp, ws in sorted(ports.get(ca["id"], [])):
            r = by_id[rid]
            out.append(f'[{p}]({g}) \t"{rid}"[{rp}]\t\t# lid {ca["lid"]} lmc 0 "{r["description"]}" lid {r["lid"]} {ws}')
        out.append("")
    return "\n".join(out)
