#!/usr/bin/env python3
"""Writes inputs and NumPy-computed expected outputs for every module here.

Each NAME.hlo gets NAME/in_K.npy (one per entry parameter, in order) and
NAME/expected_K.npy (one per output, tuples flattened in order). The
expected values come from NumPy's own implementation of each op, written
from XLA's operation semantics, never from Kiln.

Run with Debian's python3 (python3-numpy): python3 generate_expected.py
"""
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261121)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def bf16_round(a):
    """Rounds float32 values to bfloat16 (nearest even), as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def window_reduce(x, size, stride, pad, fn, init):
    pads = [(p[0], p[1]) for p in pad]
    xp = np.pad(x, pads, constant_values=init)
    out_shape = [(xp.shape[d] - size[d]) // stride[d] + 1 for d in range(x.ndim)]
    out = np.empty(out_shape, dtype=x.dtype)
    for idx in np.ndindex(*out_shape):
        sl = tuple(slice(idx[d] * stride[d], idx[d] * stride[d] + size[d]) for d in range(x.ndim))
        out[idx] = fn(xp[sl])
    return out


def conv_nhwc(x, k, stride=(1, 1), pad=((0, 0), (0, 0)), dil=(1, 1)):
    """x [N,H,W,C], k [KH,KW,C,O] -> [N,OH,OW,O] (cross-correlation)."""
    n, h, w, c = x.shape
    kh, kw, _, o = k.shape
    xp = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    ekh, ekw = (kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1
    oh = (xp.shape[1] - ekh) // stride[0] + 1
    ow = (xp.shape[2] - ekw) // stride[1] + 1
    out = np.zeros((n, oh, ow, o), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride[0]:i * stride[0] + ekh:dil[0], j * stride[1]:j * stride[1] + ekw:dil[1], :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, k)
    return out.astype(np.float32)


def case_elementwise_f32():
    x = f32(rng.uniform(-3, 3, (2, 3)))
    x[0, 0] = 2.5  # a tie for the rounding modes
    x[0, 1] = -0.5
    y = f32(rng.uniform(0.5, 2.5, (2, 3)))
    with np.errstate(all="ignore"):
        outs = [np.abs(x), np.ceil(x), np.cos(x), np.exp(x), np.floor(x), -x, np.tanh(x),
                1 / (1 + np.exp(-x)), np.sign(x), np.sin(x), np.expm1(x),
                np.sign(x) * np.floor(np.abs(x) + 0.5), np.round(x), np.cbrt(x), np.tan(x),
                np.isfinite(x), np.log(y), np.sqrt(y), 1 / np.sqrt(y), np.log1p(y), x + y, x - y,
                x * y, x / y, np.maximum(x, y), np.minimum(x, y), np.power(y, x), np.arctan2(x, y),
                np.fmod(x, y)]
    return [x, y], [o.astype(np.bool_) if o.dtype == np.bool_ else f32(o) for o in outs]


def case_elementwise_int():
    a = np.array([7, -7, 100, -1, 0, 2147483647], dtype=np.int32)
    b = np.array([2, 3, -7, 5, 9, 1], dtype=np.int32)
    with np.errstate(all="ignore"):
        def trunc_div(p, q):
            return (np.sign(p) * np.sign(q) * (np.abs(p.astype(np.int64)) // np.abs(q))).astype(np.int32)
        def trunc_rem(p, q):
            return (p.astype(np.int64) - trunc_div(p, q).astype(np.int64) * q).astype(np.int32)
        u = a.view(np.uint32)
        popcnt = np.array([bin(int(v)).count("1") for v in u], dtype=np.int32)
        clz = np.array([32 - int(v).bit_length() for v in u], dtype=np.int32)
        outs = [a + b, a - b, a * b, trunc_div(a, b), trunc_rem(a, b), np.maximum(a, b),
                np.minimum(a, b), a & b, a | b, a ^ b, ~a, np.abs(a), -a, np.sign(a).astype(np.int32),
                popcnt, clz, (u << np.uint32(3)).view(np.int32),
                a >> 3, (u >> np.uint32(3)).view(np.int32), a < b, np.where(a < b, a, b),
                np.clip(a, -2, 5), a.astype(np.float32)]
    return [a, b], [np.asarray(o) for o in outs]


def case_types():
    d = np.array([1.5, -2.25, 1e100, 3.0], dtype=np.float64)
    h = np.array([1.0, 0.5, 1000.0, -3.0], dtype=np.float16)
    b = bf16_round(np.array([1.0, 3.14159, -2.5, 100.7], dtype=np.float32))
    i8 = np.array([100, -100, 5, -128], dtype=np.int8)
    u32 = np.array([3, 70000, 4294967295, 0], dtype=np.uint32)
    p = np.array([True, False, True, False])
    i64 = np.array([3, -(1 << 40), 1 << 33, 7], dtype=np.int64)
    u8 = np.array([0, 200, 255, 17], dtype=np.uint8)
    with np.errstate(all="ignore"):
        tos = np.clip(d, -128, 127).astype(np.int8)
        outs = [d * d, (h + h).astype(np.float16), bf16_round(b * b), (i8 + i8).astype(np.int8),
                (u32 * u32).astype(np.uint32), ~p, p ^ ~p, (i64 * i64).astype(np.int64),
                (u8 - u8).astype(np.uint8), (u8 + u8).astype(np.uint8), b.astype(np.float32), tos,
                b.astype(np.float32).view(np.int32)]
    return [d, h, b, i8, u32, p, i64, u8], outs


def case_data_movement():
    x = f32(rng.uniform(-1, 1, (2, 3, 4)))
    v = f32([1, 2, 3])
    io = np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], (3, 2))
    bc = np.broadcast_to(v[None, :, None], (2, 3, 5))
    rs = x.reshape(6, 4)
    tr = np.transpose(x, (2, 0, 1))
    sl = x[1:2, 0:3:2, 1:4:2]
    rv = x[::-1, :, ::-1]
    # pad -2_-1 on dim 0 (crop), 1_0 with interior 1 on dim 1, value -1.
    inter = np.full((6, 7), -1.0, dtype=np.float32)
    inter[:, ::2] = rs
    pd = np.concatenate([np.full((6, 1), -1.0, np.float32), inter], axis=1)[2:5]
    cc = np.concatenate([x, bc], axis=2)
    return [x, v], [io, bc, rs, tr, sl, rv, pd, cc, x]


def case_dynamic_slice():
    x = f32(np.arange(20).reshape(4, 5))
    i = np.array(3, dtype=np.int32)   # clamped to 2 for the 2-row slice
    j = np.array(1, dtype=np.int32)
    u = f32([[-1, -2], [-3, -4]])
    ds = x[2:4, 1:4]
    dus = x.copy()
    dus[1:3, 3:5] = u  # starts (j, i) = (1, 3) fit a 2x2 update
    return [x, i, j, u], [ds, dus]


def case_reduce():
    x = f32(rng.uniform(-2, 2, (3, 4, 5)))
    n = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    sum_abs = np.zeros(5, dtype=np.float32)
    for a in range(3):
        for b in range(4):
            sum_abs += np.abs(x[a, b])
    outs = [x.sum(0), x.sum(1), x.sum(2), x.sum((0, 2)), x.sum(), x.max((1, 2)), x.prod(2),
            np.minimum(n.min(0), 1000), sum_abs, x.max(2), x.argmax(2).astype(np.int32)]
    return [x, n], [np.asarray(o, dtype=o.dtype if hasattr(o, "dtype") else np.float32) for o in outs]


def case_reduce_window():
    x = f32(rng.uniform(-1, 1, (2, 6, 6, 3)))
    maxpool = window_reduce(x, (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4, np.max, -np.inf)
    avgsum = window_reduce(x, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)), np.sum, 0.0)
    overlap = window_reduce(x, (1, 2, 3, 1), (1, 1, 1, 1), ((0, 0),) * 4, np.max, -np.inf)
    return [x], [f32(maxpool), f32(avgsum), f32(overlap)]


def case_select_and_scatter():
    x = f32(rng.permutation(48).reshape(1, 4, 6, 2))
    g = f32(rng.uniform(1, 2, (1, 2, 3, 2)))
    out = np.zeros_like(x)
    for (_, i, j, c) in np.ndindex(*g.shape):
        win = x[0, 2 * i:2 * i + 2, 2 * j:2 * j + 2, c]
        r, s = np.unravel_index(np.argmax(win), win.shape)
        out[0, 2 * i + r, 2 * j + s, c] += g[0, i, j, c]
    return [x, g], [out]


def case_dot():
    a = f32(rng.uniform(-1, 1, (5, 7)))
    b = f32(rng.uniform(-1, 1, (7, 3)))
    c = f32(rng.uniform(-1, 1, (4, 5, 7)))
    d = f32(rng.uniform(-1, 1, (4, 7, 6)))
    return [a, b, c, d], [f32(a.astype(np.float64) @ b), f32(a.T.astype(np.float64) @ a),
                          f32(a.astype(np.float64) @ a.T), f32(np.matmul(c.astype(np.float64), d))]


def case_convolution():
    x = f32(rng.uniform(-1, 1, (2, 7, 7, 3)))
    k = f32(rng.uniform(-1, 1, (3, 3, 3, 4)))
    xc = f32(rng.uniform(-1, 1, (2, 4, 5, 5)))
    kc = f32(rng.uniform(-1, 1, (6, 2, 2, 2)))
    same = conv_nhwc(x, k, pad=((1, 1), (1, 1)))
    strided = conv_nhwc(x, k, stride=(2, 2))
    dilated = conv_nhwc(x, k, dil=(2, 2))
    # Grouped NCHW: groups of 2 input channels -> 3 output channels each.
    grouped = np.zeros((2, 6, 4, 4), dtype=np.float32)
    xn = np.transpose(xc, (0, 2, 3, 1))
    for g in range(2):
        kg = np.transpose(kc[3 * g:3 * g + 3], (2, 3, 1, 0))  # [kh,kw,i,o]
        part = conv_nhwc(xn[..., 2 * g:2 * g + 2], kg)
        grouped[:, 3 * g:3 * g + 3] = np.transpose(part, (0, 3, 1, 2))
    return [x, k, xc, kc], [same, strided, grouped, dilated]


def case_gather_scatter():
    table = f32(rng.uniform(-1, 1, (6, 4)))
    ids = np.array([5, 0, 2, 2, 9], dtype=np.int32)  # 9 clamps to 5 in gather
    pairs = np.array([[0, 1], [5, 3], [4, 2]], dtype=np.int32)
    upd = f32(rng.uniform(-1, 1, (5, 4)))
    rows = table[np.clip(ids, 0, 5)]
    elems = table[pairs[:, 0], pairs[:, 1]]
    windows = np.stack([table[min(max(r, 0), 4):min(max(r, 0), 4) + 2,
                              min(max(c, 0), 2):min(max(c, 0), 2) + 2] for r, c in pairs])
    scat = table.copy()
    for i, row in enumerate(ids):
        if 0 <= row < 6:  # out-of-bounds updates are skipped
            scat[row] += upd[i]
    return [table, ids, pairs, upd], [rows, elems, windows, scat]


def case_sort():
    x = f32(rng.uniform(-1, 1, (3, 8)))
    k = np.array([3, 1, 3, 2, 9, 1, 0, 3], dtype=np.int32)
    v = f32(np.arange(8))
    order = np.argsort(-k, kind="stable")
    return [x, k, v], [np.sort(x, axis=1), np.sort(x, axis=0), k[order], v[order]]


def case_control_flow():
    x = f32([3, -1, 0.5, 2])
    flag = np.array(False)
    which = np.array(2, dtype=np.int32)
    looped = x.copy()
    for _ in range(4):
        looped = looped * 2 + 1
    return [x, flag, which], [f32(looped), np.array(4, dtype=np.int32), f32(x * x), f32(x + x),
                              f32(looped + looped)]


def case_misc():
    x = f32([1, -2, 3])
    return [x], [np.array(True), x, np.array(0, dtype=np.uint32),
                 f32([[1.5, -2], [np.inf, 0.25]])]


def case_xla_syntax():
    # Drawn after every older module's data (cases run in name order), so
    # theirs stays as it was.
    a = f32(rng.uniform(-1, 1, (2, 3)))
    b = f32(rng.uniform(-1, 1, (2, 3)))
    img = f32(rng.uniform(-1, 1, (1, 5, 5, 2)))
    ker = f32(rng.uniform(-1, 1, (3, 3, 2, 2)))
    fused = a * b + a
    # transpose(a) laid out column-major holds a's values in a's row-major
    # order: the bitcast to a vector reads them so.
    return [a, b, img, ker], [fused.reshape(3, 2), a.reshape(6), f32(2 * a - b), f32(np.exp(b)),
                              f32(-np.exp(a)), f32(np.tanh(a)),
                              conv_nhwc(img, ker[::-1, ::-1], pad=((1, 1), (1, 1)))]


def case_xla_syntax_batching():
    table = f32(rng.uniform(-1, 1, (2, 5, 3)))
    ids = rng.integers(0, 5, (2, 4)).astype(np.int32)
    ids[1, 3] = ids[1, 0]  # a repeated row: scatter adds both updates
    updates = f32(rng.uniform(-1, 1, (2, 4, 3)))
    rows = rng.integers(0, 5, (3, 2, 1)).astype(np.int32)
    gathered = np.stack([table[b, ids[b]] for b in range(2)])
    scattered = table.astype(np.float64)
    for b in range(2):
        np.add.at(scattered[b], ids[b], updates[b])
    # The indices' batching dimension is their second: rows[i, b] reads
    # batch b.
    by_batch = np.zeros((3, 2, 3), dtype=np.float32)
    for i in range(3):
        for b in range(2):
            by_batch[i, b] = table[b, rows[i, b, 0]]
    return [table, ids, updates, rows], [gathered, f32(scattered), by_batch]


def reduce_precision(values, exponent_bits, mantissa_bits):
    """XLA's reduce-precision by value: round to mantissa_bits (ties to even),
    infinity past the format's largest binade, signed zero below its smallest
    normal (the format has no denormals), NaN kept while a mantissa bit is."""
    emax = 2 ** (exponent_bits - 1) - 1
    emin = 1 - emax
    out = []
    for v in np.asarray(values, dtype=np.float32).tolist():
        if math.isnan(v):
            out.append(v if mantissa_bits > 0 else math.inf)
            continue
        if math.isinf(v) or v == 0:
            out.append(v)
            continue
        f, e = math.frexp(v)  # v = f * 2**e, 0.5 <= |f| < 1
        scale = 2.0 ** (mantissa_bits + 1)
        r = math.ldexp(round(f * scale) / scale, e)
        if abs(r) >= 2.0 ** (emax + 1):
            r = math.copysign(math.inf, v)
        elif abs(r) < 2.0 ** emin:
            r = math.copysign(0.0, v)
        out.append(r)
    return f32(out)


def case_xla_syntax_async():
    # Its own generator: the modules after it keep their data.
    local = np.random.default_rng(20261126)
    x = f32(local.uniform(-2, 2, (4, 3)))
    v = f32([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 65504, 65520, -1e6, 2.0 ** -14, 2.0 ** -15,
             -(2.0 ** -20), 0.1, 1.5, math.nan, -math.inf])
    sums = f32(x.astype(np.float64).sum(axis=0))
    outs = [x, x, x, x, sums, x, x, np.int32(4), np.uint32(0), x, x, x, np.zeros_like(x)]
    outs += [reduce_precision(v, 5, 10), reduce_precision(v, 8, 7), reduce_precision(v, 4, 3),
             reduce_precision(v, 5, 0), x]
    return [x, v], outs


def total_order_key(v):
    """XLA's total order of floats: -NaN < -inf < ... < -0 < +0 < ... < +inf
    < +NaN (NaNs of one payload each)."""
    negative = bool(np.signbit(v))
    if math.isnan(v):
        return (0,) if negative else (2,)
    return (1, float(v), 0 if negative else 1)


def total_compare(a, b, op):
    return np.array([op(total_order_key(p), total_order_key(q)) for p, q in zip(a, b)])


def case_xla_syntax_total_order():
    neg_nan = np.array([0xFFC00000], dtype=np.uint32).view(np.float32)[0]
    x = f32([1.5, np.nan, -0.0, 0.0, -np.inf, neg_nan, 3, -2, np.inf, 0.0])
    y = f32([1.5, np.nan, 0.0, -0.0, -np.inf, np.nan, 2, -2, np.inf, -0.0])
    d = np.array([-0.0, np.nan, 1.0, -np.nan, -np.inf, 0.0], dtype=np.float64)
    d[3] = np.copysign(np.nan, -1.0)
    e = np.array([0.0, 1.0, np.nan, -1.0, -np.inf, -0.0], dtype=np.float64)
    order = sorted(range(10), key=lambda i: total_order_key(x[i]))  # stable
    lt = lambda p, q: p < q
    le_float = np.array([p <= q for p, q in zip(d, e)])  # NaN compares false
    return [x, y, d, e], [x[order], np.array(order, dtype=np.int32),
                          total_compare(x, y, lt), total_compare(x, y, lambda p, q: p == q),
                          total_compare(d, e, lt), total_compare(d, e, lambda p, q: p >= q),
                          le_float]


def topk(rows, k, largest):
    """Values and indices of the k largest (smallest) of each row, in XLA's
    total order, ties to the lower index."""
    values, indices = [], []
    for row in rows:
        order = sorted(range(len(row)), key=lambda i: total_order_key(row[i]), reverse=largest)
        indices.append(order[:k])
        values.append([row[i] for i in order[:k]])
    return values, np.array(indices, dtype=np.int32)


def case_xla_syntax_topk():
    x = f32([[3, np.nan, -1, 3, np.inf, -0.0], [1, 2, 3, 4, 5, 6]])
    y = np.array([5, -3, 5, 0, 7], dtype=np.int32)
    lv, li = topk(x, 3, True)
    sv, si = topk(x, 2, False)
    iv, ii = topk([y], 2, True)
    return [x, y], [f32(lv), li, f32(sv), si, np.array(iv[0], dtype=np.int32), ii[0]]


def case_xla_syntax_batch_norm():
    local = np.random.default_rng(20261127)
    x = f32(local.uniform(-2, 2, (4, 3, 2, 2)))
    scale = f32(local.uniform(0.5, 1.5, 3))
    offset = f32(local.uniform(-1, 1, 3))
    mean = f32(local.uniform(-0.5, 0.5, 3))
    var = f32(local.uniform(0.5, 2, 3))
    dy = f32(local.uniform(-1, 1, (4, 3, 2, 2)))
    eps = np.float64(np.float32(0.001))
    axes = (0, 2, 3)
    feature = lambda v: np.asarray(v, dtype=np.float64).reshape(1, 3, 1, 1)
    xd, dyd = x.astype(np.float64), dy.astype(np.float64)
    # Training: the batch's own statistics, the variance biased.
    m = xd.mean(axis=axes)
    v = ((xd - feature(m)) ** 2).mean(axis=axes)
    train = (xd - feature(m)) / np.sqrt(feature(v) + eps) * feature(scale) + feature(offset)
    infer = (xd - feature(mean)) / np.sqrt(feature(var) + eps) * feature(scale) + feature(offset)
    # Gradients of the training output with respect to x, scale and offset,
    # at the given statistics.
    n = xd.size / 3
    centered = xd - feature(mean)
    inv = 1 / np.sqrt(feature(var) + eps)
    d_offset = dyd.sum(axis=axes)
    d_scale = (dyd * centered).sum(axis=axes) * inv.reshape(3)
    dx = feature(scale) * inv * (dyd - feature(d_offset) / n
                                 - centered * feature((dyd * centered).sum(axis=axes)) * inv ** 2 / n)
    return [x, scale, offset, mean, var, dy], [f32(train), f32(m), f32(v), f32(infer), f32(dx),
                                               f32(d_scale), f32(d_offset)]


def case_xla_syntax_variadic_scatter():
    vals = f32([0.5, -1.0, 2.0, 0.0, 3.0])
    ids = np.arange(5, dtype=np.int32)
    where = np.array([[1], [3], [1], [7], [4], [0]], dtype=np.int32)  # 7 is out of bounds
    upd_v = f32([0.25, 1.5, -0.5, 9.0, 2.5, 4.0])
    upd_i = np.array([10, 11, 12, 13, 14, 15], dtype=np.int32)
    out_v, out_i = vals.copy(), ids.copy()
    for k in range(6):
        p = where[k, 0]
        if 0 <= p < 5 and upd_v[k] > out_v[p]:
            out_v[p], out_i[p] = upd_v[k], upd_i[k]
    return [vals, ids, where, upd_v, upd_i], [out_v, out_i]


def conv_batch_groups(x, k, groups, **window):
    """XLA's convolution with batch_group_count: x [N,H,W,C], k [KH,KW,C,O]."""
    n, o = x.shape[0] // groups, k.shape[3] // groups
    return np.concatenate([conv_nhwc(x[g * n:(g + 1) * n], k[..., g * o:(g + 1) * o], **window)
                           for g in range(groups)], axis=3)


