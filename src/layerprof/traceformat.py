"""Names of the trace format that layerprof writes and reads: one spelling each.

A torch.profiler (Kineto) trace is JSON; layerprof opens ``layer:{path}``
ranges around module calls while it records (capture/), writes them back as
``layerprof_layer`` lanes with ``ProfilerStep#N`` spans when it exports a trace
(render/chrome.py), and finds both again when it reads one (trace/). Those
names are a wire format shared by the three: they live here, at the bottom
layer, so a reader and the writer cannot drift apart. This module imports
nothing of layerprof.
"""

from __future__ import annotations

__all__ = [
    "CPU_OP",
    "CUDA_DRIVER",
    "CUDA_RUNTIME",
    "EVENTS_KEY",
    "GPU_MEMCPY",
    "GPU_MEMSET",
    "GPU_STEP_SOURCE",
    "KERNEL_CATEGORY",
    "LAYER_CATEGORY",
    "LAYER_RANGE",
    "MODULE_TYPES_KEY",
    "SOURCE_PID",
    "SOURCE_TID",
    "STEP_PREFIX",
    "STEP_SOURCE",
    "USER_ANNOTATION",
]

#: The ``record_function`` range layerprof's hooks open around a module call:
#: ``layer:`` + the module's qualified path (``layer:`` alone is the root module).
LAYER_RANGE = "layer:"
#: Category of the layer lanes layerprof writes into an exported trace; unknown to
#: other trace readers, so never counted as an operator. Also the name of that
#: module source and step source (``TraceSource``), as saved profiles spell it.
LAYER_CATEGORY = "layerprof_layer"
#: ``torch.profiler``'s step spans are ``ProfilerStep#N`` (``prof.step()``).
STEP_PREFIX = "ProfilerStep#"
#: The step source that finds those spans on a host thread (``Steps.source``).
STEP_SOURCE = "ProfilerStep"
#: The step source that finds them on a device timeline (``gpu_user_annotation``).
GPU_STEP_SOURCE = "GPU ProfilerStep"

#: The top-level key holding the event list of a Chrome trace.
EVENTS_KEY = "traceEvents"
#: In a layer lane's ``args``: the thread (pid, tid) the layer span was recorded on.
SOURCE_PID = "source pid"
SOURCE_TID = "source tid"
#: In the ``layerprof`` top-level object of an exported trace: path -> module class.
MODULE_TYPES_KEY = "module_types"

# Kineto event categories that capture and trace/ both name.
CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"
KERNEL_CATEGORY = "kernel"  # (trace/events.py's KERNEL is the kind it maps to)
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
