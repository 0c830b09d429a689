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


@settings(max_examples=60, deadline=None)
@given(profiles(), profiles())
def test_rows_follow_every_change_of_layers_or_samples(prof: Profile, other: Profile) -> None:
    """``rows()`` keeps what it derived while the layers and samples are the same
    objects: whatever is set or replaced since, the rows are those of a Profile built
    afresh from the same fields."""

    def fresh(p: Profile) -> list[object]:
        return Profile(meta=p.meta, layers=p.layers, samples=dict(p.samples)).rows()

    first = prof.rows()
    first.clear()  # a caller's list is its own
    assert prof.rows() == fresh(prof)
    prof.layers = other.layers  # a field set anew
    assert prof.rows() == fresh(prof)
    for path, samples in other.samples.items():  # the dict edited in place
        prof.samples[path] = samples
        assert prof.rows() == fresh(prof)
    if prof.samples:
        del prof.samples[next(iter(prof.samples))]
        assert prof.rows() == fresh(prof)


def test_derived_rows_are_not_a_field_nor_pickled() -> None:
    import dataclasses
    import pickle

    prof = Profile(
        meta=Meta(model="m"),
        layers=(LayerInfo("", "T", None),),
        samples={"": LayerSamples((5,), (5,), 1.0)},
    )
    rows = prof.rows()
    copy = pickle.loads(pickle.dumps(prof))
    assert "_rows_cache" in prof.__dict__ and "_rows_cache" not in copy.__dict__
    assert copy == prof and copy.rows() == rows
    assert dataclasses.replace(prof).rows() == rows