def case_xla_bitcast_widths():
    """bitcast-convert to narrower and wider types: NumPy's views of the same
    little-endian bytes."""
    x = f32([[1.5, -2.25, 3e-39], [np.inf, -0.0, 123456.78]])
    d = np.array([1.0, -3.5, 1e300, np.pi], dtype=np.float64)
    b = np.array([[0, 0, 128, 63], [0, 0, 192, 127], [1, 2, 3, 4]], dtype=np.uint8)
    # bf16 as float32 holding its values: each 16-bit piece in the high half.
    quarters = (d.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(4, 4)
    return [x, d, b], [x.view(np.uint16).reshape(2, 3, 2), x.view(np.int8).reshape(2, 3, 4),
                       d.view(np.float32).reshape(4, 2), b.view(np.float32).reshape(3), quarters]


def stochastic_convert(x, r, out_type):
    """XLA's stochastic-convert: |x| rounded up when r < fraction * 2^width(r),
    the sign put back, clamped to out_type's limits (scaled in f32 for f16)."""
    info = np.iinfo(out_type)
    width = 8 * r.dtype.itemsize
    scale_type = np.float32 if x.dtype == np.float16 else x.dtype.type
    out = []
    for v, bits in zip(x, r):
        a = np.abs(v)
        whole = np.floor(a)
        fixed = scale_type(a - whole) * scale_type(2.0 ** width)
        up = int(bits) < min(int(fixed), 2 ** width - 1)
        n = int(whole) + (1 if up else 0)
        if v < 0:
            n = -n
        if v <= info.min:
            n = info.min
        if v >= info.max:
            n = info.max
        out.append(n)
    return np.array(out, dtype=out_type)


def case_xla_stochastic_convert():
    x = f32([2.25, 2.25, -2.25, -2.25, 7.0, 0.5, -0.75, 3e9, -3e9, 0.0])
    r = np.array([2 ** 30 - 1, 2 ** 30 + 1, 5, 2 ** 31, 0, 2 ** 31 - 1, 2 ** 31, 0, 7, 0],
                 dtype=np.uint32)
    h = np.array([1.5, 1.5, -100.25, 200.0, -200.0, 0.125], dtype=np.float16)
    q = np.array([2 ** 15 - 1, 2 ** 15, 0, 0, 0, 2 ** 12], dtype=np.uint16)
    return [x, r, h, q], [stochastic_convert(x, r, np.int32), stochastic_convert(h, q, np.int8)]


def case_xla_gpu_conv():
    """cuDNN's forward convolutions: scale * conv, and act(conv + side_scale
    * side + bias) with relu and leaky relu, computed in float64."""
    local = np.random.default_rng(20261128)
    x = f32(local.uniform(-1, 1, (2, 6, 6, 3)))
    w = f32(local.uniform(-1, 1, (3, 3, 3, 4)))
    bias = f32(local.uniform(-1, 1, 4))
    side = f32(local.uniform(-1, 1, (2, 3, 3, 4)))
    xd, wd, bd = x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64)
    same = conv_nhwc(xd, wd, pad=((1, 1), (1, 1)))
    plain = 0.5 * same
    strided = conv_nhwc(xd, wd, stride=(2, 2), pad=((0, 1), (0, 1)))
    fused = np.maximum(strided + 0.25 * side.astype(np.float64) + bd, 0)
    pre = same + bd
    leaky = np.where(pre > 0, pre, 0.125 * pre)
    return [x, w, bias, side], [f32(plain), f32(fused), f32(leaky)]


