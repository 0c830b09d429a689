"""The codec's registry of a profile body's sections: each entry names the Profile
fields it writes and reads, in the order their keys appear in the JSON. A new
section adds one entry here (its writer and reader in a module of this package);
``tests/render/test_renderers.py`` checks that every typed field of a Profile has one,
as it checks the console and the HTML report."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layerprof.codec.compiled import encode_compiled, read_compiled
from layerprof.codec.distributed import encode_distributed, read_distributed
from layerprof.codec.fields import Fields
from layerprof.codec.flops import encode_flops, read_flops
from layerprof.codec.generation import encode_generation, read_generation
from layerprof.codec.inputs import encode_signatures, read_signatures
from layerprof.codec.loop import encode_loop, read_loop
from layerprof.codec.memory import encode_activation_memory, read_activation_memory
from layerprof.codec.passes import encode_passes, read_passes
from layerprof.codec.repeats import encode_repeats, read_repeats
from layerprof.codec.replay import encode_replay, read_replay
from layerprof.codec.serving import encode_serving, read_serving
from layerprof.codec.stepwork import encode_device_work, read_device_work
from layerprof.codec.trace import encode_trace, read_trace
from layerprof.pivot.profile import Profile, TraceSections


@dataclass(frozen=True)
class Registered:
    """A section's writer (JSON key -> value; an empty value is left out) and reader
    (Profile field -> value), with the Profile fields they cover."""

    fields: tuple[str, ...]
    encode: Callable[[Profile, int | None], dict[str, Any]]
    read: Callable[[Fields], dict[str, Any]]


def _one(
    key: str, field: str, encode: Callable[[Any], Any], read: Callable[[Any], Any]
) -> Registered:
    """A section under one JSON key, read from that key's object."""
    return Registered(
        (f"Profile.{field}",),
        lambda p, top: {key: encode(_section(p, field))},
        lambda f: {field: read(f.obj(key))},
    )


def _section(p: Profile, field: str) -> Any:
    """A Profile's field, or its trace's section of that name (``profile.trace.serving``)."""
    return getattr(p.trace if field in _TRACE_SECTIONS else p, field)


_TRACE = ("source", "steps", "devices", "kernels", "kinds", "memcpy", "launches", "memory")
_DISTRIBUTED = ("breakdown", "communication", "queues", "memory_timeline")

SECTIONS: tuple[Registered, ...] = (
    Registered(tuple(f"Profile.{x}" for x in (*_TRACE, "annotations")), encode_trace, read_trace),
    Registered(
        ("Profile.signatures",),
        lambda p, top: {"signatures": encode_signatures(p.signatures)},
        lambda f: {"signatures": read_signatures(f)},
    ),
    _one("flops", "flops", encode_flops, read_flops),
    _one("passes", "passes", encode_passes, read_passes),
    _one("repeats", "repeats", encode_repeats, read_repeats),
    _one(
        "activation_memory", "activation_memory", encode_activation_memory, read_activation_memory
    ),
    _one("loop", "loop", encode_loop, read_loop),
    _one("generation", "generation", encode_generation, read_generation),
    _one("graph_replay", "graph_replay", encode_replay, read_replay),
    _one("device_work", "device_work", encode_device_work, read_device_work),
    _one("serving", "serving", encode_serving, read_serving),
    Registered(("Profile.compiled",), lambda p, top: encode_compiled(p.compiled), read_compiled),
    Registered(
        tuple(f"Profile.{x}" for x in _DISTRIBUTED),
        lambda p, top: encode_distributed(p),
        read_distributed,
    ),
)


def encode_sections(p: Profile, top: int | None) -> dict[str, Any]:
    """The sections a profile has, in registry order (empty ones are left out)."""
    out: dict[str, Any] = {}
    for section in SECTIONS:
        out.update(section.encode(p, top))
    return {k: v for k, v in out.items() if v}


def read_sections(f: Fields) -> dict[str, Any]:
    """Every registered section of a profile body, by Profile field (the trace's sections
    as one ``trace`` value: an empty one for a profile without a trace)."""
    out: dict[str, Any] = {}
    for section in SECTIONS:
        out.update(section.read(f))
    trace = {k: out.pop(k) for k in _TRACE_SECTIONS if k in out}
    if trace:
        out["trace"] = TraceSections(**trace)
    return out


_TRACE_SECTIONS = tuple(f.name for f in dataclasses.fields(TraceSections))
