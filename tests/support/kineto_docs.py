"""Kineto (Chrome trace) documents built by hand: spans, GPU ops, [memory] events and
whole distributed ranks whose numbers are worked out in the docstrings."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

from layerprof.traceformat import STEP_PREFIX

S = 10  # rank_doc's times are in units of 10 µs, so a step is 1 ms


def span(cat: str, name: str, ts: float, dur: float, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    raw = orjson.dumps(doc)
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    return path


def gpu_op(cat: str, name: str, ts: float, dur: float, corr: int, device: int, stream: int,
           **args: Any) -> dict[str, Any]:  # fmt: skip
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": device, "stream": stream, "correlation": corr, **args}}  # fmt: skip


def memory(ts: float, nbytes: int, total: int, device: int) -> dict[str, Any]:
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Device Type": 1, "Device Id": device, "Bytes": nbytes,
                     "Total Allocated": total}}  # fmt: skip


COMM_ARGS = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
             "dtype": "Float", "Group size": 2, "Process Group Name": "0"}  # fmt: skip


def step(
    n: int, t0: float, rank: int, late: float, kind: str = "allreduce"
) -> list[dict[str, Any]]:
    """One 100-unit step (units of S µs, relative to t0) on ``rank``:

    0   ProfilerStep#n                    100
    5   aten::mm                          20    launch 10..12 -> gemm on stream 7 at 20..50
    30  c10d::allreduce_                  10
    31    record_param_comms (args)       8     launch 32..34 -> nccl kernel on stream 99
                                                at 40+late..70 (ends together on every rank)
    72  cudaMemcpyAsync                   1     -> HtoD memcpy 75..80
    80  cudaDeviceSynchronize             4
    85  enumerate(DataLoader)#...__next__ 10

    Rank 0 (late 0): overlap [40,50) 10, compute [20,40) 20, comm [50,70) 20,
    memcpy 5, runtime [10,12)+[72,73)+[80,84) 7 (the launch at 32 runs beside a
    kernel), dataloader 10, cpu [5,10)+[12,20) 13, idle [0,5)+[70,72)+[73,75)
    +[84,85)+[95,100) 15: 100. Rank 1 (late 10): overlap 0, compute 30, comm 20.
    """
    c = 1000 * n + 10
    args = {**COMM_ARGS, "Collective name": kind}
    name = "ncclKernel_AllReduce_RING_LL_Sum_float" if kind == "allreduce" else "ncclKernel_Broadcast_RING_LL_Sum_int8_t"  # fmt: skip
    d = rank

    def at(x: float) -> float:
        return t0 + x * S

    return [
        span("user_annotation", f"{STEP_PREFIX}{n}", at(0), 100 * S),
        span("cpu_op", "aten::mm", at(5), 20 * S, **{"External id": c}),
        span("cuda_runtime", "cudaLaunchKernel", at(10), 2 * S, correlation=c),
        gpu_op("kernel", "gemm", at(20), 30 * S, c, d, 7),
        span("cpu_op", "c10d::allreduce_", at(30), 10 * S, **{"External id": c + 1}),
        span("cpu_op", "record_param_comms", at(31), 8 * S, **{"External id": c + 2, **args}),
        span("cuda_runtime", "cudaLaunchKernel", at(32), 2 * S, correlation=c + 1),
        gpu_op("kernel", name, at(40 + late), (30 - late) * S, c + 1, d, 99),
        span("cuda_runtime", "cudaMemcpyAsync", at(72), 1 * S, correlation=c + 2),
        gpu_op(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            at(75),
            5 * S,
            c + 2,
            d,
            7,
            bytes=1 << 20,
        ),
        span("cuda_runtime", "cudaDeviceSynchronize", at(80), 4 * S),
        span(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            at(85),
            10 * S,
        ),
        memory(at(6), 1000, 1000, d),
        memory(at(33), 4000, 5000, d),
        memory(at(90), -5000, 0, d),
    ]


def rank_doc(rank: int, *, late: float, clock: float = 0.0, steps: int = 2, world: int = 2,
             kind: str = "allreduce") -> dict[str, Any]:  # fmt: skip
    """Steps 1..steps at 1000 µs apart; ``clock`` shifts the rank's whole clock."""
    events: list[dict[str, Any]] = []
    for n in range(1, steps + 1):
        events += step(n, clock + 1000 * n, rank, late, kind)
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}
