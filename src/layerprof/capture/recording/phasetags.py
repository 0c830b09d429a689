"""The phase of each forward of the model a Recorder saw (prefill, decode or a named one).

A generate's forwards are told apart by their token ids or by the name
``Recorder.phase()`` set; the rule and the section's assembly are
``layerprof.pivot.sections.generation``'s (``tag_forwards``, ``assemble_generation``),
shared with ``--generate`` and a trace. ``ForwardPhases`` is the Recorder's part: it
reads each forward's ids as it runs, keeps what it saw, and decides the phases when a
profile is made, once every forward's place among the record's iterations is known
(an encoder-decoder's encoder, run apart before a generate's first forward, begins
that generate). What it saw is kept as three parallel arrays from the first
forward of ids or with a phase named on (phase number, tokens, batch: 20 bytes a
forward, inside the 24-byte budget of a recorded call), not a dict of tuples (~130-175
bytes a forward of a token-id model, kept also where no generation section could be
made).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError
from layerprof.pivot.sections.generation import (
    ENCODE,
    Generation,
    PhaseTag,
    assemble_generation,
    is_generation,
    tag_forwards,
    token_ids,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: A phase name and the forward's tokens and batch (0, 0 when its input is no token ids).
Tag = tuple[str, int, int]

#: The name kept for a forward of token ids with no phase named: its phase is decided
#: from its ids (``Recorder.phase`` refuses an empty name, so no named phase has it).
AUTO = ""

_UNTAGGED = -1


class PhaseTags:
    """Tags by the number of the model's forward; forwards before the first tag cost
    nothing, and later untagged ones hold a placeholder."""

    def __init__(self) -> None:
        self.names: list[str] = []  # phase number -> name
        self._numbers: dict[str, int] = {}
        self._first = 0  # the forward the arrays start at
        self._phase = array("i")  # phase number per forward (_UNTAGGED: none)
        self._tokens = array("q")
        self._batch = array("q")

    def clear(self) -> None:
        """Forget every tag (``Recorder.reset``)."""
        self.names, self._numbers, self._first = [], {}, 0
        for column in (self._phase, self._tokens, self._batch):
            del column[:]

    def __len__(self) -> int:
        """Tagged forwards."""
        return sum(1 for p in self._phase if p != _UNTAGGED)

    @property
    def nbytes(self) -> int:
        """Bytes the per-forward arrays hold (their items, not the arrays' slack)."""
        return sum(a.itemsize * len(a) for a in (self._phase, self._tokens, self._batch))

    def add(self, forward: int, name: str, tokens: int, batch: int) -> None:
        """Tag the model's forward number ``forward`` (numbers only grow)."""
        number = self._numbers.get(name)
        if number is None:
            number = self._numbers[name] = len(self.names)
            self.names.append(name)
        if not self._phase:
            self._first = forward
        gap = forward - self._first - len(self._phase)
        if gap > 0:  # untagged forwards since the last tag
            self._phase.extend([_UNTAGGED] * gap)
            self._tokens.extend([0] * gap)
            self._batch.extend([0] * gap)
        self._phase.append(number)
        self._tokens.append(tokens)
        self._batch.append(batch)

    def get(self, forward: int) -> Tag | None:
        k = forward - self._first
        if not 0 <= k < len(self._phase) or self._phase[k] == _UNTAGGED:
            return None
        return self.names[self._phase[k]], self._tokens[k], self._batch[k]

    def values(self) -> list[Tag]:
        """Every tag, in the forwards' order."""
        return [
            (self.names[p], t, b)
            for p, t, b in zip(self._phase, self._tokens, self._batch, strict=True)
            if p != _UNTAGGED
        ]


class ForwardPhases:
    """The Recorder's generate phases: each forward's token ids and the phase named with
    ``Recorder.phase()``, and the generation section they make."""

    def __init__(self) -> None:
        self.named: str | None = None  # the phase Recorder.phase() set
        self.seen = PhaseTags()  # forward of the model -> (name or AUTO, tokens, batch)
        self._starts: list[int] = []  # forwards that begin a generate (begin_generate)
        self._starting = False

    def clear(self) -> None:
        """Forget every forward seen (``Recorder.reset``, ``stream``); the named phase stays."""
        self.seen.clear()
        self._starts, self._starting = [], False

    def begin_generate(self) -> None:
        """The next forward begins a generate: its prefill, a one-token prompt too, which its
        ids cannot tell from a decode step (``--generate`` calls it before each one), and
        the record is a generation whatever its forwards."""
        self._starting = True

    def see(self, forward: int, args: Any, kwargs: Any) -> None:
        """Keep what the model's forward number ``forward`` shows: its token ids (an
        encoder-decoder's ``decoder_input_ids``, else ``input_ids``, else the first input)
        and the named phase; nothing for a forward with neither."""
        if self._starting:
            self._starts.append(forward)
            self._starting = False
        ids = kwargs.get("decoder_input_ids") if kwargs else None
        if ids is None and kwargs:
            ids = kwargs.get("input_ids")
        if ids is None and args:
            ids = args[0]
        dtype = getattr(ids, "dtype", None)
        found = token_ids(
            getattr(ids, "shape", None), not getattr(dtype, "is_floating_point", True)
        )
        if self.named is None and found is None:
            return
        tokens, batch = found if found is not None else (0, 0)
        self.seen.add(forward, AUTO if self.named is None else self.named, tokens, batch)

    def phase(self, name: str | None) -> PhaseScope:
        """``Recorder.phase``: name the phase of the forwards from now on."""
        if name is not None and (not isinstance(name, str) or not name):
            raise UsageError(f"Recorder.phase({name!r}): a phase is a non-empty name or None")
        previous, self.named = self.named, name
        return PhaseScope(self, previous)

    def generation(
        self, samples: Mapping[str, Any], of_model: Sequence[int], iterations: int, *,
        encoder_decoder: bool,
    ) -> Generation | None:  # fmt: skip
        """The generation section of per-iteration ``samples``, or None when the forwards
        make none (``is_generation``). ``of_model``: the iterations that are the model's
        forwards, in order; an iteration between them is an outermost call of a submodule,
        an encoder-decoder's encoder (``encode``), which begins a generate."""
        starts = set(self._starts)
        for k, i in enumerate(of_model):
            if i and (k == 0 or of_model[k - 1] != i - 1):
                starts.add(k)  # after a call outside the model's forward
        seen = []
        for k in range(len(of_model)):
            kept = self.seen.get(k)
            seen.append(None if kept is None else (kept[0] or None, (kept[1], kept[2])))
        tags = tag_forwards(seen, starts)
        if not (self._starts or is_generation(tags)):
            return None
        outside: PhaseTag | None = (ENCODE, 0, 0) if encoder_decoder else None
        per_iteration: list[PhaseTag | None] = [outside] * iterations
        for i, tag in zip(of_model, tags, strict=True):
            per_iteration[i] = tag
        return assemble_generation(samples, per_iteration)


class PhaseScope:
    """What ``Recorder.phase()`` returns: ``with`` puts the previous phase back."""

    def __init__(self, phases: ForwardPhases, previous: str | None) -> None:
        self._phases, self._previous = phases, previous

    def __enter__(self) -> PhaseScope:
        return self

    def __exit__(self, *exc: object) -> None:
        self._phases.named = self._previous
