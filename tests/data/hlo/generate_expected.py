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


def main():
    for name, fn in sorted(globals().items()):
        if not name.startswith("case_"):
            continue
        case = name[len("case_"):]
        inputs, outputs = fn()
        folder = os.path.join(HERE, case)
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(folder):
            os.remove(os.path.join(folder, f))
        for i, a in enumerate(inputs):
            np.save(os.path.join(folder, f"in_{i}.npy"), np.array(a, order="C"))
        for i, a in enumerate(outputs):
            np.save(os.path.join(folder, f"expected_{i}.npy"), np.array(a, order="C"))
        print(f"{case}: {len(inputs)} inputs, {len(outputs)} outputs")


if __name__ == "__main__":
    main()
