"""What one page shows: a Profile, a Run or a Diff, with its findings; typed views of it
that the section builders read."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprof.pivot.diff import Diff, GateResult
from layerprof.pivot.profile import LayerRow, Profile, Run

if TYPE_CHECKING:
    from layerprof.analysis.diagnose import Finding


@dataclass(frozen=True)
class Subject:
    """The object a page renders and what came with it.

    ``gate`` is the regression gate a diff was checked with (else the one a
    saved diff carries); ``findings`` are shown as they are (none for a diff).
    """

    obj: Profile | Run | Diff
    findings: tuple[Finding, ...] = ()
    gate: GateResult | None = None

    @property
    def profile(self) -> Profile | None:
        """The profile whose latency, layers and operators are shown: a Profile itself,
        a Run's lowest rank, none for a Diff."""
        if isinstance(self.obj, Profile):
            return self.obj
        if isinstance(self.obj, Run) and self.obj.ranks:
            return self.obj.rank()
        return None

    @functools.cached_property
    def rows(self) -> list[LayerRow]:
        """``profile.rows()``, derived once for every section that reads them."""
        return self.profile.rows() if self.profile is not None else []

    @property
    def ranks(self) -> tuple[Profile, ...]:
        """The profiles whose trace sections (steps, GPU time, kernels, ...) are shown."""
        if isinstance(self.obj, Profile):
            return (self.obj,)
        if isinstance(self.obj, Run):
            return self.obj.ranks
        return ()

    @property
    def run(self) -> Run | None:
        return self.obj if isinstance(self.obj, Run) else None

    @property
    def diff(self) -> Diff | None:
        return self.obj if isinstance(self.obj, Diff) else None

    @property
    def multi_rank(self) -> bool:
        """Whether tables name the rank of each row."""
        return len(self.ranks) > 1

    @property
    def shown_gate(self) -> GateResult | None:
        diff = self.diff
        if self.gate is not None or diff is None:
            return self.gate
        return diff.gate_result


def rank_name(p: Profile) -> str:
    return f"rank {p.rank}" if p.rank is not None else p.meta.model
