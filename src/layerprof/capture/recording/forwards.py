"""A record's samples per forward of the model: ``generate()`` runs an
encoder-decoder's encoder outside the model's forward, an outermost call that would
otherwise read as an iteration of its own (the root then showed 0.97 calls). Shared by
``--generate`` (``capture.generate``) and a Recorder around the user's own generate()."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from layerprof.capture.recording.layertimes import CallTable
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerSamples


def model_forwards(tables: Sequence[CallTable], root: int | None) -> tuple[Any, int]:
    """Which iterations of ``tables`` are forwards of the model (outermost calls of the
    layer ``root``), as indices in order, and how many iterations they hold."""
    import numpy as np

    outer = [t.layer[t.level == 1] for t in tables]
    firsts = np.concatenate(outer) if outer else np.zeros(0, dtype=np.int64)
    of_model = np.flatnonzero(firsts == root) if root is not None else firsts[:0]
    return of_model, len(firsts)


def per_forward_noted(recorded: Profile, of_model: Sequence[int]) -> Profile:
    """``per_forward``, with a note saying so when a call was folded."""
    folded, done = per_forward(recorded, of_model)
    if not done:
        return folded
    return folded.with_notes(
        Note(
            "generation-per-forward",
            "the layer table is per forward of the model: the encoder, which generate()"
            " runs before the first forward, is counted in that forward (its calls are"
            " a fraction of one per forward)"
            + ("; the generation section has each phase apart" if recorded.generation else ""),
        )
    )


def per_forward(recorded: Profile, of_model: Sequence[int]) -> tuple[Profile, bool]:
    """The per-layer pass's samples per forward of the model: an outermost call of a
    submodule (the encoder ``generate()`` runs apart) is summed into the model's next
    forward, so that each iteration is one forward and the root has 1 call (T5's read
    0.97: its encoder's call was an iteration of its own). True when one was folded."""
    import numpy as np

    samples = recorded.samples
    lengths = {len(s.total_ns.values) for s in samples.values() if s.total_ns.values is not None}
    if len(lengths) != 1 or not of_model:
        return recorded, False
    (iterations,) = lengths
    forwards = len(of_model)
    if forwards == iterations or any(
        s.total_ns.values is None or s.self_ns.values is None for s in samples.values()
    ):
        return recorded, False
    # iteration -> the forward it belongs to: its own, or the next one (the last, after it)
    group = np.minimum(np.searchsorted(np.asarray(of_model), np.arange(iterations)), forwards - 1)

    def summed(series: Any) -> Any:
        if series is None or series.values is None:
            return None
        values = np.asarray(series.values, dtype=np.int64)
        return np.bincount(group, weights=values, minlength=forwards).round().astype(np.int64)

    folded = np.ones(iterations, dtype=bool)
    folded[np.asarray(of_model)] = False
    out = {}
    for path, s in samples.items():
        calls = round(s.calls * iterations / forwards, 9)
        total = summed(s.total_ns)
        # one call per forward on average and time in every forward: exactly one each
        vary = not (calls == 1 and bool((total > 0).all())) and (
            s.calls_vary or calls != round(calls) or bool(s.total_ns.values[folded].any())
        )
        out[path] = LayerSamples(
            total, summed(s.self_ns), calls, vary,
            summed(s.device_total_ns), summed(s.device_self_ns),
            summed(s.backward_total_ns), summed(s.backward_self_ns),
        )  # fmt: skip
    overhead = recorded.overhead
    if overhead is not None:  # calls per forward of the model, the encoder's share in it
        overhead = replace(overhead, calls_per_forward=sum(x.calls for x in out.values()))
    return replace(recorded, samples=out, overhead=overhead), True
