"""Source ``smi``: ``nvidia-smi topo -m``, ``nvidia-smi nvlink -s`` and (on multi-node NVLink trays)
``nvidia-imex-ctl -N`` run through ``host.runner``.

On a live node the runner is :class:`gpucomm.probes.sources.host.CommandRunner` (timeout, never a shell); on a
snapshot it is :class:`gpucomm.probes.sources.host.RecordedRunner` answering from ``commands/*.txt``.  The text is
handed to the capture parsers (:func:`gpucomm.probes.formats.smi_topo.parse_topo_text`,
:func:`gpucomm.probes.formats.smi_nvlink.parse_nvlink_status`), imported lazily.

What this source contributes to the merge (below NVML, above sysfs): the matrix (used
only when no PCI tree is known to compute one), per-GPU NUMA/CPU affinity, NIC names, and NVLink
information (per-link state/speed from ``nvlink -s``; GPU-GPU ``NV#`` links from the matrix, which
the merge uses only when NVML gave no NVLink links).  Facts the capture parser *derives* rather
than reads (NUMA node CPU lists, socket count, NIC NUMA guesses) are left out: the numa and
sysfs sources read them directly.
"""
from __future__ import annotations

from gpucomm.probes.errors import InputError
from gpucomm.probes.sources.host import CommandResult, Host, RecordedRunner
from gpucomm.probes.model import new_document, source_record, warn

TOPO = ("nvidia-smi", "topo", "-m")
NVLINK = ("nvidia-smi", "nvlink", "-s")
IMEX = ("nvidia-imex-ctl", "-N")   # the IMEX domain of a multi-node NVLink tray


def _cache(host: Host) -> dict:
    # available() and collect() both need the output: run each command once per host object.
    c = getattr(host, "_gpucomm_smi_cache", None)
    if c is None:
        c = {}
        try:
            setattr(host, "_gpucomm_smi_cache", c)
        except AttributeError:  # pragma: no cover - a host class with __slots__
            pass
    return c


def run(host: Host, argv: tuple) -> CommandResult:
    c = _cache(host)
    if argv not in c:
        c[argv] = host.runner.run(list(argv))
    return c[argv]


def why_not(r: CommandResult) -> str:
    """One line saying why a command gave no usable output."""
    if r.returncode is None:
        return r.error or f"{r.argv[0]} did not run"
    text = (r.stderr or r.stdout or "").strip()
    first = text.splitlines()[0][:200] if text else ""
    return f"exit status {r.returncode}" + (f": {first}" if first else "")


def _live_mismatch(host: Host) -> bool:
    from gpucomm.probes.sources.numa import is_live_root

    runner = host.runner
    while getattr(runner, "base", None) is not None:  # a recording wrapper (gpucomm.probes.sources.snapshot)
        runner = runner.base
    return not isinstance(runner, RecordedRunner) and not is_live_root(host)


def _recorded(host: Host) -> bool:
    runner = host.runner
    while getattr(runner, "base", None) is not None:
        runner = runner.base
    return isinstance(runner, RecordedRunner)


def collect(host: Host) -> dict:
    doc = new_document(host.provenance)
    r = run(host, TOPO)
    label = " ".join(TOPO)
    if r.returncode != 0:
        detail = _imex(host, doc)
        if detail:   # a tray whose nvidia-smi topo -m is missing but whose IMEX domain answered
            doc["sources"] = [source_record("smi", "partial", f"{label}: {why_not(r)}{detail}")]
            return doc
        doc["sources"] = [source_record("smi", "unavailable" if r.returncode is None else "error",
                                        f"{label}: {why_not(r)}")]
        return doc
    from gpucomm.probes.formats.smi_topo import parse_topo_text

    try:
        parsed = parse_topo_text(r.stdout, path=label)
    except InputError as e:
        doc["sources"] = [source_record("smi", "error", str(e))]
        warn(doc, f"smi: {e}")
        return doc
    status = parsed["sources"][0]["status"] if parsed.get("sources") else "ok"
    for w in parsed.get("warnings", []):
        warn(doc, f"smi: {w}")
    gpus = []
    for g in parsed.get("gpus", []):
        # Keep what topo -m states about each GPU; drop nothing it read, nothing it guessed.
        keep = {k: g.get(k) for k in ("index", "numa_node", "numa_affinity", "cpu_affinity", "name", "uuid",
                                      "arch", "compute_capability")}
        rec = dict(g)
        rec.update(keep)
        rec["pci_bus_id"] = None
        rec["nvlink"] = []
        gpus.append(rec)
    doc["gpus"] = gpus
    doc["nics"] = [{**n, "numa_node": None} for n in parsed.get("nics", [])]
    doc["matrix"] = parsed.get("matrix", {})
    doc["links"] = [l for l in parsed.get("links", []) if l.get("kind") == "nvlink"]
    detail = f"{label}: {len(gpus)} GPU(s), {len(doc['nics'])} NIC(s)"

    n = run(host, NVLINK)
    if n.returncode == 0 and n.stdout.strip():
        from gpucomm.probes.formats.smi_nvlink import apply_nvlink_status, parse_nvlink_status

        try:
            apply_nvlink_status(doc, parse_nvlink_status(n.stdout, path=" ".join(NVLINK)))
            detail += "; nvlink -s read"
        except InputError as e:
            warn(doc, f"smi: {e}")
            status = "partial"
    else:
        detail += f"; {' '.join(NVLINK)}: {why_not(n)}"
    detail += _imex(host, doc)
    doc["sources"] = [source_record("smi", status if status in ("ok", "partial") else "partial", detail)]
    return doc


def _imex(host: Host, doc: dict) -> str:
    """``nvidia-imex-ctl -N`` into ``doc["imex"]`` on multi-node NVLink trays; the text to add to the
    source's detail ('' when there is no IMEX: a node without it has no such binary, not worth a word)."""
    i = run(host, IMEX)
    if i.returncode != 0 or not i.stdout.strip():
        return ""
    from gpucomm.probes.formats.imex import parse_imex_status

    try:
        st = parse_imex_status(i.stdout, path=" ".join(IMEX))
    except InputError as e:
        warn(doc, f"smi: {e}")
        return ""
    doc["imex"] = {k: st[k] for k in ("domain_state", "nodes", "connectivity", "not_connected", "timestamp")}
    return f"; imex: domain {st['domain_state'] or 'state unknown'}, {len(st['nodes'])} node(s)"


class _SmiSource:
    name = "smi"
    priority = 20

    def available(self, host: Host):
        if _live_mismatch(host):
            return f"nvidia-smi describes this machine, not the tree under {host.root}"
        r = run(host, TOPO)
        if r.returncode is None and not (_recorded(host) and run(host, IMEX).returncode == 0):
            # missing binary, not recorded, timed out (a snapshot may hold an IMEX domain without topo -m;
            # a live node without nvidia-smi has no IMEX either: nothing more is run there)
            return f"{' '.join(TOPO)}: {why_not(r)}"
        return True  # a non-zero exit is reported by collect() as an error with nvidia-smi's message

    def collect(self, host: Host) -> dict:
        return collect(host)


SOURCE = _SmiSource()