def conv_input_grad(dy, k, in_hw, stride, pad):
    """The gradient of conv_nhwc(x, k, stride, pad) with respect to x [N,H,W,C]
    for the output gradient dy, in float64."""
    n, oh, ow, _ = dy.shape
    kh, kw, c, _ = k.shape
    h, w = in_hw
    xp = np.zeros((n, h + pad[0][0] + kh + stride[0] * oh, w + pad[1][0] + kw + stride[1] * ow, c))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    xp[:, i * stride[0] + a, j * stride[1] + b, :] += dy[:, i, j, :] @ k[a, b].T
    return xp[:, pad[0][0]:pad[0][0] + h, pad[1][0]:pad[1][0] + w, :]


def conv_kernel_grad(x, dy, k_hw, stride, pad):
    """The gradient of conv_nhwc(x, k, stride, pad) with respect to k [KH,KW,C,O]
    for the output gradient dy, in float64."""
    _, oh, ow, _ = dy.shape
    kh, kw = k_hw
    big = ((pad[0][0], kh + stride[0] * oh), (pad[1][0], kw + stride[1] * ow))
    xp = np.pad(x, ((0, 0), big[0], big[1], (0, 0)))
    out = np.zeros((kh, kw, x.shape[3], dy.shape[3]))
    for a in range(kh):
        for b in range(kw):
            patch = xp[:, a:a + stride[0] * oh:stride[0], b:b + stride[1] * ow:stride[1], :]
            out[a, b] = np.einsum("nhwc,nhwo->co", patch, dy)
    return out


