"""Fleets read one node at a time, shared by ``diff`` and ``doctor`` over many nodes (and the cluster
document, planners/fleet.py): :func:`stream_sources` loads each input when its turn comes and reads a
JSON text equal to an earlier one, up to a few identifiers, only for its host name; :class:`NodeClasses`
groups the nodes into classes of identical ones, computing what describes a class (a fingerprint, a
doctor report) once per class.

Below :mod:`gpucomm.planners.health.diff` and :mod:`gpucomm.planners.health.doctor`, importing neither."""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Optional


# Fleets of saved topologies: the texts of identical nodes differ only in a few identifiers.  These
# are the string values no fingerprint attribute reads (diff.fingerprint() names the fields it reads),
# each at the one place of the document where it lives.  Two texts that are equal once those
# strings are blanked are the same document up to those strings, so they get the same
# fingerprint: a fleet parses and fingerprints one node per distinct text, and reads only the
# host name of the others.
VOLATILE_KEYS = ("hostname", "collected_at", "uuid", "guid", "sys_image_guid")
_VOLATILE_PLACE = {"hostname": "host", "collected_at": "host", "uuid": "gpus", "guid": "nics",
                   "sys_image_guid": "nics"}
# a JSON string token exactly (json.loads accepts every match: no raw control characters, only
# JSON's escapes), so a text equal to a parsed one up to these tokens parses the same way
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_VOLATILE_RE: dict = {}


def _scan(text: str, volatile: tuple) -> tuple:
    """(digest of ``text`` with the string values of the ``volatile`` keys blanked, [(key, string
    token), ...]); (None, []) for a text that is not a JSON object (no shortcut)."""
    import hashlib

    if not text.lstrip("\ufeff \t\r\n").startswith("{"):
        return None, []
    pat = _VOLATILE_RE.get(volatile)
    if pat is None:
        pat = _VOLATILE_RE[volatile] = re.compile(
            '"(%s)"(\\s*:\\s*)(%s)' % ("|".join(map(re.escape, volatile)), _JSON_STRING))
    parts = pat.split(text)          # text, key, space, token, text, key, space, token, ..., text
    found = list(zip(parts[1::4], parts[3::4]))
    if found:
        parts[3::4] = ["~"] * len(found)
        for i in range(1, len(parts), 4):
            parts[i] = f'"{parts[i]}"'
        text = "".join(parts)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest(), found


def content_key(text: str, volatile: tuple = VOLATILE_KEYS) -> Optional[bytes]:
    """A digest of a JSON input text with the string values of the ``volatile`` keys blanked
    (None for another format); any other difference between two texts gives another key."""
    return _scan(text, volatile)[0]


def _exact(doc: dict, found: list, volatile: tuple) -> bool:
    """True when every string value of a ``volatile`` key in ``doc`` sits where that key belongs
    (the host, GPU or NIC records) and the text held each of them as one blanked token: then a
    text equal up to those tokens is this document up to those values (a key elsewhere -- a
    matrix column named "uuid" -- or written with escapes turns the shortcut off)."""
    placed: Counter = Counter()
    for key in volatile:
        where = _VOLATILE_PLACE.get(key)
        recs = [doc.get("host")] if where == "host" else (doc.get(where) if where else None)
        for r in recs if isinstance(recs, list) else []:
            if isinstance(r, dict) and isinstance(r.get(key), str):
                placed[key] += 1
    anywhere: Counter = Counter()
    stack = [doc]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            for k, v in o.items():
                if isinstance(v, str):
                    if k in volatile:
                        anywhere[k] += 1
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(o, list):
            stack.extend(v for v in o if isinstance(v, (dict, list)))
    matched = Counter(k for k, _ in found)
    return all(matched[k] == anywhere[k] == placed[k] for k in volatile)


def stream_sources(named_sources, volatile: tuple = VOLATILE_KEYS):
    """(name, document or None, content key, input summary) for each (name, source) pair, loaded
    when its turn comes.  A JSON text equal, up to the string values of ``volatile`` keys in their
    places, to one loaded before yields None for the document: the consumer reuses what it computed
    for that one (``diff.diff_stream``, ``doctor.doctor_fleet``)."""
    import json

    from gpucomm.probes.load import load_topology_text, read_topology_text

    known: dict = {}     # content key -> summary of the first input with that text
    for name, src in named_sources:
        text = read_topology_text(src)
        key, found = _scan(text, volatile) if text is not None else (None, [])
        if key is not None and key in known:
            info = dict(known[key])
            host = [tok for k, tok in found if k == "hostname"]
            if host:
                info["hostname"] = json.loads(host[0])
            yield name, None, key, info
            continue
        doc, _ = load_topology_text(src, text)
        h = doc.get("host") or {}
        info = {"hostname": h.get("hostname"), "provenance": h.get("provenance"), "gpus": len(doc.get("gpus", [])),
                "nics": len(doc.get("nics", []))}
        if key is not None and not _exact(doc, found, volatile):
            key = None       # no shortcut for texts like this one
        if key is not None:
            known[key] = info
        yield name, doc, key, info


class NodeClasses:
    """Nodes of a fleet grouped into classes, numbered in the order of their first node: a node whose
    text key was seen before joins that node's class unread; otherwise ``describe(doc)`` (a
    fingerprint, a doctor report) is computed once and its ``key`` picks the class.  Shared by fleet
    ``diff`` and fleet ``doctor``."""

    def __init__(self, describe: Callable, key: Callable) -> None:
        self.describe, self.key = describe, key
        self.member: list = []         # node -> class
        self.classes: list = []        # class -> what describe() gave for its first node
        self.first_member: list = []   # class -> its first node
        self._by_key: dict = {}
        self._by_text: dict = {}       # text key -> class

    def add(self, doc, text_key=None) -> int:
        c = self._by_text.get(text_key) if text_key is not None else None
        if c is None:
            value = self.describe(doc)
            k = self.key(value)
            c = self._by_key.get(k)
            if c is None:
                c = self._by_key[k] = len(self.classes)
                self.classes.append(value)
                self.first_member.append(len(self.member))
            if text_key is not None:
                self._by_text[text_key] = c
        self.member.append(c)
        return c


__all__ = ["VOLATILE_KEYS", "content_key", "stream_sources", "NodeClasses"]
