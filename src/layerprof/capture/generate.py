"""``profile(model, inputs, generate=N)``: a language model's ``generate()`` of N new
tokens, prefill and decode apart (see :mod:`layerprof.pivot.sections.generation`).

Two passes, as for a forward. The clean pass runs warm-up generates, then the timed
ones with nothing on the model but a logits processor that reads the clock when
each token's logits are ready: time to first token, the gaps between tokens, the
whole call. The per-layer pass runs a few generates under a Recorder, with one
forward pre-hook on the model that tags each of its forwards with its phase
(``prefill``: the forward that takes the prompt; ``decode``: one new token against
the cache) and its context position; each layer's per-forward times are then
split by phase.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError
from layerprof.load.limits import threads_problem
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.flops import Peak

if TYPE_CHECKING:
    from layerprof.capture.memory.allocator import MemoryCounter
from layerprof.capture.flops.counter import count_flops
from layerprof.capture.flops.peaks import device_peak
from layerprof.capture.memory.allocator import CudaMemory
from layerprof.capture.platform.device import device_of
from layerprof.pivot.sections.generation import (
    DECODE,
    ENCODE,
    PREFILL,
    Generation,
    KvCache,
    Phase,
    phase_views,
)
from layerprof.stats import Series

#: Generates the per-layer pass runs (each one gives one prefill and N - 1 decode steps).
LAYER_GENERATES = 3


def profile_generate(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], new_tokens: int, *,
    warmup: int, iters: int, threads: int | None = None, counter: MemoryCounter | None = None,
) -> Profile:  # fmt: skip
    """``model.generate(*args, **kwargs)`` of exactly ``new_tokens`` greedy tokens, with
    ``threads`` CPU threads (None: torch's own; restored after).

    ``counter`` is the allocator's (by default CUDA's on a CUDA model, none on CPU):
    one more generate reads its peak at the first token and at the end, for the
    memory each phase holds above the start (``Generation.peak_bytes``)."""
    import torch

    device = device_of(model)
    if counter is None and device.startswith("cuda"):
        counter = CudaMemory(device)

    if not callable(getattr(model, "generate", None)):
        raise UsageError(
            f"generate={new_tokens}: {type(model).__name__} has no generate() method (a"
            " Hugging Face causal LM has one); for a decode loop of your own, record it with"
            " layerprof.Recorder"
        )
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise UsageError(f"generate={new_tokens!r}: the number of new tokens must be >= 1")
    if threads is not None and (problem := threads_problem(threads)) is not None:
        raise UsageError(f"threads: {problem}")  # as RunOptions refuses it: torch would crash
    prompt = _prompt(args, kwargs)
    batch, prompt_tokens = int(prompt.shape[0]), int(prompt.shape[-1])  # a 2-d tensor
    was_training, before = model.training, torch.get_num_threads()
    model.eval()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                _generate(model, args, kwargs, new_tokens, None)
            ttft, itl, whole = [], [], []
            out = None
            for _ in range(max(iters, 1)):
                stamps: list[int] = []
                t0 = time.perf_counter_ns()
                out = _generate(model, args, kwargs, new_tokens, stamps)
                t1 = time.perf_counter_ns()
                if len(stamps) != new_tokens:
                    raise UsageError(
                        f"generate={new_tokens}: the model made {len(stamps)} tokens (its"
                        " generate() stopped early or ignored min_new_tokens)"
                    )
                ttft.append(stamps[0] - t0)
                itl += [b - a for a, b in itertools.pairwise(stamps)]
                whole.append(t1 - t0)
            recorded, phases = _layer_pass(model, args, kwargs, new_tokens, batch, prompt_tokens)
            phases, peak = _with_work(model, args, kwargs, phases)
            peaks = (
                _phase_peaks(model, args, kwargs, new_tokens, counter)
                if counter is not None
                else ()
            )
    finally:
        model.train(was_training)
        torch.set_num_threads(before)
    generation = Generation(
        new_tokens=new_tokens,
        prompt_tokens=prompt_tokens,
        batch=batch,
        generates=len(whole),
        ttft_ns=Series(ttft),
        itl_ns=Series(itl) if itl else None,
        generate_ns=Series(whole),
        phases=phases,
        kv_cache=_kv_cache(out),
        peak=peak,
        peak_bytes=peaks,
    )
    note = Note(
        "generation-phases",
        f"the layer table is over every forward of {LAYER_GENERATES} generates (prefill and"
        " decode together); the generation section has each phase apart",
    )
    meta = replace(
        recorded.meta, source="layerprof.generate", warmup=warmup, iters=len(whole),
        inputs=(f"input_ids: {batch}x{prompt_tokens}", f"generate {new_tokens} new tokens"),
    )  # fmt: skip
    return replace(recorded, meta=meta, generation=generation, notes=(*recorded.notes, note))


def _prompt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:  # a 2-d token tensor
    import torch

    ids = args[0] if args else kwargs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        raise UsageError(
            "generate: the prompt is the first input (or input_ids=), a batch x tokens tensor"
            f" of token ids; found {type(ids).__name__}"
        )
    return ids


def _phase_peaks(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, counter: MemoryCounter
) -> tuple[tuple[str, int], ...]:
    """Allocated memory's peak above the start in the prefill (up to the first token's
    logits) and in the decode steps after it, from the allocator's host-side counters
    (no synchronize), in a generate of its own."""
    base = counter.allocated()
    counter.reset_peak()
    first: list[int] = []

    def at_token() -> None:
        if not first:
            first.append(counter.peak() - base)
            counter.reset_peak()

    _generate(model, args, kwargs, n, None, at_token)
    decode = counter.peak() - base
    if not first:
        return ()
    out = [(PREFILL, max(first[0], 0))]
    return (*out, (DECODE, max(decode, 0))) if n > 1 else tuple(out)


def _generate(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    n: int,
    stamps: list[int] | None,
    at_token: Callable[[], None] | None = None,
) -> Any:
    """Greedy, exactly ``n`` new tokens; ``stamps`` gets the clock at each token's logits,
    ``at_token`` is called there."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Stamp(LogitsProcessor):  # type: ignore[misc]  # untyped base
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if stamps is not None:
                stamps.append(time.perf_counter_ns())
            if at_token is not None:
                at_token()
            return scores

    options: dict[str, Any] = {
        "max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
        "logits_processor": LogitsProcessorList([Stamp()]), "return_dict_in_generate": True,
    }  # fmt: skip
    config = getattr(model, "generation_config", None)
    if config is not None and getattr(config, "pad_token_id", None) is None:
        options["pad_token_id"] = getattr(config, "eos_token_id", None) or 0
    return model.generate(*args, **{**kwargs, **options})