def case_xla_gpu_conv_grads():
    """cuDNN's gradient calls against the gradients of conv_nhwc."""
    local = np.random.default_rng(20261129)
    u = lambda *shape: f32(local.uniform(-1, 1, shape))
    x, w = u(2, 6, 6, 3), u(3, 3, 3, 4)
    dy_strided, dy_same, dy_unread = u(2, 3, 3, 4), u(2, 6, 6, 4), u(2, 2, 2, 4)
    xg, dyg = u(2, 5, 5, 4), u(2, 5, 5, 6)
    wg = u(3, 3, 2, 6)
    d = lambda a: a.astype(np.float64)
    dx_strided = conv_input_grad(d(dy_strided), d(w), (6, 6), (2, 2), ((0, 1), (0, 1)))
    dx_same = conv_input_grad(d(dy_same), d(w), (6, 6), (1, 1), ((1, 1), (1, 1)))
    dw_unread = conv_kernel_grad(d(x), d(dy_unread), (3, 3), (2, 2), ((0, 0), (0, 0)))
    dw_grouped = np.concatenate(
        [conv_kernel_grad(d(xg[..., 2 * g:2 * g + 2]), d(dyg[..., 3 * g:3 * g + 3]), (3, 3),
                          (1, 1), ((1, 1), (1, 1))) for g in range(2)], axis=3)
    dx_grouped = np.concatenate(
        [conv_input_grad(d(dyg[..., 3 * g:3 * g + 3]), d(wg[..., 3 * g:3 * g + 3]), (5, 5), (1, 1),
                         ((1, 1), (1, 1))) for g in range(2)], axis=3)
    return ([x, w, dy_strided, dy_same, dy_unread, xg, dyg, wg],
            [f32(dx_strided), f32(dx_same), f32(dw_unread), f32(dw_grouped), f32(dx_grouped)])


