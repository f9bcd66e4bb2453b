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
    """`with memory_peak() as peak: ...`, then `peak.bytes` (also when the block raised): the peak
    above what was held at its start. Tracing already on (PYTHONTRACEMALLOC, an outer block) stays on."""
    peak = Peak()
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    else:
        tracemalloc.start()
    held = tracemalloc.get_traced_memory()[0]
    try:
        yield peak
    finally:
        peak.bytes = tracemalloc.get_traced_memory()[1] - held
        if not tracing:
            tracemalloc.stop()
