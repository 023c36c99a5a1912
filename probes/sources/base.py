"""The probe interface: each source is one module exposing ``SOURCE``, an object with
``name``, ``available(host) -> True | str`` (a reason when unavailable) and
``collect(host) -> dict`` (a partial topology document: the same shape as the final one, holding
only what this source knows, plus ``sources``/``warnings``).  :mod:`gpucomm.probes.merge` combines them.

Priority (merge precedence): explicit file 0 > nvml 10 > smi 20 > sysfs 30 > default 90.
"""
from __future__ import annotations

from typing import Protocol, Union

from gpucomm.probes.sources.host import Host


class Source(Protocol):
    name: str
    priority: int

    def available(self, host: Host) -> Union[bool, str]: ...

    def collect(self, host: Host) -> dict: ...