def _layer_pass(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, batch: int, prompt: int
) -> tuple[Profile, tuple[Phase, ...]]:
    """A few generates under the Recorder, each forward tagged (phase, context position)."""
    from layerprof.capture.recording.recorder import Recorder

    tags: list[tuple[str, int]] = []
    seen = [0]  # tokens the current generate's forwards have taken so far

    def tag(module: Any, f_args: Any, f_kwargs: Any) -> None:
        ids: Any = f_kwargs.get("input_ids") if f_kwargs else None
        if ids is None and f_args:
            ids = f_args[0]
        shape = getattr(ids, "shape", None)
        length = int(shape[-1]) if shape else 1
        tags.append((PREFILL if seen[0] == 0 else DECODE, seen[0] + length))
        seen[0] += length

    handle = model.register_forward_pre_hook(tag, with_kwargs=True)
    try:
        with Recorder(model) as rec:
            for _ in range(LAYER_GENERATES):
                seen[0] = 0
                _generate(model, args, kwargs, n, None)
    finally:
        handle.remove()
    profile = rec.profile()
    of_model, iterations = rec.model_forwards()
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    return profile, _phases(
        profile, tags, of_model.tolist(), iterations, batch, prompt, encoder_decoder
    )


def _phases(
    profile: Profile, tags: list[tuple[str, int]], of_model: list[int], iterations: int,
    batch: int, prompt: int, encoder_decoder: bool,
) -> tuple[Phase, ...]:  # fmt: skip
    """Each layer's times split by the phase of each iteration: the model's forwards
    (``of_model``, in order) by their tags; an outermost call of a submodule (the
    encoder of an encoder-decoder, run by ``generate()`` before the first forward) is
    ``encode``. An encoder-decoder's prefill is its decoder's first forward (one start
    token per sequence); the prompt's tokens are the encoder's."""
    names: list[str | None] = [ENCODE] * iterations
    positions: list[float | None] = [None] * iterations
    for i, (name, position) in zip(of_model, tags, strict=False):
        names[i], positions[i] = name, float(position)
    tokens = {PREFILL: prompt * batch, DECODE: batch}
    if encoder_decoder:
        tokens = {ENCODE: prompt * batch, PREFILL: batch, DECODE: batch}
    return phase_views(profile.samples, names, positions, tokens)


