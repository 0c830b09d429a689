"""FLOP formulas per ATen operator: torch's own, the ones torch lacks, and per-element counts.

Three kinds of rule (conventions in docs/flops.md and ``layerprof.pivot.sections.flops``):

* **tensor** formulas, 1 multiply-accumulate = 2 FLOPs, bias adds not counted:
  torch's ``torch.utils.flop_counter`` registry (mm, addmm, bmm, baddbmm,
  convolution and its backward, the SDPA kernels, ...) plus the formulas it
  lacks, registered *with* it (``register_flop_formula``, so torch's own
  ``FlopCounterMode`` counts them too; where a newer torch has its own, ours
  still decides layerprof's count): the SDPA entry op and the CPU flash
  kernel, the fused ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer``
  fast paths, and the RNNs (LSTM/GRU/RNN, all gates, layers and directions,
  at the entry op, as cells and as the oneDNN/cuDNN/MIOpen kernels).
  Attention is counted as the useful work: a causal mask halves the score
  and value products. Where torch has a formula without that (its SDPA
  kernels), an override (torch's ``custom_mapping``) replaces it.
* **elementwise** counts, kept apart: activations and arithmetic 1 per output
  element, softmax 5 (max, subtract, exp, sum, divide), layer/group norm 5
  per element (4 without affine), batch norm 2 in eval (1 without affine) and
  5 in training, RMS norm 4 (3), reductions 1 per input element, pooling one
  per window element, the gates of the fused RNN and attention kernels;
* **zero**: ops that only move or make data (views, copies, ``cat``,
  indexing, embedding lookups, fills, random draws) do 0 FLOPs.

Everything else is uncounted, never a silent 0 (``layerprof.capture.flops.counter``).
Formulas read shapes (``shape_wrapper`` turns tensors into sizes) and never
touch data, so they run under fake and symbolic tensors too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_Formula = Callable[..., Any]

# Per-element factor of the fused kernels' gate arithmetic, per hidden unit and
# token (what torch's own cell code does when it is not fused): LSTM: sum of the
# two gate products (4H), three sigmoids, two tanh, three products and one sum;
# GRU: two sums and two sigmoids for r and z, the reset product, a sum and a
# tanh for n, then h' = n + z * (h - n); RNN: a sum and the nonlinearity.
_RNN_GATES = {4: 13, 3: 10, 1: 2}
_SOFTMAX = 5
_ATTENTION_SCORE = 1 + _SOFTMAX  # scaling + softmax, per score


@dataclass(frozen=True)
class Rule:
    """How one operator is counted: a tensor formula, an elementwise one, or a known 0.

    Formulas take shapes where tensors were (``f(*shapes, out_shape=...)``); a
    ``raw`` tensor formula (torch's varlen attention ones) takes the tensors
    themselves and ``out_val``.
    """

    tensor: _Formula | None = None
    elementwise: _Formula | None = None
    zero: str | None = None  # why it does no FLOPs: "data movement", "lookup", ...
    raw: bool = False


# ---- shapes -------------------------------------------------------------------------


def numel(shape: Sequence[int] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _first(out_shape: Any) -> Any:
    """The first tensor's shape of an op's (possibly tuple) output."""
    while isinstance(out_shape, (list, tuple)) and out_shape and not isinstance(out_shape[0], int):
        out_shape = out_shape[0]
    return out_shape


def _weights(params: Sequence[Any]) -> list[Sequence[int]]:
    """The matrices among an RNN's flat parameter list (biases are 1-D)."""
    return [p for p in params if p is not None and len(p) == 2]


# ---- attention ------------------------------------------------------------------------


def _attention_flops(q: Sequence[int], v: Sequence[int], causal: bool) -> int:
    """QK^T and PV of ``q (..., L, E)`` against ``k/v (..., S, E|Ev)``; heads are q's
    leading dimensions (grouped-query attention shares k/v heads)."""
    *lead, lq, e = q
    s, ev = v[-2], v[-1]
    full = 2 * math.prod(lead) * lq * s * (e + ev)
    return full // 2 if causal else full


def _attention_scores(q: Sequence[int], v: Sequence[int], causal: bool) -> int:
    *lead, lq, _ = q
    full = math.prod(lead) * lq * v[-2]
    return full // 2 if causal else full


def _sdpa(q: Any, k: Any, v: Any, mask: Any = None, dropout: float = 0.0,
          is_causal: bool = False, *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return _attention_flops(q, v, bool(is_causal))


def _sdpa_ew(q: Any, k: Any, v: Any, mask: Any = None, dropout: float = 0.0,
             is_causal: bool = False, *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return _ATTENTION_SCORE * _attention_scores(q, v, bool(is_causal))


def _flash(q: Any, k: Any, v: Any, dropout: float = 0.0, is_causal: bool = False,
           *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    """_scaled_dot_product_flash_attention(_for_cpu)(q, k, v, dropout_p, is_causal, ...)."""
    return _attention_flops(q, v, bool(is_causal))


def _flash_ew(q: Any, k: Any, v: Any, dropout: float = 0.0, is_causal: bool = False,
              *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return _ATTENTION_SCORE * _attention_scores(q, v, bool(is_causal))


def _with_bias(q: Any, k: Any, v: Any, bias: Any = None, *rest: Any, out_shape: Any = None,
               **kwargs: Any) -> int:  # fmt: skip
    """_efficient / _cudnn (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal)."""
    causal = rest[2] if len(rest) > 2 else kwargs.get("is_causal", False)
    return _attention_flops(q, v, bool(causal))


def _overrideable(q: Any, k: Any, v: Any, bias: Any = None, dropout: float = 0.0,
                  is_causal: bool = False, *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return _attention_flops(q, v, bool(is_causal))


def _backward(flops: int) -> int:
    """Attention backward: dV, dP, dQ, dK are four products, twice the forward's two."""
    return 2 * flops


def _flash_cpu_bwd(grad: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, dropout: float = 0.0,
                   is_causal: bool = False, *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return _backward(_attention_flops(q, v, bool(is_causal)))


def _flash_cpu_bwd_ew(grad: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, dropout: float = 0.0,
                      is_causal: bool = False, *_: Any, out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return 2 * _ATTENTION_SCORE * _attention_scores(q, v, bool(is_causal))


def _flash_bwd(grad: Any, q: Any, k: Any, v: Any, *rest: Any, out_shape: Any = None,
               **kwargs: Any) -> int:  # fmt: skip
    """(grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, ...)."""
    causal = rest[7] if len(rest) > 7 else kwargs.get("is_causal", False)
    return _backward(_attention_flops(q, v, bool(causal)))


def _efficient_bwd(grad: Any, q: Any, k: Any, v: Any, *rest: Any, out_shape: Any = None,
                   **kwargs: Any) -> int:  # fmt: skip
    """(grad, q, k, v, bias, out, lse, seed, offset, dropout_p, grad_input_mask, is_causal)."""
    causal = rest[7] if len(rest) > 7 else kwargs.get("is_causal", False)
    return _backward(_attention_flops(q, v, bool(causal)))


def _cudnn_bwd(grad: Any, q: Any, k: Any, v: Any, *rest: Any, out_shape: Any = None,
               **kwargs: Any) -> int:  # fmt: skip
    """(grad, q, k, v, out, lse, seed, offset, bias, cum_q, cum_k, max_q, max_k, dropout_p, is_causal)."""
    causal = rest[10] if len(rest) > 10 else kwargs.get("is_causal", False)
    return _backward(_attention_flops(q, v, bool(causal)))


def _varlen(causal_at: int, causal_values: tuple[Any, ...], q_at: int, cum_at: int,
            times: int = 1) -> _Formula:  # fmt: skip
    """The flash / memory-efficient kernels' own ops (``_flash_attention_forward``...):
    tensors in (batch, length, heads, dim) layout, or packed sequences with cumulative
    lengths (varlen). Counted from the lengths, halved when the mask argument says causal.
    (torch's formulas for these read the dense layout as (batch, heads, length, dim).)"""

    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        q, k, v = args[q_at : q_at + 3]
        cum_q, cum_k = args[cum_at], args[cum_at + 1]
        if cum_q is None:
            pairs = [(int(q.shape[-3]), int(k.shape[-3]))] * int(math.prod(q.shape[:-3]))
        else:
            qs, ks = cum_q.tolist(), cum_k.tolist()
            pairs = [(qs[i + 1] - qs[i], ks[i + 1] - ks[i]) for i in range(len(qs) - 1)]
        heads, e, ev = int(q.shape[-2]), int(q.shape[-1]), int(v.shape[-1])
        flops = sum(2 * heads * lq * s * (e + ev) for lq, s in pairs)
        flag = args[causal_at] if len(args) > causal_at else kwargs.get("is_causal", 0)
        return times * (flops // 2 if flag in causal_values else flops)

    formula._get_raw = True  # type: ignore[attr-defined]
    return formula


# ---- fused transformer fast paths ----------------------------------------------------


def _mha(q: Any, k: Any, v: Any, embed_dim: int, num_head: int, *_: Any,
         out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    """_native_multi_head_attention: q/k/v projections, attention, output projection."""
    b, lq, lk, e = math.prod(q[:-2]), q[-2], k[-2], embed_dim
    projections = 2 * b * e * e * (lq + 2 * lk) + 2 * b * lq * e * e
    return int(projections + _attention_flops((b, lq, e), (b, lk, e), False))


def _mha_ew(q: Any, k: Any, v: Any, embed_dim: int, num_head: int, *_: Any,
            out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    return int(_ATTENTION_SCORE * math.prod(q[:-2]) * num_head * q[-2] * k[-2])


def _encoder_layer(src: Any, embed_dim: int, num_heads: int, *rest: Any,
                   out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    """_transformer_encoder_layer_fwd: self-attention block and the two-matrix FFN."""
    b, length, e = math.prod(src[:-2]), src[-2], embed_dim
    ffn = rest[11][0]  # ffn_weight_1: (dim_feedforward, embed_dim)
    attention = _mha((b, length, e), (b, length, e), (b, length, e), e, num_heads)
    return int(attention + 2 * 2 * b * length * e * ffn)


def _encoder_layer_ew(src: Any, embed_dim: int, num_heads: int, *rest: Any,
                      out_shape: Any = None, **__: Any) -> int:  # fmt: skip
    """Scores, two layer norms (5 per element), the activation and two residual sums."""
    b, length, e = math.prod(src[:-2]), src[-2], embed_dim
    ffn = rest[11][0]
    scores = _ATTENTION_SCORE * b * num_heads * length * length
    return int(scores + 2 * 5 * b * length * e + b * length * ffn + 2 * b * length * e)


# ---- composite ops seen whole in inference mode ---------------------------------------
# Under torch.inference_mode() composite ops (linear, conv2d, layer_norm) reach the
# counter before they are split into their parts; counting them whole gives the same
# number as their parts (2 x MACs) without decomposing them in Python.


def _matmul_like(a: Any, b: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    """matmul / linear: each output element is a dot product of length ``a[-1]``."""
    return int(2 * a[-1] * numel(_first(out_shape)))


def _conv(transposed: bool) -> _Formula:
    def formula(x: Any, w: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        from torch.utils.flop_counter import conv_flop_count

        out = _first(out_shape)
        if len(x) == len(w) - 1:  # an unbatched input: a batch of one
            x, out = (1, *x), (1, *out)
        return int(conv_flop_count(list(x), list(w), list(out), transposed=transposed))

    return formula


_COMPOSITE: dict[str, _Formula] = {
    "linear": _matmul_like,
    "matmul": _matmul_like,
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), _conv(False)),
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), _conv(True)),
}


# ---- recurrent layers ----------------------------------------------------------------


def _rnn_params(args: Sequence[Any]) -> tuple[Sequence[int], list[Any], int]:
    """(input shape, params, layer-directions) of lstm/gru/rnn ``.input`` and ``.data``."""
    # .input: (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    # .data:  (data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
    at = 2 if isinstance(args[3], bool) else 3
    params = list(args[at])
    groups = int(args[at + 2]) * (2 if args[at + 5] else 1)
    return args[0], params, groups


def _rnn_tokens(shape: Sequence[int]) -> int:
    """Steps x batch (a packed sequence's data is already one row per step and item)."""
    return math.prod(shape[:-1])


def _rnn(*args: Any, out_shape: Any = None, **_: Any) -> int:
    shape, params, _groups = _rnn_params(args)
    return 2 * _rnn_tokens(shape) * sum(numel(w) for w in _weights(params))


def _rnn_ew(gates: int) -> _Formula:
    def formula(*args: Any, out_shape: Any = None, **_: Any) -> int:
        shape, params, groups = _rnn_params(args)
        hidden = _weights(params)[1][0] // gates  # w_hh: (gates * H, H or proj)
        return _rnn_tokens(shape) * groups * _RNN_GATES[gates] * hidden

    return formula


def _cell(x: Any, hx: Any, w_ih: Any, w_hh: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    return 2 * _rnn_tokens(x) * (numel(w_ih) + numel(w_hh))


def _cell_ew(gates: int) -> _Formula:
    def formula(x: Any, hx: Any, w_ih: Any, w_hh: Any, *_: Any, out_shape: Any = None,
                **__: Any) -> int:  # fmt: skip
        return int(_rnn_tokens(x) * _RNN_GATES[gates] * (w_hh[0] // gates))

    return formula


def _fused_cell_ew(gates: int) -> _Formula:
    """_thnn_fused_lstm/gru_cell(input_gates, hidden_gates, ...): the gate arithmetic only."""

    def formula(input_gates: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return int(_rnn_tokens(input_gates) * _RNN_GATES[gates] * (input_gates[-1] // gates))

    return formula


def _gates(rows: int, hidden: int) -> int:
    return rows // hidden if hidden and rows // hidden in _RNN_GATES else 4


def _onednn(x: Any, w0: Any, w1: Any, *rest: Any, out_shape: Any = None, **__: Any) -> int:
    """mkldnn_rnn_layer: one layer and direction (input, w_ih, w_hh, b_ih, b_hh, ...)."""
    return 2 * _rnn_tokens(x) * (numel(w0) + numel(w1))


def _onednn_ew(x: Any, w0: Any, w1: Any, *rest: Any, out_shape: Any = None, **__: Any) -> int:
    hidden = int(rest[7])  # (b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size, ...)
    return _rnn_tokens(x) * _RNN_GATES[_gates(w1[0], hidden)] * hidden


def _onednn_bwd(x: Any, w1: Any, w2: Any, *rest: Any, out_shape: Any = None, **__: Any) -> int:
    """mkldnn_rnn_layer_backward: gradients of input and weights, twice the forward."""
    return 2 * _onednn(x, w1, w2)


def _vendor_rnn(x: Any, weights: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    """_cudnn_rnn / miopen_rnn (input, weight[], ...): every layer and direction at once."""
    return 2 * _rnn_tokens(x) * sum(numel(w) for w in _weights(weights))


def _vendor_rnn_bwd(x: Any, weights: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    return 2 * _vendor_rnn(x, weights)


# ---- elementwise ----------------------------------------------------------------------


def _per_output(factor: int) -> _Formula:
    def formula(*_: Any, out_shape: Any = None, **__: Any) -> int:
        return factor * numel(_first(out_shape))

    return formula


def _per_input(factor: int) -> _Formula:
    def formula(x: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return factor * numel(x)

    return formula


def _affine(with_weight: int, without: int, weight_at: int) -> _Formula:
    """Norms: ``with_weight`` per element when the weight argument is given."""

    def formula(x: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        weight = args[weight_at - 1] if len(args) >= weight_at else kwargs.get("weight")
        return (with_weight if weight is not None else without) * numel(x)

    return formula


def _batch_norm(training_at: int | None) -> _Formula:
    """Batch norm: 5 per element (4 without affine) in training, 2 (1) from running stats."""

    def formula(x: Any, weight: Any = None, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        training = (
            bool(args[training_at - 2]) if training_at and len(args) > training_at - 2 else False
        )
        affine = weight is not None
        per = (5 if affine else 4) if training else (2 if affine else 1)
        return per * numel(x)

    return formula


def _pool(x: Any, kernel: Any = None, *_: Any, out_shape: Any = None, **__: Any) -> int:
    """Max/avg pooling: one operation per window element of each output."""
    window = math.prod(kernel) if isinstance(kernel, (list, tuple)) else int(kernel or 1)
    dims = len(x) - 2
    if isinstance(kernel, int) and dims > 1:
        window = kernel**dims
    return window * numel(_first(out_shape))


def _embedding_bag(weight: Any, indices: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    """Sums (or means) of looked-up rows: one add per looked-up element."""
    return int(numel(indices) * weight[-1])


_ONE_PER_OUTPUT = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "gelu", "silu", "sigmoid", "tanh",
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "pow",
    "reciprocal", "erf", "erfc", "erfinv", "sin", "cos", "tan", "atan", "hardtanh",
    "hardswish", "hardsigmoid", "leaky_relu", "elu", "celu", "selu", "softplus", "mish",
    "clamp", "clamp_min", "clamp_max", "threshold", "maximum", "minimum", "fmod", "remainder",
    "floor", "ceil", "round", "trunc", "sign", "square", "logit", "_prelu_kernel", "glu",
    "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "native_dropout", "relu6",
    "fill_diagonal_", "xlogy", "atan2", "hypot", "nan_to_num", "softshrink", "hardshrink",
    "native_dropout_backward", "index_add", "scatter_add", "scatter_reduce", "index_reduce",
)  # fmt: skip
_TWO_PER_OUTPUT = (
    "lerp", "addcmul", "addcdiv",
    "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
    "tanh_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
    "softplus_backward", "hardswish_backward", "hardsigmoid_backward", "mish_backward",
    "mse_loss_backward", "l1_loss_backward", "smooth_l1_loss_backward", "huber_loss_backward",
    "binary_cross_entropy_backward", "_prelu_kernel_backward",
)  # fmt: skip
_PER_INPUT = {
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1, "nansum": 1,
    "cumsum": 1, "cumprod": 1, "argmax": 1, "argmin": 1, "logsumexp": 3, "norm": 2,
    "linalg_vector_norm": 2, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3,
    "adaptive_avg_pool1d": 1, "adaptive_avg_pool2d": 1, "_adaptive_avg_pool2d": 1,
    "adaptive_avg_pool3d": 1, "_adaptive_avg_pool3d": 1, "adaptive_max_pool2d": 1,
    "adaptive_max_pool1d": 1, "adaptive_max_pool3d": 1, "mse_loss": 3, "l1_loss": 3,
    "smooth_l1_loss": 3, "huber_loss": 3, "binary_cross_entropy": 4,
    "binary_cross_entropy_with_logits": 5, "embedding_dense_backward": 1,
    "_adaptive_avg_pool2d_backward": 1, "_adaptive_avg_pool3d_backward": 1,
}  # fmt: skip
_PER_OUTPUT = {
    "_softmax": _SOFTMAX, "_log_softmax": _SOFTMAX, "_safe_softmax": _SOFTMAX,
    "_softmax_backward_data": 4, "_log_softmax_backward_data": 4,
    "upsample_linear1d": 2, "upsample_bilinear2d": 4, "_upsample_bilinear2d_aa": 4,
    "upsample_trilinear3d": 8, "upsample_bicubic2d": 16, "_upsample_bicubic2d_aa": 16,
    "native_layer_norm_backward": 10, "native_group_norm_backward": 10,
    "native_batch_norm_backward": 10, "_fused_rms_norm_backward": 8,
    # pooling backward: one per input-gradient element
    "max_pool2d_with_indices_backward": 1, "max_pool3d_with_indices_backward": 1,
    "avg_pool2d_backward": 1, "avg_pool3d_backward": 1,
}  # fmt: skip
_POOLS = (
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d", "mkldnn_max_pool2d",
    "mkldnn_max_pool3d",
)  # fmt: skip
_ZERO_OPS: dict[str, str] = {
    **dict.fromkeys(("embedding", "embedding_renorm_", "_embedding_bag_forward_only"), "lookup"),
    **dict.fromkeys((
        "clone", "contiguous", "copy_", "_to_copy", "_copy_from", "_copy_from_and_resize",
        "cat", "stack", "index", "index_select", "index_put", "index_put_",
        "_index_put_impl_", "gather", "scatter", "repeat", "repeat_interleave", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
        "replication_pad1d", "replication_pad2d", "replication_pad3d", "flip", "roll", "tril",
        "triu", "masked_fill", "masked_fill_", "where", "masked_select", "masked_scatter",
        "nonzero", "fill", "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like",
        "empty", "empty_like", "empty_strided", "full", "full_like", "new_zeros", "new_ones",
        "new_empty", "new_full", "new_empty_strided", "arange", "linspace", "logspace",
        "scalar_tensor", "lift_fresh", "lift_fresh_copy", "detach_", "set_", "resize_",
        "_unsafe_view", "transpose_", "t_", "squeeze_", "unsqueeze_", "as_strided_",
        "swapdims_", "swapaxes_", "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk",
        "split_with_sizes_copy", "split_copy", "unbind_copy", "_reshape_copy", "randn", "rand", "randint", "randperm", "randn_like",
        "rand_like", "randint_like", "normal", "normal_", "uniform_", "bernoulli",
        "bernoulli_", "random_", "exponential_", "multinomial", "_local_scalar_dense", "item",
        "is_nonzero", "equal", "sort", "topk", "argsort", "kthvalue", "unique", "_unique2",
        "unique_consecutive", "bucketize", "searchsorted", "one_hot", "slice_scatter",
        "select_scatter", "as_strided_scatter", "diagonal_scatter", "upsample_nearest1d",
        "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "pixel_shuffle",
        "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "im2col", "_assert_async", "_assert_tensor_metadata",
        "_functional_assert_async", "cudnn_is_acceptable", "is_same_size",
        "_has_compatible_shallow_copy_type", "_nested_tensor_from_mask",
        "_nested_tensor_from_mask_left_aligned", "_nested_tensor_size", "to_padded_tensor",
        "_nested_from_padded", "_nested_tensor_from_tensor_list", "nll_loss_forward",
        "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward", "bitwise_and",
        "bitwise_or", "bitwise_not", "bitwise_xor", "logical_and", "logical_or",
        "logical_not", "logical_xor", "any", "all", "count_nonzero", "isin", "_pin_memory",
        "record_stream", "alias_copy", "t_copy", "view_copy", "permute_copy",
        "transpose_copy", "expand_copy", "squeeze_copy", "unsqueeze_copy", "slice_copy",
        "select_copy", "detach_copy", "_to_dense", "_make_dep_token", "_foreach_zero_", "triu_indices", "tril_indices",
        "eye", "_efficientzerotensor", "_conj", "resolve_conj", "resolve_neg",
    ), "data movement"),
}  # fmt: skip


def _packet(aten: Any, name: str) -> Any:
    return getattr(aten, name, None)


def _elementwise_table(aten: Any) -> dict[Any, _Formula]:
    table: dict[str, _Formula] = {}
    for name in _ONE_PER_OUTPUT:
        table[name] = _per_output(1)
    for name in _TWO_PER_OUTPUT:
        table[name] = _per_output(2)
    for name, factor in _PER_INPUT.items():
        table[name] = _per_input(factor)
    for name, factor in _PER_OUTPUT.items():
        table[name] = _per_output(factor)
    for name in _POOLS:
        table[name] = _pool
    # native_layer_norm(input, normalized_shape, weight, bias, eps); group norm (input, weight, ...)
    table["native_layer_norm"] = _affine(5, 4, 2)
    table["native_group_norm"] = _affine(5, 4, 1)
    table["_fused_rms_norm"] = _affine(4, 3, 2)
    table["rms_norm"] = _affine(4, 3, 2)
    # (input, weight, bias, running_mean, running_var, training, ...)
    table["native_batch_norm"] = _batch_norm(5)
    table["_native_batch_norm_legit"] = _batch_norm(5)
    table["_native_batch_norm_legit_functional"] = _batch_norm(5)
    table["cudnn_batch_norm"] = _batch_norm(5)
    table["miopen_batch_norm"] = _batch_norm(5)
    table["_native_batch_norm_legit_no_training"] = _batch_norm(None)
    # composites seen whole in inference mode: layer_norm(input, normalized_shape, weight, ...),
    # group_norm(input, num_groups, weight, ...), batch_norm(input, weight, bias, mean, var,
    # training, ...), instance_norm(input, weight, bias, ..., use_input_stats, ...)
    table["layer_norm"] = _affine(5, 4, 2)
    table["group_norm"] = _affine(5, 4, 2)
    table["batch_norm"] = _batch_norm(5)
    table["softmax"] = _per_output(_SOFTMAX)
    table["log_softmax"] = _per_output(_SOFTMAX)
    table["_embedding_bag"] = _embedding_bag
    table["embedding_bag"] = _embedding_bag
    table["_thnn_fused_lstm_cell"] = _fused_cell_ew(4)
    table["_thnn_fused_gru_cell"] = _fused_cell_ew(3)
    out: dict[Any, _Formula] = {}
    for name, formula in table.items():
        for variant in (name, name + "_"):  # in-place twins (add_, relu_) count the same
            packet = _packet(aten, variant)
            if packet is not None:
                out[packet] = formula
    return out


# ---- registration ---------------------------------------------------------------------


def _tensor_formulas(aten: Any) -> dict[str, _Formula]:
    """Tensor formulas torch's registry lacks (registered with it)."""
    formulas: dict[str, _Formula] = {
        "scaled_dot_product_attention": _sdpa,
        "_scaled_dot_product_flash_attention_for_cpu": _flash,
        "_scaled_dot_product_flash_attention_for_cpu_backward": _flash_cpu_bwd,
        "_scaled_dot_product_fused_attention_overrideable": _overrideable,
        "_native_multi_head_attention": _mha,
        "_transformer_encoder_layer_fwd": _encoder_layer,
        "lstm_cell": _cell,
        "gru_cell": _cell,
        "rnn_tanh_cell": _cell,
        "rnn_relu_cell": _cell,
        "mkldnn_rnn_layer": _onednn,
        "mkldnn_rnn_layer_backward": _onednn_bwd,
        "_cudnn_rnn": _vendor_rnn,
        "_cudnn_rnn_backward": _vendor_rnn_bwd,
        "miopen_rnn": _vendor_rnn,
        "miopen_rnn_backward": _vendor_rnn_bwd,
    }
    for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        formulas[name] = _rnn
    return formulas


def _causal_overrides() -> dict[str, _Formula]:
    """The SDPA kernels torch has formulas for, counted so that a causal mask halves the work."""
    out: dict[str, _Formula] = {
        "_scaled_dot_product_flash_attention": _flash,
        "_scaled_dot_product_efficient_attention": _with_bias,
        "_scaled_dot_product_cudnn_attention": _with_bias,
        "_scaled_dot_product_flash_attention_backward": _flash_bwd,
        "_scaled_dot_product_efficient_attention_backward": _efficient_bwd,
        "_scaled_dot_product_cudnn_attention_backward": _cudnn_bwd,
    }
    # (q, k, v, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, ...)
    out["_flash_attention_forward"] = _varlen(8, (True,), 0, 3)
    # (grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, ...)
    out["_flash_attention_backward"] = _varlen(11, (True,), 1, 6, times=2)
    # (q, k, v, bias, cu_q, cu_k, max_q, max_k, dropout_p, custom_mask_type, ...): 1, 2 causal
    out["_efficient_attention_forward"] = _varlen(9, (1, 2), 0, 4)
    # (grad, q, k, v, bias, out, cu_q, cu_k, max_q, max_k, lse, dropout_p, seed, offset,
    #  custom_mask_type, ...)
    out["_efficient_attention_backward"] = _varlen(14, (1, 2), 1, 6, times=2)
    return out


_ELEMENTWISE_FUSED: dict[str, _Formula] = {
    "scaled_dot_product_attention": _sdpa_ew,
    "_scaled_dot_product_flash_attention_for_cpu": _flash_ew,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _flash_cpu_bwd_ew,
    "_scaled_dot_product_flash_attention": _flash_ew,
    "_native_multi_head_attention": _mha_ew,
    "_transformer_encoder_layer_fwd": _encoder_layer_ew,
    "lstm": _rnn_ew(4),
    "gru": _rnn_ew(3),
    "rnn_tanh": _rnn_ew(1),
    "rnn_relu": _rnn_ew(1),
    "lstm_cell": _cell_ew(4),
    "gru_cell": _cell_ew(3),
    "rnn_tanh_cell": _cell_ew(1),
    "rnn_relu_cell": _cell_ew(1),
    "mkldnn_rnn_layer": _onednn_ew,
}


@functools.cache
def rules() -> dict[Any, Rule]:
    """Every counted operator packet and its rule (built once; registers with torch)."""
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten
    registry: dict[Any, _Formula] = flop_counter.flop_registry
    own = _tensor_formulas(aten)
    for name, formula in own.items():
        packet = _packet(aten, name)
        if packet is not None and packet not in registry:
            flop_counter.register_flop_formula(packet)(formula)
    # torch stores its shape formulas wrapped (shape_wrapper keeps the original as
    # __wrapped__); the counter maps tensors to shapes itself, without pytree
    tensor: dict[Any, tuple[_Formula, bool]] = {
        packet: (f.__wrapped__, False) if hasattr(f, "__wrapped__") else (f, True)
        for packet, f in registry.items()
    }
    # ours over torch's where both have one: torch 2.15 counts the CPU flash kernel's
    # backward as 2.5x the full forward (its recompute, no causal halving)
    for name, formula in {**own, **_COMPOSITE, **_causal_overrides()}.items():
        packet = _packet(aten, name)
        if packet is not None:
            tensor[packet] = (formula, bool(getattr(formula, "_get_raw", False)))
    elementwise = dict(_elementwise_table(aten))
    for name, formula in _ELEMENTWISE_FUSED.items():
        packet = _packet(aten, name)
        if packet is not None:
            elementwise[packet] = formula
    out: dict[Any, Rule] = {}
    for name, why in _ZERO_OPS.items():
        packet = _packet(aten, name)
        if packet is not None:
            out[packet] = Rule(zero=why)
    for packet in {*tensor, *elementwise}:
        found: tuple[_Formula | None, bool] = tensor.get(packet, (None, False))
        out[packet] = Rule(tensor=found[0], elementwise=elementwise.get(packet), raw=found[1])
    return out