def case_xla_gpu_gemm():
    """cuBLAS calls: alpha * dot (+ beta * c) (+ bias), then relu or the
    tanh form of GELU, computed in float64."""
    local = np.random.default_rng(20261127)
    a = f32(local.uniform(-1, 1, (2, 3, 5)))
    b = f32(local.uniform(-1, 1, (2, 4, 5)))
    x = f32(local.uniform(-1, 1, (3, 6)))
    y = f32(local.uniform(-1, 1, (6, 4)))
    c = f32(local.uniform(-1, 1, (3, 4)))
    bias = f32(local.uniform(-1, 1, 4))
    d = lambda p, q: p.astype(np.float64) @ q.astype(np.float64)
    batched = 0.5 * np.einsum("bik,bjk->bij", a.astype(np.float64), b.astype(np.float64))
    accumulated = d(x, y) - 2 * c.astype(np.float64)
    relu = np.maximum(d(x, y) + bias.astype(np.float64), 0)
    v = d(x, y)
    gelu = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    return [a, b, x, y, c, bias], [f32(batched), f32(accumulated), f32(relu), f32(gelu)]


def case_xla_syntax_conv_batch_groups():
    x = f32(rng.uniform(-1, 1, (4, 5, 5, 3)))
    k = f32(rng.uniform(-1, 1, (3, 3, 3, 4)))
    y = f32(rng.uniform(-1, 1, (6, 4, 4, 2)))
    w = f32(rng.uniform(-1, 1, (2, 2, 2, 6)))
    return [x, k, y, w], [conv_batch_groups(x, k, 2, pad=((1, 1), (1, 1))),
                          conv_batch_groups(y, w, 3, stride=(2, 2))]


def case_linalg():
    """cholesky (both triangles) and triangular-solve (each side, each
    triangle, transposed, unit diagonal) over a batch of two, in float64 with
    NumPy's solvers on the triangle XLA reads. Its own generator keeps the
    other modules' data as it was."""
    r = np.random.default_rng(20261127)
    m = r.uniform(-1, 1, (2, 4, 4))
    spd = f32(m @ m.transpose(0, 2, 1) + 4 * np.eye(4))
    b = f32(r.uniform(-1, 1, (2, 4, 3)))
    bt = f32(r.uniform(-1, 1, (2, 3, 4)))
    a = spd.astype(np.float64)
    l = np.linalg.cholesky(a)
    u = l.transpose(0, 2, 1)
    lf, uf = f32(l).astype(np.float64), f32(u).astype(np.float64)
    left_lower = np.linalg.solve(lf, b)
    left_upper_t = np.linalg.solve(uf.transpose(0, 2, 1), b)
    # x tril(a, unit diagonal) = bt  <=>  tril^T x^T = bt^T
    unit_lower = np.tril(a, -1) + np.eye(4)
    right_lower_unit = np.linalg.solve(unit_lower.transpose(0, 2, 1),
                                       bt.transpose(0, 2, 1)).transpose(0, 2, 1)
    # x triu(a)^T = bt  <=>  triu(a) x^T = bt^T
    right_upper_adj = np.linalg.solve(np.triu(a), bt.transpose(0, 2, 1)).transpose(0, 2, 1)
    return [spd, b, bt], [f32(l), f32(u), f32(left_lower), f32(left_upper_t),
                          f32(right_lower_unit), f32(right_upper_adj)]


# Edge-value modules: every binary op on every element type that accepts it,
# over the values where implementations differ (NaN, infinities, signed
# zeros, subnormals, extreme magnitudes, integer min/max). Expectations come
# from exact arithmetic (Python integers, or float64 rounded once to the
# result type) following XLA's operation semantics. These modules draw no
# random numbers from `rng`, so the older modules' data stays as it was.

FLOAT_EDGES = {
    # type: finite values besides +-0, 1, -1 (subnormal, huge, tiny, plain)
    "f32": [0.5, -2.5, 3.0, 1e-40, -1e-40, 3e38, -3e38, 1e-30, -7.0],
    "f64": [0.5, -2.5, 3.0, 5e-324, -1e-310, 1.7e308, -1e300, 1e-300, -7.0],
    "f16": [0.5, -2.5, 3.0, 6e-8, -1e-5, 65504.0, -60000.0, 1e-3, -7.0],
    "bf16": [0.5, -2.5, 3.0, 1e-39, -1e-39, 3e38, -3e38, 1e-30, -7.0],
}


def round_to(a, t):
    """Rounds float64 values to element type t (bf16 as float32 holding bf16 values).

    Every expectation below is an exact or float64 result rounded once here;
    for + - * / the float64 result is itself the exactly rounded one, and
    rounding through float32 to bf16 adds no error (float32 has more than
    twice bf16's precision).
    """
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(all="ignore"):
        if t == "bf16":
            # (bf16_round shifts uint64 arrays; a 0-d one would be a scalar.)
            return bf16_round(a.astype(np.float32).reshape(-1)).reshape(a.shape)
        return a.astype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[t])


def ieee_maximum(x, y):
    """IEEE-754 maximum (StableHLO `maximum`): NaN propagates, +0 is above -0."""
    out = np.where(x > y, x, y)
    zeros = (x == 0) & (y == 0)
    out = np.where(zeros, np.where(np.signbit(x), y, x), out)
    return np.where(np.isnan(x) | np.isnan(y), np.nan, out)


def ieee_minimum(x, y):
    out = np.where(x < y, x, y)
    zeros = (x == 0) & (y == 0)
    out = np.where(zeros, np.where(np.signbit(x), x, y), out)
    return np.where(np.isnan(x) | np.isnan(y), np.nan, out)


def case_edges_clamp():
    xs = [np.nan, -np.inf, -1.0, -0.0, 0.0, 0.5, 2.0, np.inf]
    los = [np.nan, -0.0, 0.0, -1.0]
    his = [np.nan, 0.0, 1.0, np.inf]
    lo, x, hi = (np.array(v, dtype=np.float32) for v in zip(
        *[(a, b, c) for a in los for b in xs for c in his]))
    clamped = ieee_minimum(ieee_maximum(x, lo), hi).astype(np.float32)
    scalar_bounds = ieee_minimum(ieee_maximum(x, np.float32(0)), np.float32(1)).astype(np.float32)
    ixs = [-5, 0, 5, -(2**31), 2**31 - 1]
    ibounds = [(-1, 2), (3, -3), (-(2**31), 2**31 - 1), (0, 0)]
    ilo, ix, ihi = (np.array(v, dtype=np.int32) for v in zip(
        *[(b[0], v, b[1]) for b in ibounds for v in ixs]))
    iclamped = np.minimum(np.maximum(ix, ilo), ihi).astype(np.int32)
    return [lo, x, hi, ilo, ix, ihi], [clamped, iclamped, scalar_bounds]


def select_and_scatter(x, src, size, stride, pad, select):
    """XLA's select-and-scatter on [1,H,W,C] with the given 2-D window."""
    out = np.zeros(x.shape, dtype=np.float64)
    _, oh, ow, channels = src.shape
    for i, j, c in np.ndindex(oh, ow, channels):
        chosen = None
        for r, s in np.ndindex(*size):
            p, q = i * stride[0] - pad[0] + r, j * stride[1] - pad[1] + s
            if not (0 <= p < x.shape[1] and 0 <= q < x.shape[2]):
                continue  # padding is never chosen
            if chosen is None or not select(x[0, chosen[0], chosen[1], c], x[0, p, q, c]):
                chosen = (p, q)
        out[0, chosen[0], chosen[1], c] += src[0, i, j, c]
    return out.astype(np.float32)


