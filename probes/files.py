"""The user's files, read and written safely.

* :func:`read_limited` reads a regular file with a byte cap: a directory, FIFO, device or socket is
  refused before it is opened for reading (``/dev/zero`` would never end, a FIFO without a writer
  would block forever), and the cap holds whatever ``st_size`` says (0 for /proc files).
* :func:`write_atomic` writes to a temporary file in the target's directory and renames it into
  place: the target is never opened, so a failed write leaves it as it was (``show t.json -o
  t.json`` cannot truncate its own input).  A final symbolic link is never followed, and an
  existing file is replaced only with ``force``, and never one this run read as an input (it is
  being read).  Character devices and FIFOs (``/dev/null``, a named pipe) are written as streams;
  a FIFO nobody reads is refused at once instead of waiting for a reader.  ``executable=True``
  (launch scripts) gives the file the execute bits the umask allows, as ``chmod +x`` would.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional, Union

from gpucomm.probes.errors import InputError

# (st_dev, st_ino) of every file read_limited read in this run: an output is never written over one of the
# run's own inputs, even with --force (check_writable); the CLI starts each run with forget_inputs().
_INPUTS: set = set()


def forget_inputs() -> None:
    """A new run: no file has been read yet."""
    _INPUTS.clear()


class Refused(InputError):
    """A file refused by a rule (not a regular file, too large, outside its tree), as opposed to
    one the system could not read."""


_KIND = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind_of(mode: int) -> str:
    """``st_mode`` -> "a directory", "a FIFO (named pipe)", ..., "a regular file"."""
    for test, name in _KIND:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def read_limited(path: Union[str, os.PathLike], limit: int, label: Optional[str] = None,
                 follow: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; InputError (naming ``label``) for
    a missing, unreadable, special or larger file.  ``follow=False`` refuses a final symlink."""
    name = label if label is not None else os.fspath(path)
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise InputError("no such file", name) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", name) from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"is {kind_of(st.st_mode)}, not a regular file", name, expected="a file")
    if st.st_size > limit:
        raise Refused(f"file is {st.st_size} bytes, larger than the {limit} byte limit", name)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between stat() and open()
            raise Refused(f"is {kind_of(st.st_mode)}, not a regular file", name, expected="a file")
        _INPUTS.add((st.st_dev, st.st_ino))
        chunks, total = [], 0
        while total <= limit:
            try:
                b = os.read(fd, min(1 << 20, limit + 1 - total))
            except OSError as e:
                raise InputError(f"cannot read: {e.strerror or e}", name) from None
            if not b:
                break
            chunks.append(b)
            total += len(b)
        if total > limit:
            raise Refused(f"file is larger than the {limit} byte limit", name)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def check_writable(path: Union[str, os.PathLike], force: bool = False, label: Optional[str] = None,
                   updates_input: bool = False) -> Optional[os.stat_result]:
    """Refuse a target :func:`write_atomic` would refuse, before any work is done; returns the
    target's lstat (None when it does not exist).  A file this run read as an input is refused
    even with ``force`` (it is being read), unless the command ``updates_input`` on purpose."""
    p = os.fspath(path)
    name = label if label is not None else p
    if not p or p.endswith(os.sep):
        raise InputError("is not a file name", name, expected="a file name")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        parent = os.path.dirname(p) or "."
        if not os.path.isdir(parent):
            raise InputError(f"cannot write: {parent} is not a directory", name) from None
        return None
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", name) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError("is a symbolic link; not followed, not replaced", name,
                         expected="another file name, or remove the link first")
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory", name, expected="a file name")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return st  # a stream (/dev/null, a named pipe): written, never replaced
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {kind_of(st.st_mode)}; not replaced", name, expected="a file name")
    if (st.st_dev, st.st_ino) in _INPUTS and not updates_input:
        raise InputError("is one of this run's inputs; not replaced, even with --force", name,
                         expected="another file name for the output")
    if not force:
        raise InputError("already exists; not overwritten", name, expected="another file name, or --force to replace it")
    return st


def _write_all(fd: int, data) -> None:
    """``data`` (bytes, or a producer ``produce(write)`` handing over text piece by piece) into ``fd``."""
    if callable(data):
        with os.fdopen(os.dup(fd), "w", encoding="utf-8") as f:
            data(f.write)
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def file_mode(existing: Optional[os.stat_result], executable: bool = False) -> int:
    """The permission bits of a written file: those of the file it replaces, else 0666 less the
    umask; ``executable`` adds the execute bits the umask allows (``chmod +x``), for scripts."""
    mask = _umask()
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~mask
    return mode | (0o111 & ~mask) if executable else mode


def write_atomic(path: Union[str, os.PathLike], data, force: bool = False,
                 label: Optional[str] = None, updates_input: bool = False, executable: bool = False) -> None:
    """Write ``data`` (str, bytes, or a producer ``produce(write)`` of text, so that a large document
    is never held whole) to ``path`` through a temporary file in the same directory and a rename
    (see the module docstring).  InputError for every refusal and every failed write."""
    p = os.fspath(path)
    name = label if label is not None else p
    raw = data if callable(data) else data.encode("utf-8") if isinstance(data, str) else bytes(data)
    st = check_writable(p, force, name, updates_input)
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        try:
            # non-blocking open: a FIFO nobody reads is refused (ENXIO) instead of waiting forever;
            # once open, the writes block as usual while the reader keeps up
            fd = os.open(p, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) |
                         getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            if e.errno == errno.ENXIO:
                raise InputError("is a FIFO (named pipe) that nobody is reading", name,
                                 expected="a reader on the pipe, or a file name") from None
            raise InputError(f"cannot write: {e.strerror or e}", name) from None
        try:
            os.set_blocking(fd, True)
            _write_all(fd, raw)
        except OSError as e:
            raise InputError(f"cannot write: {e.strerror or e}", name) from None
        finally:
            os.close(fd)
        return
    parent = os.path.dirname(p) or "."
    tmp = None
    try:
        import tempfile   # only where a file is written (tempfile pulls in random)

        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(p) + ".", suffix=".gpucomm-tmp", dir=parent)
        try:
            _write_all(fd, raw)
            os.fchmod(fd, file_mode(st, executable))
            os.fsync(fd)
        finally:
            os.close(fd)
        if st is None:
            try:
                os.link(tmp, p)  # atomic "create, never replace"
            except FileExistsError:
                raise InputError("already exists; not overwritten", name,
                                 expected="another file name, or --force to replace it") from None
            except OSError:  # a filesystem without hard links
                if os.path.lexists(p):
                    raise InputError("already exists; not overwritten", name,
                                     expected="another file name, or --force to replace it") from None
                os.replace(tmp, p)
                tmp = None
        else:
            os.replace(tmp, p)
            tmp = None
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", name) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


__all__ = ["Refused", "read_limited", "write_atomic", "check_writable", "kind_of", "forget_inputs", "file_mode"]
