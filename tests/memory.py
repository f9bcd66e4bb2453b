"""The most memory Python held at once inside a block (tracemalloc): structural memory checks that do
not depend on how loaded the machine is."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Peak:
    bytes: int = 0


@contextmanager
def memory_peak() -> Iterator[Peak]:
    """`with memory_peak() as peak: ...`, then `peak.bytes` (also when the block raised)."""
    peak = Peak()
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