def case_edges_select_and_scatter():
    hw = [[(h * 7 + w * 3) % 4 for w in range(6)] for h in range(5)]
    x = np.array([[[[v, 3 - v] for v in row] for row in hw]], dtype=np.float32)
    x[0, 0, 1, 0], x[0, 3, 4, 1] = np.nan, np.nan
    x[0, 2, 2, 0], x[0, 2, 3, 0] = -0.0, 0.0
    x[0, 4, 0, 1], x[0, 4, 1, 1] = 0.0, -0.0
    padded = np.arange(1, 19, dtype=np.float32).reshape(1, 3, 3, 2)
    overlapping = np.arange(1, 41, dtype=np.float32).reshape(1, 4, 5, 2) * 16
    ge, gt, le = (lambda a, b: a >= b), (lambda a, b: a > b), (lambda a, b: a <= b)
    return [x, padded, overlapping], [
        select_and_scatter(x, padded, (3, 3), (2, 2), (1, 1), ge),
        select_and_scatter(x, overlapping, (2, 2), (1, 1), (0, 0), gt),
        select_and_scatter(x, padded, (3, 3), (2, 2), (1, 1), le),
        select_and_scatter(x, overlapping, (2, 2), (1, 1), (0, 0), ge),
    ]


UNARY_EDGES = {
    # type: values besides NaN, +-inf, +-0, +-1, +-0.5, +-2.5 (subnormal,
    # huge, where exp overflows, plain)
    "f32": [1e-40, -1e-40, 3e38, -3e38, 10.0, -10.0, 88.0, 89.0, -0.7],
    "f64": [5e-324, -1e-310, 1.7e308, -1.7e308, 10.0, -10.0, 709.0, 710.0, -0.7],
    "f16": [1e-7, -1e-7, 65504.0, -65504.0, 4.0, -4.0, 11.0, 12.0, -0.7],
    "bf16": [1e-39, -1e-39, 3e38, -3e38, 10.0, -10.0, 88.0, 89.0, -0.7],
}


def unary_edges(t):
    """Every float unary op over the edge values of type t, in float64
    rounded once to t."""
    x = round_to([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5]
                 + UNARY_EDGES[t], t)
    d = x.astype(np.float64)
    with np.errstate(all="ignore"):
        afz = np.where(np.isfinite(d), np.copysign(np.floor(np.abs(d) + 0.5), d), d)
        sign = np.where(np.isnan(d), np.nan, np.where(d == 0, d, np.copysign(1.0, d)))
        results = [np.abs(d), -d, sign, np.floor(d), np.ceil(d), afz, np.rint(d),
                   np.sqrt(d), 1 / np.sqrt(d), np.cbrt(d), np.exp(d), np.expm1(d), np.log(d),
                   np.log1p(d), 1 / (1 + np.exp(-d)), np.tanh(d), np.sin(d), np.cos(d),
                   np.tan(d), np.array([math.erf(v) if not np.isnan(v) else np.nan for v in d])]
        rounded = [round_to(r, t) for r in results]  # overflow gives inf
        # The inverse and hyperbolic functions newer XLA has as ops.
        newer = [np.arccos(d), np.arccosh(d), np.arcsin(d), np.arcsinh(d), np.arctanh(d),
                 np.cosh(d), np.sinh(d)]
    return [x], rounded + [np.isfinite(d)] + [round_to(r, t) for r in newer]


def case_edges_unary_f32():
    return unary_edges("f32")


def case_edges_unary_f64():
    return unary_edges("f64")


def case_edges_unary_f16():
    return unary_edges("f16")


def case_edges_unary_bf16():
    return unary_edges("bf16")


def case_edges_unary_int():
    x = np.array([0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 1 << 20], dtype=np.int64)
    u = np.array([0, 1, 7, 2**31, 2**32 - 1, 1 << 20], dtype=np.int64)

    def clz(v, bits):
        v = int(v) & ((1 << bits) - 1)
        return bits - v.bit_length()

    def popcnt(v, bits):
        return bin(int(v) & ((1 << bits) - 1)).count("1")

    s32 = lambda a: np.array([wrap(int(v), np.int32) for v in a], dtype=np.int32)
    u32 = lambda a: np.array([int(v) & 0xFFFFFFFF for v in a], dtype=np.uint32)
    return [x.astype(np.int32), u.astype(np.uint32)], [
        s32([abs(int(v)) for v in x]), s32([-int(v) for v in x]),
        s32([int(v > 0) - int(v < 0) for v in x]), s32([~int(v) for v in x]),
        s32([popcnt(v, 32) for v in x]), s32([clz(v, 32) for v in x]),
        u32(u), u32([1 if v else 0 for v in u]), u32([~int(v) for v in u]),
        u32([popcnt(v, 32) for v in u]), u32([clz(v, 32) for v in u])]


def compare_all(x, y):
    return [x == y, x != y, x < y, x <= y, x > y, x >= y]


def float_edges(t):
    values = round_to([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0] + FLOAT_EDGES[t], t)
    # Every ordered pair, so swapping the operands of a non-commutative op
    # (subtract, divide, power, remainder, atan2) changes the expectation;
    # atan2 sees y and x of every sign, zero and infinity.
    x = np.repeat(values, len(values))
    y = np.tile(values, len(values))
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = [xd + yd, xd - yd, xd * yd, xd / yd, ieee_maximum(xd, yd), ieee_minimum(xd, yd),
                 np.power(xd, yd), np.fmod(xd, yd), np.arctan2(xd, yd)]
    return [x, y], [round_to(e, t) for e in exact] + compare_all(xd, yd)


def case_edges_float_f32():
    return float_edges("f32")


def case_edges_float_f64():
    return float_edges("f64")


def case_edges_float_f16():
    return float_edges("f16")


def case_edges_float_bf16():
    return float_edges("bf16")


INT_TYPES = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
             "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def wrap(v, dtype):
    """Two's-complement wrap of a Python integer into dtype's range."""
    info = np.iinfo(dtype)
    v &= (1 << info.bits) - 1
    return v - (1 << info.bits) if info.min < 0 and v > info.max else v


def int_edges(t):
    dtype = INT_TYPES[t]
    info = np.iinfo(dtype)
    bits, signed = info.bits, info.min < 0
    if signed:
        values = [info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 3, 5, bits - 1, bits,
                  info.max - 1, info.max]
    else:
        values = [0, 1, 2, 3, 5, bits - 1, bits, info.max // 2, info.max // 2 + 1,
                  info.max - 1, info.max]
    pairs = [(a, b) for a in values for b in values]

    def trunc_div(a, b):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q

    # XLA: x / 0 is -1 (all bits set) and x % 0 is x; INT_MIN / -1 is
    # INT_MIN and INT_MIN % -1 is 0. Division truncates toward zero.
    def div(a, b):
        return -1 if b == 0 else trunc_div(a, b)

    def rem(a, b):
        return a if b == 0 else a - trunc_div(a, b) * b

    # Shift amounts are read as unsigned; at or past the bit width a left or
    # logical shift gives 0 and an arithmetic shift fills with the sign bit.
    # The arithmetic shift reads the operand as signed for unsigned types too.
    def amount(b):
        return b & ((1 << bits) - 1)

    def as_signed(a):
        return a - (1 << bits) if a >= 1 << (bits - 1) else a

    def shl(a, b):
        return 0 if amount(b) >= bits else a << amount(b)

    def srl(a, b):
        return 0 if amount(b) >= bits else (a & ((1 << bits) - 1)) >> amount(b)

    def sra(a, b):
        return as_signed(a & ((1 << bits) - 1)) >> min(amount(b), bits - 1)

    fns = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, div, rem, max, min,
           lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, shl, srl, sra]
    outs = [np.array([wrap(f(a, b), dtype) for a, b in pairs], dtype=dtype) for f in fns]
    x = np.array([a for a, _ in pairs], dtype=dtype)
    y = np.array([b for _, b in pairs], dtype=dtype)
    return [x, y], outs + compare_all(x, y)


