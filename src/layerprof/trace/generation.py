"""A trace of a ``generate()``: its forwards split into prefill and decode.

Where each step of the trace is one forward of the model (no ``prof.step()``:
the outermost module spans; or the user's ``record_function`` marks), each
step's phase is, in order of precedence:

1. its name, when it says ``prefill`` or ``decode`` (``record_function("decode")``);
2. the token ids its first ``aten::embedding`` took (their shape is read even
   without ``record_shapes`` grouping; the trace needs ``record_shapes=True``):
   more than one token per sequence is a prefill, one is a decode step, except
   the trace's first forward, which is the prefill of a one-token prompt.

The phase is decided and the section assembled by the same functions as the
Recorder's and ``--generate``'s (``layerprof.pivot.sections.generation``:
``tag_forwards``, ``assemble_generation``). There is no time to first token (the
trace does not see the ``generate`` call begin); the inter-token latency is the
time from one forward's end to the next decode forward's end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.pivot.sections.trace import Steps
from layerprof.stats import Series
from layerprof.trace.events import OP, TOKEN_OP, EventTables

if TYPE_CHECKING:
    from layerprof.pivot.sections.generation import Generation

_NAMED = re.compile(r"\b(prefill|decode)\b", re.IGNORECASE)
_DIMS = re.compile(r"\[(\d+), (\d+)\]")


def trace_generation(
    tables: EventTables, steps: Steps, samples: Mapping[str, Any]
) -> Generation | None:
    """The generation section of a trace whose steps are a generate's forwards, or None
    (steps that are not forwards, or no step is a decode step)."""
    done = steps.complete
    if len(done) < 2:
        return None
    ops = _TokenOps(tables, steps.thread)
    if not len(ops.start) and not any(_NAMED.search(s.name) for s in done):
        return None  # no step can be told a phase: neither a name nor a token op
    # here, not at the top: a trace that is no generate never creates these types
    # (each dataclass costs ~1 ms of `layerprof analyze`'s start-up)
    from layerprof.pivot.sections.generation import (
        DECODE,
        PREFILL,
        assemble_generation,
        is_generation,
        tag_forwards,
    )

    # one generate as far as the trace tells: its first forward is the prefill
    tags = tag_forwards([(_named(s.name), ops.first(s.start_ns, s.end_ns)) for s in done])
    if not is_generation(tags):  # a step's name says prefill or decode, nothing else
        return None
    names = [t[0] if t is not None else None for t in tags]
    itl = [
        done[i].end_ns - done[i - 1].end_ns
        for i in range(1, len(done))
        if names[i] == DECODE and names[i - 1] in (PREFILL, DECODE)
    ]
    generation = assemble_generation(samples, tags)
    return replace(generation, itl_ns=Series(itl)) if itl else generation


def _named(name: str) -> str | None:
    """The phase a step's name says (``record_function("decode")``), or None."""
    named = _NAMED.search(name)
    return named.group(1).lower() if named else None


class _TokenOps:
    """The token-embedding ops of the steps' thread that kept their input shapes, in
    time order."""

    def __init__(self, tables: EventTables, thread: int | None) -> None:
        host = tables.host
        self.shapes = tables.shapes
        token = tables.names.index(TOKEN_OP) if TOKEN_OP in tables.names else -1
        mask = (host.name == token) & (host.kind == OP) & (host.shape >= 0)
        if thread is not None:
            mask &= host.thread == thread
        idx = np.flatnonzero(mask)
        order = np.argsort(host.start[idx], kind="stable")
        self.start = host.start[idx][order]
        self.shape = host.shape[idx][order]

    def first(self, start: int, end: int) -> tuple[int, int] | None:
        """(tokens, batch) of the first such op in [start, end]: its second input, a
        batch x tokens tensor of ids."""
        k = int(np.searchsorted(self.start, start))
        if k >= len(self.start) or self.start[k] > end:
            return None
        dims = _DIMS.findall(self.shapes[int(self.shape[k])])
        if len(dims) < 2:
            return None
        batch, tokens = (int(d) for d in dims[1])
        return tokens, batch