def _with_work(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], phases: tuple[Phase, ...]
) -> tuple[tuple[Phase, ...], Peak | None]:
    """Each phase's layers with the FLOPs and bytes of one forward of that phase, counted
    (``layerprof.capture.flops``) over a generate of one new token (the prefill alone)
    and one of two (a prefill and one decode step: the decode's work is the difference),
    and the device's peak for the roofline."""
    import torch

    from layerprof.capture.runner import _dtype_of

    def generates(n: int) -> Callable[[], Any]:
        return lambda: _generate(model, args, kwargs, n, None)

    one, two = (count_flops(model, generates(n)) for n in (1, 2))
    work = {
        PREFILL: {p: (one.flops[p], info.bytes) for p, info in one.layers.items()},
        DECODE: {
            p: (two.flops[p] - one.flops.get(p, 0),
                info.bytes - (one.layers[p].bytes if p in one.layers else 0))
            for p, info in two.layers.items()
        },
    }  # fmt: skip
    work[ENCODE] = work[PREFILL]  # an encoder's layers run in the first generate only
    out = []
    for phase in phases:
        found = work.get(phase.name, {})
        layers = tuple(
            replace(x, flops=found[x.path][0], bytes=found[x.path][1]) if x.path in found else x
            for x in phase.layers
        )
        out.append(replace(phase, layers=layers))
    peak = device_peak(device_of(model), _dtype_of(model), torch.get_num_threads())
    return tuple(out), peak


def _kv_cache(out: Any) -> KvCache | None:
    """Bytes of the key/value cache a generate returned (a transformers Cache with
    per-layer ``keys``/``values``: dynamic or static; an encoder-decoder cache's
    self-attention part, with its cross-attention part apart), or None when it has
    none that can be read."""
    # ``cache`` since transformers 5 (``past_key_values`` warns there), before it the other
    keys = out.keys() if hasattr(out, "keys") else ()
    cache: Any = out["cache"] if "cache" in keys else getattr(out, "past_key_values", None)
    cross = 0
    if hasattr(cache, "self_attention_cache"):  # encoder-decoder (T5, BART, Whisper)
        cross_sizes = _layer_bytes(getattr(cache, "cross_attention_cache", None))
        cross = sum(cross_sizes) if cross_sizes else 0
        cache = cache.self_attention_cache
    sizes = _layer_bytes(cache)
    if sizes is None:
        return None
    positions = int(cache.get_seq_length()) if hasattr(cache, "get_seq_length") else 0
    return KvCache(layers=tuple(sizes), positions=positions, cross_bytes=cross)


def _layer_bytes(cache: Any) -> list[int] | None:
    """Keys plus values bytes of each layer of a transformers Cache, or None."""
    layers = getattr(cache, "layers", None)
    if cache is None or layers is None:
        return None
    sizes = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None or values is None or not hasattr(keys, "nbytes"):
            return None
        sizes.append(int(keys.nbytes) + int(values.nbytes))
    return sizes