def case_edges_int_s8():
    return int_edges("s8")


def case_edges_int_s16():
    return int_edges("s16")


def case_edges_int_s32():
    return int_edges("s32")


def case_edges_int_s64():
    return int_edges("s64")


def case_edges_int_u8():
    return int_edges("u8")


def case_edges_int_u16():
    return int_edges("u16")


def case_edges_int_u32():
    return int_edges("u32")


def case_edges_int_u64():
    return int_edges("u64")


def convert_value(v, to):
    """XLA's convert of one value (Python int, or float64 of the source)."""
    if to == "pred":
        return v != 0  # NaN is != 0
    if to in INT_TYPES:
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return wrap(int(v), INT_TYPES[to])  # integers wrap (truncate bits)
        info = np.iinfo(INT_TYPES[to])
        v = float(v)
        if math.isnan(v):
            return 0  # floats saturate and NaN becomes 0
        if math.isinf(v):
            return info.max if v > 0 else info.min
        return min(max(math.trunc(v), info.min), info.max)
    return v  # to a float type: rounded by round_to


def convert_case(values, src, targets):
    outs = []
    for to in targets:
        if to == "pred":
            outs.append(np.array([convert_value(v, to) for v in values], dtype=np.bool_))
        elif to in INT_TYPES:
            outs.append(np.array([convert_value(v, to) for v in values], dtype=INT_TYPES[to]))
        else:
            # Integers convert to float64 exactly or correctly rounded (Python
            # float(int)); the values avoid the ties where rounding through
            # float64 or float32 first would change the result.
            exact = [float(v) for v in values]
            outs.append(round_to(exact, to))
    return outs


def case_edges_convert():
    s64, u64 = np.iinfo(np.int64), np.iinfo(np.uint64)
    s32 = np.iinfo(np.int32)
    xf = f32([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 127.9, 128, -128.5,
              -129, 255.5, 256, 32767.5, 65535.9, 65536, -32769, 2147483520, 2147483648,
              -2147483648, -3e9, 4294967040, 4.3e9, 9.2e18, 9.3e18, -9.3e18, 1.9e19, 1e-40,
              65520])
    xd = np.array([np.nan, np.inf, -np.inf, -0.0, 1e300, -1e300, 9.3e18, 9223372036854774784.0,
                   -9223372036854775808.0, -9.3e18, 18446744073709549568.0, 2e19, 1e-310,
                   3.5e38, 65520.0, 65519.0, 1 + 2.0**-24 + 2.0**-50, 0.1, 2147483647.5,
                   -2147483648.9])
    xh = np.array([np.nan, np.inf, -np.inf, -0.0, 65504, -65504, 6e-8, 127.5, -128.5, 300],
                  dtype=np.float16)
    xb = bf16_round(f32([np.nan, np.inf, -np.inf, -0.0, 3.38e38, 1e-39, 40000, -40000, 98304,
                         1.0078125]))
    i64 = np.array([s64.min, s64.max, -1, 0, 2**53 + 1, 2**24 + 1, -(2**24 + 1), 65519, 65520,
                    300], dtype=np.int64)
    q64 = np.array([0, 1, u64.max, 2**63, 2**63 - 1, 2**53 + 1, 2**32, 255], dtype=np.uint64)
    i32 = np.array([s32.min, s32.max, -1, 0, 16777217, 65520, -129, 2049], dtype=np.int32)
    i8 = np.array([-128, 127, -1, 0, 1, -7], dtype=np.int8)
    q8 = np.array([0, 255, 128, 127, 1, 200], dtype=np.uint8)
    p = np.array([True, False, True, False])
    # f64 -> f16 is rounded once (as LLVM's fptrunc does); these values give
    # the same result when rounded through float32 first. XLA converts f64 to
    # bf16 through float32, as round_to does.
    for v in xd:
        with np.errstate(all="ignore"):
            assert np.isnan(v) or np.float16(v) == np.float16(np.float32(v)), v
    floats = lambda a: [float(v) for v in a]  # noqa: E731
    ints = lambda a: [int(v) for v in a]  # noqa: E731
    outs = (convert_case(floats(xf), "f32", ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
                                              "pred", "f16", "bf16", "f64"])
            + convert_case(floats(xd), "f64", ["s32", "s64", "u32", "u64", "f32", "f16", "bf16"])
            + convert_case(floats(xh), "f16", ["s8", "u8", "s32", "f32", "bf16", "f64", "pred"])
            + convert_case(floats(xb), "bf16", ["s16", "u16", "s64", "f32", "f16", "f64"])
            + convert_case(ints(i64), "s64", ["f32", "f64", "f16", "s8", "u16", "u64", "pred"])
            + convert_case(ints(q64), "u64", ["f32", "f64", "s64", "s32"])
            + convert_case(ints(i32), "s32", ["f32", "f16", "bf16", "s8", "u32", "u64"])
            + convert_case(ints(i8), "s8", ["u64", "s64", "u8", "f32"])
            + convert_case(ints(q8), "u8", ["s8", "s32", "f16"])
            + convert_case([int(v) for v in p], "pred", ["f32", "s32", "u8", "bf16"]))
    return [xf, xd, xh, xb, i64, q64, i32, i8, q8, p], outs


# The structured ops on the element types beyond f32/s32. Float data are
# small multiples of 1/2 (exact in bf16 and f16, and every sum of products
# exact in float32), so the float64 result rounded once to the output type
# is what XLA gives whatever the accumulation order. Integer results wrap
# in the element type.

STRUCT_TYPES = ["bf16", "f16", "f64", "u8", "s16", "u16", "u64"]


def struct_data(t, shape, rng_t, nonzero=False):
    if t in INT_TYPES:
        info = np.iinfo(INT_TYPES[t])
        lo, hi = (info.min, info.max) if info.bits <= 16 else (0, 2**64 - 1)
        v = [int(rng_t.integers(lo, hi, endpoint=True, dtype=np.uint64 if hi > 2**63 else np.int64))
             for _ in range(int(np.prod(shape)))]
        return np.array(v, dtype=INT_TYPES[t]).reshape(shape)
    v = rng_t.integers(1, 17, shape) / 2.0
    v *= np.where(rng_t.random(shape) < 0.5, -1, 1)
    if not nonzero:
        v.flat[rng_t.integers(0, v.size)] = 0.0
    return round_to(v, t)


def exact(a):
    """Python integers (object array) or float64 values of a."""
    return a.astype(object) if a.dtype.kind in "iu" else a.astype(np.float64)


