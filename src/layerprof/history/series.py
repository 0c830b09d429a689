"""The newest runs of one environment as series: one value per run, per figure and layer.

A window holds, oldest run first, each run-level figure (``latency``...) and each
layer's self and total medians as rows of a matrix (NaN where a run lacks the
layer). ``common_factor`` is the run-to-run drift all layers share: a process
that runs 20 % slower scales every layer alike, so dividing it out leaves what
changed in a layer against the rest of the model (docs/history.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprof.history.records import Environment, StoredRun

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]

#: Fewest layers whose common drift is divided out (fewer: the raw times are tested).
MIN_LAYERS_FOR_FACTOR = 3


@dataclass(frozen=True, eq=False)  # arrays inside: compared by identity
class Window:
    """The newest ``len(runs)`` runs of ``env`` (``total_runs`` in all), oldest first.

    ``figures`` maps a figure's name to its value per run (ns, NaN where absent);
    ``self_ns``/``total_ns`` (and ``device_*`` where any run recorded device
    times) are ``(len(paths), len(runs))`` matrices of ns per forward.
    """

    env: Environment
    runs: tuple[StoredRun, ...]
    total_runs: int
    figures: Mapping[str, Floats]
    paths: tuple[str, ...]
    self_ns: Floats
    total_ns: Floats
    device_self_ns: Floats | None = None
    device_total_ns: Floats | None = None

    def layer_times(self, clock: str) -> Floats | None:
        """The self-time matrix of ``clock`` (``host`` or ``device``; None: not recorded)."""
        return self.self_ns if clock == "host" else self.device_self_ns


def log_times(values: Floats) -> Floats:
    """Natural logs of times, a time of 0 taken as 1 ns (a log needs a positive value)."""
    import numpy as np

    return np.log(np.maximum(values, 1.0))  # type: ignore[no-any-return]


def shares(times: Floats) -> Floats:
    """Each layer's median share of its run's summed self time (0 where never seen)."""
    import numpy as np

    sums = np.nansum(times, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = times / np.where(sums > 0, sums, np.nan)
    out = np.zeros(times.shape[0])
    seen = ~np.all(np.isnan(frac), axis=1)
    out[seen] = np.nanmedian(frac[seen], axis=1)
    return out


class CommonFactor:
    """Per run, the log drift the layers ``rows`` (indices into ``times``) share: the
    median over those layers of each one's log time less its own level.

    A layer's level is its median over the window, or, for a layer known to have
    changed (``steps``: the runs where its segments start), the median of each
    segment: a layer that got slower is not drift, and left in it would move the
    median and so every other layer (one layer of six up 50 % made the others read
    1 % slower after it).

    ``of(row)`` is the drift a layer is divided by: with few layers, the median over
    the *other* layers (a layer's own step would otherwise leak into its drift and
    shrink: one layer of six shifted by 15 % read as 12.5 %); with many, one median
    for all, where one layer moves it by next to nothing.
    """

    LEAVE_ONE_OUT_UP_TO = 64

    def __init__(
        self,
        times: Floats,
        rows: npt.NDArray[np.int64],
        steps: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        import numpy as np

        self.rows = [int(r) for r in rows]
        logs = log_times(times[rows])
        centred = logs - np.nanmedian(logs, axis=1)[:, None]
        for i, row in enumerate(self.rows):
            if steps and steps.get(row):
                centred[i] = _less_levels(logs[i], steps[row])
        self._centred = centred
        self._shared = self._median(centred)

    @staticmethod
    def _median(centred: Floats) -> Floats:
        import numpy as np

        present = ~np.all(np.isnan(centred), axis=0)
        factor = np.zeros(centred.shape[1])
        factor[present] = np.nanmedian(centred[:, present], axis=0)
        return factor

    def of(self, row: int) -> Floats:
        import numpy as np

        if len(self.rows) > self.LEAVE_ONE_OUT_UP_TO or row not in self.rows:
            return self._shared
        keep = np.array([i for i, r in enumerate(self.rows) if r != row])
        return self._median(self._centred[keep])


def _less_levels(logs: Floats, starts: Sequence[int]) -> Floats:
    """``logs`` less the median of each segment (segments start at 0 and ``starts``)."""
    import numpy as np

    out: Floats = logs.copy()
    edges = [0, *starts, len(logs)]
    for a, b in itertools.pairwise(edges):
        part = logs[a:b]
        if np.any(~np.isnan(part)):
            out[a:b] = part - np.nanmedian(part)
    return out


def common_factor(
    times: Floats,
    rows: npt.NDArray[np.int64],
    steps: Mapping[int, Sequence[int]] | None = None,
) -> CommonFactor | None:
    """The drift of the layers ``rows`` share (None with fewer than
    ``MIN_LAYERS_FOR_FACTOR``: too few to tell drift from change)."""
    if len(rows) < MIN_LAYERS_FOR_FACTOR:
        return None
    return CommonFactor(times, rows, steps)
