"""Our ring search against NCCL itself on every golden case: ``gpucomm``'s rings (planners/collectives/
rings.py, without the NCCL reference) against the ring bandwidth ncclsim found (NCCL 2.30.7's own search:
searched channels x bwIntra, ``fixtures/ncclsim/goldens.json``), for the generated corpus, the NCCL XML
captures and the bundled examples, with each case's GPUs, node count and NCCL_* settings.

    python tools/rings_vs_ncclsim.py [--jobs 2] [--stride N] [--json OUT] [--search-only]

By default the rings are what ``gpucomm rings`` answers (our search, with the NCCL model's rings placed
in our capacity model as one more candidate); ``--search-only`` leaves that candidate out, to see the
search itself.  Prints how many cases ours is equal or better on, and every case where NCCL's is wider, with both
totals.  Cases where NCCL fails to initialise are skipped (counted)."""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "fixtures" / "ncclsim"


def nccl_total(golden: dict) -> float:
    r = golden["ring"]
    return float(r["n"]) * float(r["bwIntra"])


def _overload(plan) -> tuple:
    """Where NCCL's own rings, at NCCL's bandwidth, do not fit our capacity model: (the share of NCCL's
    bandwidth the links can carry -- every channel slowed alike until the most over-subscribed link
    fits --, a note naming that link).  What a loss is made of when our search cannot match NCCL."""
    from gpucomm.planners.collectives.rings import _hops, _reference_channels
    from gpucomm.planners.collectives.ringsearch import Capacity

    ns = plan.ns
    seed = _reference_channels(ns, plan.nccl_reference, plan.nodes > 1, float("inf"))
    if not seed:
        return None, "NCCL's rings are not expressible in our model"
    cap = Capacity(ns)
    use: dict = {}
    for ch in seed:
        for s, d in _hops(ch.gpus, ch.nets, ch.breaks):
            for e, f in cap.loads(s, d) or []:
                use[e] = use.get(e, 0.0) + f * ch.bw
    worst = max(use, key=lambda e: use[e] / max(ns.capacity[e], 1e-9))
    c = ns.capacity[worst]
    share = min(1.0, c / use[worst]) if use[worst] > 0 else 1.0
    return share, (f"NCCL's rings need {use[worst]:g} GB/s on {ns.label(worst[0])}->{ns.label(worst[1])} "
                   f"({worst[2]}, {c:g} GB/s)")


def one(case: dict, seeded: bool = True) -> tuple:
    sys.path.insert(0, str(REPO))
    from gpucomm.planners.collectives.rings import search_rings
    from gpucomm.planners.nccl.settings import NcclSettings
    from gpucomm.probes.errors import GpucommError
    from gpucomm.probes.load import load_topology

    cid = ":".join([case["xml"], f"n{case['nodes']}"] + (["g" + "-".join(map(str, case["gpus"]))] if case.get("gpus")
                                                          else []) + [f"{k}={v}" for k, v in sorted((case.get("env") or {}).items())])
    if "error" in case["golden"]:
        return cid, None, None, "nccl fails", None
    m = case.get("mnnvl")
    if m:
        cid += f":mnnvl{m['clique']}" + (f"/{m['domain']}" if m.get("domain", m["clique"]) != m["clique"] else "") \
            + (f":state{m['state']}" if m.get("state", 3) != 3 else "")
        if m.get("domain", m["clique"]) != m["clique"] or m.get("state", 3) != 3:
            # several cliques in one domain, or a fabric state: more than --nvlink-domain K says
            return cid, None, nccl_total(case["golden"]), "MNNVL layout beyond --nvlink-domain", None
    try:
        doc = load_topology(str(OUT / case["xml"]))
        plan = search_rings(doc, gpus=case.get("gpus"), nodes=case["nodes"], reference=seeded,
                            settings=NcclSettings.from_env(case.get("env") or {}),
                            nvlink_domain=m["clique"] if m else None)
        note, carried = "", nccl_total(case["golden"])
        if seeded and plan.total_bw < carried - 1e-6 and plan.nccl_reference:
            share, note = _overload(plan)
            if share is not None:
                carried = round(carried * share, 6)
        return cid, round(plan.total_bw, 6), nccl_total(case["golden"]), note, carried
    except GpucommError as e:
        note = "one GPU" if "at least 2 GPUs" in str(e) else f"ours refused: {e}"
        return cid, None, nccl_total(case["golden"]), note, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--stride", type=int, default=1, help="every Nth case")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--search-only", action="store_true", help="without the NCCL model's rings as a candidate")
    ap.add_argument("--group", help="only this group's cases (corpus, examples, fixtures, mnnvl)")
    args = ap.parse_args(argv)
    cases = [c for c in json.loads((OUT / "goldens.json").read_text())["cases"]
             if args.group is None or c.get("group") == args.group][:: max(1, args.stride)]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        rows = list(ex.map(one, cases, [not args.search_only] * len(cases), chunksize=4))
    compared = [r for r in rows if r[1] is not None]
    skipped = [r for r in rows if r[1] is None]
    losses = [r for r in compared if r[1] < r[2] - 1e-6]
    wins = [r for r in compared if r[1] > r[2] + 1e-6]
    # NCCL's search books bandwidth per path type, ours per link: where NCCL's rings over-book a link,
    # what they can really carry is NCCL's bandwidth slowed until that link fits
    real_losses = [r for r in losses if r[1] < r[4] - 1e-6]
    print(f"{len(rows)} cases: ours >= NCCL on {len(compared) - len(losses)} of {len(compared)} compared "
          f"({len(wins)} wider, {len(compared) - len(losses) - len(wins)} equal); "
          f"{len(skipped)} not compared")
    print(f"ours >= what NCCL's rings carry on the links: {len(compared) - len(real_losses)} of {len(compared)}")
    for cid, ours, nccl, note, _ in skipped:
        if note not in ("nccl fails", "one GPU", "MNNVL layout beyond --nvlink-domain"):
            print(f"  not compared {cid}: {note}")
    for cid, ours, nccl, note, carried in sorted(losses, key=lambda r: r[1] / r[2]):
        print(f"  NCCL wider {cid}: ours {ours:g} vs NCCL {nccl:g} ({ours / nccl:.3f}){': ' + note if note else ''}"
              + (f"; carried by the links: {carried:g} GB/s" if carried < nccl - 1e-6 else ""))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([{"case": c, "ours": o, "nccl": n, "note": t, "nccl_carried": k}
                                                   for c, o, n, t, k in rows], indent=1) + "\n")
    return 1 if real_losses else 0


if __name__ == "__main__":
    sys.exit(main())