def to_result(v, t):
    if t in INT_TYPES:
        return np.array([wrap(int(e), INT_TYPES[t]) for e in v.flat], dtype=INT_TYPES[t]).reshape(v.shape)
    return round_to(v, t)


def case_types_dot():
    rng_t = np.random.default_rng(1401)
    ins, outs = [], []
    for t in STRUCT_TYPES:
        a = struct_data(t, (3, 4), rng_t, nonzero=True)
        b = struct_data(t, (4, 2), rng_t, nonzero=True)
        if t == "f64":
            a[1, 2] = np.inf  # a row of infinities, one NaN where +inf meets -inf
        if t == "f16":
            a[2, 0] = np.nan
        ins += [a, b]
        outs += [to_result(exact(a).dot(exact(b)), t), to_result(exact(b).T.dot(exact(a).T), t)]
    return ins, outs


def conv_exact(x, k, stride):
    """x [1,H,W,C], k [3,3,C,O], pad 1 on each side -> [1,OH,OW,O]."""
    xp = np.zeros((1, x.shape[1] + 2, x.shape[2] + 2, x.shape[3]), dtype=x.dtype)
    xp[:, 1:-1, 1:-1, :] = x
    oh = (xp.shape[1] - 3) // stride + 1
    ow = (xp.shape[2] - 3) // stride + 1
    out = np.zeros((1, oh, ow, k.shape[3]), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            patch = xp[0, i * stride:i * stride + 3, j * stride:j * stride + 3, :]
            for o in range(k.shape[3]):
                out[0, i, j, o] = (patch * k[:, :, :, o]).sum()
    return out


def case_types_convolution():
    rng_t = np.random.default_rng(1402)
    ins, outs = [], []
    for t in STRUCT_TYPES:
        x = struct_data(t, (1, 4, 4, 2), rng_t, nonzero=True)
        k = struct_data(t, (3, 3, 2, 3), rng_t, nonzero=True)
        ins += [x, k]
        outs += [to_result(conv_exact(exact(x), exact(k), 1), t),
                 to_result(conv_exact(exact(x), exact(k), 2), t)]
    return ins, outs


def fold(values, init, fn):
    acc = init
    for v in values:
        acc = fn(acc, v)
    return acc


def case_types_reduce():
    rng_t = np.random.default_rng(1403)
    ins, outs = [], []
    for t in STRUCT_TYPES:
        x = struct_data(t, (4, 6), rng_t)
        if t in INT_TYPES:
            info = np.iinfo(INT_TYPES[t])
            x[0, 1], x[1, 2], x[2, 3] = info.min, info.max, info.max
            lo, hi = int(info.min), int(info.max)
            mx = lambda a, b: max(a, b)  # noqa: E731
            mn = lambda a, b: min(a, b)  # noqa: E731
        else:
            x[0, 1] = -0.0     # sign of zero lost in a sum started from +0
            x[1, 2] = np.inf   # row sum inf; column max inf
            x[2, 0] = np.nan   # propagates through sum, max and min
            x[3, 4], x[3, 5] = np.inf, -np.inf  # sum NaN, min -inf
            lo, hi = -np.inf, np.inf
            mx = lambda a, b: ieee_maximum(np.float64(a), np.float64(b))  # noqa: E731
            mn = lambda a, b: ieee_minimum(np.float64(a), np.float64(b))  # noqa: E731
        e = exact(x)
        add = lambda a, b: a + b  # noqa: E731
        zero = 0 if t in INT_TYPES else 0.0
        ins.append(x)
        with np.errstate(invalid="ignore"):  # inf + -inf
            outs += [to_result(np.array([fold(r, zero, add) for r in e]), t),
                     to_result(np.array([fold(c, lo, mx) for c in e.T]), t),
                     to_result(np.array([fold(r, hi, mn) for r in e]), t),
                     to_result(np.array(fold(e.flat, zero, add)), t)]
    return ins, outs


def case_types_sort():
    rng_t = np.random.default_rng(1404)
    ins, outs = [], []
    for t in STRUCT_TYPES:
        x = struct_data(t, (2, 8), rng_t)
        if t in INT_TYPES:
            info = np.iinfo(INT_TYPES[t])
            x[0, 2], x[0, 5], x[1, 1], x[1, 6] = info.max, info.min, info.min, x[1, 3]
        else:
            # Equal keys (+0 and -0 compare equal) keep their order.
            x[0, 1], x[0, 4], x[0, 6] = 0.0, -0.0, 0.0
            x[1, 0], x[1, 5], x[1, 7] = np.inf, -np.inf, 1e-39 if t == "bf16" else 1e-6
            x[1, 7] = round_to(x[1, 7], t)
        ins.append(x)
        e = exact(x)
        up, down, perm = np.empty_like(x), np.empty_like(x), np.empty(x.shape, dtype=np.int32)
        for r in range(2):
            order = sorted(range(8), key=lambda i: e[r, i])  # Python's sort is stable
            up[r] = x[r, order]
            perm[r] = order
        for c in range(8):
            order = sorted(range(2), key=lambda i: e[i, c], reverse=True)  # still stable
            down[:, c] = x[order, c]
        outs += [up, down, perm]
    return ins, outs


def case_types_gather():
    rng_t = np.random.default_rng(1405)
    index_types = {"bf16": np.uint8, "f16": np.int16, "f64": np.uint64, "u8": np.int32,
                   "s16": np.uint16, "u16": np.int64, "u64": np.uint32}
    index_values = {np.uint8: [4, 0, 200, 2], np.int16: [-3, 1, 4, 7], np.uint64: [3, 2**32 + 1, 0, 1],
                    np.int32: [2, 2, -1, 5], np.uint16: [65535, 1, 0, 3], np.int64: [-(2**40), 4, 1, 2**40],
                    np.uint32: [0, 4294967295, 3, 1]}
    ins, outs = [], []
    for t in STRUCT_TYPES:
        table = struct_data(t, (5, 3), rng_t)
        if t not in INT_TYPES:
            table[0, 0], table[1, 1], table[4, 2], table[2, 0] = np.nan, -np.inf, -0.0, np.inf
        ids = np.array(index_values[index_types[t]], dtype=index_types[t])
        # Start indices clamp into [0, 4] (rows of a 5-row table, one at a time).
        rows = table[[min(max(int(i), 0), 4) for i in ids]]
        ins += [table, ids]
        outs.append(rows)
    return ins, outs


def write_case(case, inputs, outputs):
    """NAME/in_K.npy and NAME/expected_K.npy, replacing what was there."""
    folder = os.path.join(HERE, case)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    for i, a in enumerate(inputs):
        np.save(os.path.join(folder, f"in_{i}.npy"), np.array(a, order="C"))
    for i, a in enumerate(outputs):
        np.save(os.path.join(folder, f"expected_{i}.npy"), np.array(a, order="C"))


def main():
    for name, fn in sorted(globals().items()):
        if not name.startswith("case_"):
            continue
        case = name[len("case_"):]
        inputs, outputs = fn()
        write_case(case, inputs, outputs)
        print(f"{case}: {len(inputs)} inputs, {len(outputs)} outputs")


if __name__ == "__main__":
    main()
