"""kernel_kind's fast ASCII path says what the case-insensitive rule says, for any name."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.trace.events import KERNEL, MEMCPY
from layerprof.trace.gpu import _COMM, kernel_kind

WORDS = ["NCCL", "ncclDevKernel_AllReduce", "c10d", "All_Gather", "reduceScatter", "ALLTOALL"]
ASCII_NAME = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
# letters whose case folding differs between str.lower and re's IGNORECASE: a name
# holding one takes the slow path
ANY_NAME = st.text(st.sampled_from("aclnrdugestoK\u017f\u212a\u0130\u00df_10"), max_size=30)


def slow_kind(name: str) -> str:
    return "communication" if _COMM.search(name) else "compute"


@settings(deadline=None, max_examples=300)
@given(st.lists(st.one_of(ASCII_NAME, st.sampled_from(WORDS)), max_size=4))
def test_ascii_names_agree(parts: list[str]) -> None:
    name = "".join(parts)
    assert kernel_kind(name, KERNEL) == slow_kind(name)


@settings(deadline=None, max_examples=300)
@given(ANY_NAME)
def test_other_names_agree(name: str) -> None:
    assert kernel_kind(name, KERNEL) == slow_kind(name)


def test_known_names() -> None:
    templated = "void at::native::" + "Foo<float, 4>::" * 100 + "kernel"
    assert kernel_kind(templated, KERNEL) == "compute"
    assert kernel_kind("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", KERNEL) == "communication"
    assert kernel_kind("reduce_\u017fcatter", KERNEL) == "communication"  # re's folding kept
    assert kernel_kind("Memcpy HtoD", MEMCPY) == "memory"
