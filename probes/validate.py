"""Structural check of a topology document read from a user's file.  Cheap and dependency-free
(jsonschema is only a test dependency); names the first problem in one line."""
from __future__ import annotations

from typing import Any

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import SCHEMA, new_document

_TYPES = {"gpus": list, "nics": list, "switches": list, "links": list, "numa_nodes": list,
          "sources": list, "warnings": list, "matrix": dict, "host": dict}


def check_document(doc: Any, path: str) -> dict:
    if not isinstance(doc, dict):
        raise InputError(f"top level is {type(doc).__name__}", path, expected="a mapping with schema: " + SCHEMA)
    if doc.get("schema") != SCHEMA:
        raise InputError(f"schema is {doc.get('schema')!r}", path, expected=repr(SCHEMA))
    base = new_document(doc.get("host", {}).get("provenance", "json") if isinstance(doc.get("host"), dict) else "json")
    for key, typ in _TYPES.items():
        if key not in doc:
            doc[key] = base[key]
        elif not isinstance(doc[key], typ):
            raise InputError(f"field {key!r} is {type(doc[key]).__name__}", path, expected=typ.__name__)
    for i, g in enumerate(doc["gpus"]):
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or isinstance(g.get("index"), bool):
            raise InputError(f"gpus[{i}] has no integer index", path, expected="{index: int, ...}")
        for k, t in (("nvlink", list), ("numa_affinity", list)):
            if k in g and not isinstance(g[k], t):
                raise InputError(f"gpus[{i}].{k} is {type(g[k]).__name__}", path, expected=t.__name__)
        g.setdefault("nvlink", [])
        g.setdefault("numa_affinity", [])
        g.setdefault("vendor", "nvidia")
    for i, n in enumerate(doc["nics"]):
        if not isinstance(n, dict) or not isinstance(n.get("name"), str) or not n.get("name"):
            raise InputError(f"nics[{i}] has no name", path, expected="{name: str, ...}")
        if "ports" in n and not isinstance(n["ports"], list):
            raise InputError(f"nics[{i}].ports is {type(n['ports']).__name__}", path, expected="list")
        n.setdefault("ports", [])
    for i, l in enumerate(doc["links"]):
        if not isinstance(l, dict) or not all(isinstance(l.get(k), str) for k in ("a", "b", "kind")):
            raise InputError(f"links[{i}] lacks a/b/kind strings", path, expected="{a, b, kind, bw_GBps}")
        bw = l.get("bw_GBps")
        if bw is not None and (not isinstance(bw, (int, float)) or isinstance(bw, bool) or bw < 0):
            raise InputError(f"links[{i}].bw_GBps is {bw!r}", path, expected="a number >= 0")
    for i, s in enumerate(doc["switches"]):
        if not isinstance(s, dict) or not isinstance(s.get("id"), str):
            raise InputError(f"switches[{i}] has no id", path, expected="{id, kind}")
    for k, row in doc["matrix"].items():
        if not isinstance(row, dict) or not all(isinstance(v, str) for v in row.values()):
            raise InputError(f"matrix row {k!r} is not a mapping of strings", path)
    return doc
