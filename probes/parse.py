"""An input's bytes -> text -> data, bounded and with one-line errors: the text checks every text input
goes through (empty, binary, encoding; at most MAX_INPUT_BYTES), and JSON and YAML read within the bounds
of :mod:`gpucomm.probes.limits` (nesting, integer digits, YAML aliases).

The layer under :mod:`gpucomm.probes.load` (which detects what an input is and dispatches it): readers
of a single format -- fabric inputs, recorded NVML, nccl-tests output, NCCL logs, calibration profiles --
read their text and data here without importing the dispatcher."""
from __future__ import annotations

import json
import os
import stat
from typing import Any

from gpucomm.probes.errors import InputError
from gpucomm.probes.files import read_limited
from gpucomm.probes.limits import MAX_DEPTH, MAX_INPUT_BYTES, MAX_INT_DIGITS, MAX_YAML_NODES


def read_text_input(path: str) -> str:
    """Read a text input (a regular file of at most MAX_INPUT_BYTES, or a shipped capture named
    ``example:<file name>``), rejecting binary junk and wrong encodings with a one-line error."""
    if path.startswith("example:"):
        from gpucomm.probes.examples import capture_path, example_path

        found = capture_path(path)
        if found is None:
            example_path(path.split(":", 1)[1])   # names what exists
            raise InputError("is a bundled machine, not a text file", path,
                             expected="a file, or example:<capture file name> (gpucomm examples)")
        path = found
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise InputError("is a directory but not a snapshot", path, expected="a snapshot with meta.json or sys/")
    except OSError:
        pass  # read_limited names the problem
    data = read_limited(path, MAX_INPUT_BYTES)
    return decode_text_input(data, path)


def decode_text_input(data: bytes, path: str) -> str:
    """The text of an input's bytes (read_text_input's checks: empty, binary, encoding)."""
    if not data.strip():
        raise InputError("file is empty", path, expected="a topology, snapshot, nvidia-smi topo -m, NCCL XML or rocm-smi capture")
    # UTF-16 with BOM (PowerShell's `>` on Windows/WSL writes it) is common enough for smi captures.
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text16 = data.decode("utf-16")
            if "\x00" not in text16:
                return text16
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:65536]:
        raise InputError("file is binary", path, expected="a text capture or topology document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise InputError("not valid UTF-8 text", path) from None
    if sum(1 for ch in text if ord(ch) > 127) > len(text) // 20:
        raise InputError("not valid UTF-8 text", path, expected="a UTF-8 text file")
    return text


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLong(len(digits.lstrip("-")))
    return int(digits)


class _TooLong(ValueError):
    pass


def parse_json(text: str, path: str, expected: str = "a gpucomm topology document") -> Any:
    """JSON text -> data, with one-line errors: syntax, integers of more than MAX_INT_DIGITS
    digits, nesting deeper than MAX_DEPTH.  NaN and Infinity are read (Python's json accepts
    them) and judged by the document's validation."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path, line=e.lineno, expected=expected) from None
    except _TooLong as e:
        raise InputError(f"an integer of {e.args[0]} digits (more than {MAX_INT_DIGITS})", path, expected=expected) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected) from None
    except ValueError as e:
        raise InputError(f"invalid JSON: {' '.join(str(e).split())[:120]}", path, expected=expected) from None
    check_depth(data, path, expected)
    return data


def check_depth(data: Any, path: str, expected: str = "a gpucomm topology document") -> None:
    """Refuse data nested deeper than MAX_DEPTH (iteratively: no recursion on hostile input)."""
    stack = [(data, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            children = o.values()
        elif isinstance(o, list):
            children = o
        else:
            continue
        if d > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected)
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))


def _yaml_loader():
    import yaml
    from yaml.events import AliasEvent, ScalarEvent

    class BoundedLoader(yaml.SafeLoader):
        """yaml.SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (the
        composer recurses once per level)."""

        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(ScalarEvent, AliasEvent):   # depth counts mappings and lists, as in JSON
                return super().compose_node(parent, index)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _TooDeep()
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node):
            """YAML 1.1 integers in every spelling (``0x``, ``0o``/``0``, ``0b``, base 60 ``1:30``,
            ``_`` separators, signs) held to MAX_INT_DIGITS decimal digits, counted before the
            conversion (a base-60 integer of thousands of parts is never multiplied out)."""
            v = self.construct_scalar(node).replace("_", "").lstrip("+-")
            if ":" in v:
                digits = len(v.split(":")) * 2
            else:
                body = v[2:] if v[:2] in ("0x", "0b", "0o") else v
                per = {"0x": 1.21, "0b": 0.31}.get(v[:2], 0.91 if v[:1] == "0" else 1.0)  # decimal digits per digit
                digits = int(len(body.lstrip("0")) * per)
            if digits > MAX_INT_DIGITS + 2:
                raise _TooLong(digits)
            value = super().construct_yaml_int(node)
            if abs(value) >= 10 ** MAX_INT_DIGITS:
                raise _TooLong(len(str(abs(value))))
            return value

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    return BoundedLoader


class _TooDeep(Exception):
    pass


def _expanded_size(node) -> int:
    """Values a composed YAML node stands for, an alias counted each time it is used; memoised
    per node, so linear in the document; -1 for a recursive alias."""
    import yaml

    size: dict = {}
    stack = [(node, False)]
    visiting: set = set()
    while stack:
        n, done = stack.pop()
        k = id(n)
        if done:
            visiting.discard(k)
            if isinstance(n, yaml.MappingNode):
                kids = [c for pair in n.value for c in pair]
            elif isinstance(n, yaml.SequenceNode):
                kids = n.value
            else:
                kids = []
            size[k] = min(1 + sum(size[id(c)] for c in kids), MAX_YAML_NODES + 1)
            continue
        if k in size:
            continue
        if k in visiting:
            return -1
        visiting.add(k)
        stack.append((n, True))
        if isinstance(n, yaml.MappingNode):
            stack.extend((c, False) for pair in n.value for c in pair if id(c) not in size)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((c, False) for c in n.value if id(c) not in size)
    return size[id(node)]


def parse_yaml(text: str, path: str, expected: str = "a gpucomm topology document") -> Any:
    """YAML text -> data through a bounded safe loader: one-line errors for syntax, nesting deeper
    than MAX_DEPTH, aliases that expand past MAX_YAML_NODES values or refer to themselves, and
    integers too long for Python."""
    import yaml

    try:
        loader = _yaml_loader()(text)      # the reader refuses control characters at once
    except yaml.YAMLError as e:
        raise InputError(f"invalid YAML: {str(getattr(e, 'problem', None) or e).splitlines()[0][:120]}", path,
                         expected=expected) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        n = _expanded_size(node)
        if n < 0:
            raise InputError("a YAML alias refers to itself (a recursive document)", path, expected=expected)
        if n > MAX_YAML_NODES:
            raise InputError(f"YAML aliases expand the document past {MAX_YAML_NODES} values", path, expected=expected)
        data = loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        msg = str(getattr(e, "problem", None) or "invalid YAML")
        raise InputError(f"invalid YAML: {msg}", path, line=(mark.line + 1) if mark is not None else None,
                         expected=expected) from None
    except (_TooDeep, RecursionError):
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected) from None
    except _TooLong as e:
        raise InputError(f"an integer of about {e.args[0]} digits (more than {MAX_INT_DIGITS})", path,
                         expected=expected) from None
    except ValueError as e:  # a malformed integer or float
        raise InputError(f"invalid YAML: {' '.join(str(e).split())[:120]}", path, expected=expected) from None
    finally:
        loader.dispose()
    return data


