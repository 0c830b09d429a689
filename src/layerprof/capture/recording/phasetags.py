"""The phase of each forward of the model a Recorder saw (prefill, decode or a named one).

A generate loop's forwards are told apart by their token ids (prefill: more than one
token, decode: one) or by the name ``Recorder.phase()`` set; ``Recorder._generation``
splits the samples by them. They are kept as three parallel arrays from the first
tagged forward on (phase number, tokens, batch: 20 bytes a forward, inside the
24-byte budget of a recorded call), not a dict of tuples (~130-175 bytes a forward
of a token-id model, kept also where no generation section could be made).
"""

from __future__ import annotations

from array import array

#: A phase name and the forward's tokens and batch (0, 0 when its input is no token ids).
Tag = tuple[str, int, int]

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
