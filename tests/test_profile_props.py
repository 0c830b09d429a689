"""Property tests: the derived tree adds up for any per-iteration samples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta

PATHS = ["", "a", "b", "a.x", "a.y", "b.z"]
PARENT = {"": None, "a": "", "b": "", "a.x": "a", "a.y": "a", "b.z": "b"}


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    n = draw(st.integers(1, 7))
    present = [p for p in PATHS if p == "" or draw(st.booleans())]
    order = draw(st.permutations(present))
    samples = {}
    for path in present:
        if draw(st.booleans()) or path == "":
            selfs = tuple(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)))
            calls = draw(st.sampled_from([1.0, 2.0, 0.5]))
            samples[path] = LayerSamples(selfs, selfs, calls, calls_vary=calls == 0.5)
    layers = tuple(LayerInfo(p, "T", PARENT[p]) for p in order)
    return Profile(meta=Meta(model="m"), layers=layers, samples=samples)


@settings(max_examples=150, deadline=None)
@given(profiles())
def test_tree_adds_up_and_shares_sum_to_one(prof: Profile) -> None:
    roots = prof.tree()
    for root in roots:
        root.self_check(tolerance_ns=1e-6)
    rows = prof.rows()
    assert all(r.self_ns >= 0 and r.total_ns >= r.self_ns for r in rows)
    total = sum(r.row.total_ns for r in roots)
    if total > 0:
        assert abs(sum(r.row.share for r in roots) - 1.0) < 1e-9


@settings(max_examples=50, deadline=None)
@given(profiles())
def test_json_round_trip_keeps_rows(prof: Profile) -> None:
    again = Profile.from_dict(prof.to_dict(), source="mem")
    for a, b in zip(prof.rows(), again.rows(), strict=True):
        assert a.path == b.path and abs(a.total_ns - b.total_ns) <= 1e-6 * max(1, a.total_ns) + 1


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.integers(min_value=0, max_value=2**52), min_size=1, max_size=60))
def test_series_median_alone_equals_the_summary_median(values: list[int]) -> None:
    """Series.median skips the whole summary when nothing else is asked: same number."""
    import numpy as np

    from layerprof.stats import Series, Summary

    array = np.asarray(values, dtype=np.int64)
    assert Series.of(array).median == Summary.of(array).median == float(np.median(array))


def test_median_interval_covers_the_true_median_about_95_percent() -> None:
    """Order-statistic CI of the median (stats.median_ci): coverage on skewed samples
    with a known median, seeded, for the sample counts runs use."""
    import numpy as np

    from layerprof.stats import Summary

    rng = np.random.default_rng(0)
    for n in (10, 20, 50, 200):
        draws = rng.lognormal(mean=0.0, sigma=0.5, size=(2000, n)) * 1e6  # true median 1e6
        covered = 0
        for row in draws:
            s = Summary.of(row)
            assert s.ci_low is not None and s.ci_high is not None
            covered += s.ci_low <= 1e6 <= s.ci_high
        assert 0.93 <= covered / len(draws) <= 0.995, (n, covered)
