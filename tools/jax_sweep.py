#!/usr/bin/env python3
"""Checks Kiln against JAX on the modules JAX and XLA's CPU compiler emit for
a sweep of jax.numpy, lax and model programs: elementwise math, integer
ops, reductions, scans and loops, gathers and scatters, convolutions and
their gradients, pooling, random numbers, linear algebra, a transformer
block and its gradient, a CNN training step, Adam. Each program is jitted
on JAX's CPU backend; its lowered module (what JAX hands XLA) and its
optimized module (after XLA's passes) are run with `kiln run` on the same
inputs and compared with JAX's outputs. Prints one line per module that
fails to read, fails to run or differs, then the counts.

JAX is not a dependency of Kiln: run this with a Python that has jax[cpu]
(benchmarks/fashion_mnist_vs_torch.py makes one in build/peers-venv):

    build/peers-venv/bin/python tools/jax_sweep.py [--kiln build/bin/kiln] [--out DIR]
"""
import argparse
import os
import re
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(1)
f32 = np.float32
x = rng.standard_normal((4, 6)).astype(f32)
y = rng.standard_normal((6, 5)).astype(f32)
v = rng.standard_normal(16).astype(f32)
iv = rng.integers(-50, 50, 16).astype(np.int32)
img = rng.standard_normal((2, 3, 8, 8)).astype(f32)   # NCHW
ker = rng.standard_normal((4, 3, 3, 3)).astype(f32)   # OIHW
key = jax.random.PRNGKey(0)


def attention(q, k, vv):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool)), s, -1e9)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), vv)

def layer_norm(t, g, b):
    m = t.mean(-1, keepdims=True); var = ((t - m) ** 2).mean(-1, keepdims=True)
    return (t - m) * lax.rsqrt(var + 1e-5) * g + b

def block(params, t):
    wq, wk, wv, wo, w1, w2, g, b = params
    h = layer_norm(t, g, b)
    a = attention(h @ wq, h @ wk, h @ wv) @ wo
    t = t + a
    h = layer_norm(t, g, b)
    return t + jax.nn.gelu(h @ w1) @ w2

D = 16
P = [rng.standard_normal(s).astype(f32) * 0.2 for s in [(D,D)]*4 + [(D,4*D), (4*D,D)]] + [np.ones(D, f32), np.zeros(D, f32)]
T = rng.standard_normal((2, 8, D)).astype(f32)

def adam_step(p, g, m, vv):
    m = 0.9 * m + 0.1 * g; vv = 0.999 * vv + 0.001 * g * g
    return p - 1e-3 * m / (jnp.sqrt(vv) + 1e-8), m, vv

def cnn(params, a):
    k1, k2, w = params
    h = jax.nn.relu(lax.conv_general_dilated(a, k1, (1,1), "SAME", dimension_numbers=("NHWC","HWIO","NHWC")))
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1,2,2,1), (1,2,2,1), "VALID")
    h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1,1), "SAME", dimension_numbers=("NHWC","HWIO","NHWC")))
    return h.reshape(h.shape[0], -1) @ w

CP = [rng.standard_normal((3,3,3,8)).astype(f32)*0.2, rng.standard_normal((3,3,8,8)).astype(f32)*0.2, rng.standard_normal((128,10)).astype(f32)*0.1]
IMG = rng.standard_normal((2,8,8,3)).astype(f32)
LBL = np.array([1, 7])


CASES = {
 "expm1_log1p": (lambda a: (jnp.expm1(a), jnp.log1p(jnp.abs(a))), (v,)),
 "trig": (lambda a: (jnp.sin(a), jnp.cos(a), jnp.tan(a), jnp.arctan2(a, a+1)), (v,)),
 "hyper": (lambda a: (jnp.sinh(a), jnp.cosh(a), jnp.arcsinh(a), jnp.arctanh(jnp.tanh(a)*0.9)), (v,)),
 "erf": (lambda a: (jax.scipy.special.erf(a), jax.scipy.special.erfinv(jnp.tanh(a)*0.9)), (v,)),
 "lgamma": (lambda a: (jax.scipy.special.gammaln(jnp.abs(a)+0.5), jax.scipy.special.digamma(jnp.abs(a)+0.5)), (v,)),
 "round": (lambda a: (jnp.round(a*3), jnp.rint(a*3), jnp.trunc(a*3), jnp.sign(a)), (v,)),
 "intdiv": (lambda a: (a // 7, a % 7, jnp.right_shift(a, 2), jnp.left_shift(a, 3), a ** 2), (iv,)),
 "clip": (lambda a: jnp.clip(a, -0.5, 0.5), (v,)),
 "where": (lambda a: jnp.where(a > 0, a, a * 0.1), (v,)),
 "isnan": (lambda a: (jnp.isnan(a / (a - a)), jnp.isinf(1.0/a), jnp.nan_to_num(a / 0.0)), (v,)),
 "matmul": (lambda a, b: a @ b, (x, y)),
 "batched_matmul": (lambda a: jnp.einsum("bij,bjk->bik", a, a), (rng.standard_normal((3,4,4)).astype(f32),)),
 "var_std": (lambda a: (jnp.var(a, axis=0), jnp.std(a, axis=1)), (x,)),
 "prod_min": (lambda a: (jnp.prod(a, axis=0), jnp.min(a, axis=1), jnp.argmin(a)), (x,)),
 "any_all": (lambda a: (jnp.any(a > 1), jnp.all(a > -5, axis=0)), (x,)),
 "cumprod": (lambda a: jnp.cumprod(a, axis=0), (x,)),
 "cumlogsumexp": (lambda a: lax.cumlogsumexp(a, axis=1), (x,)),
 "scan": (lambda a: lax.scan(lambda c, t: (c * 0.5 + t, c), 0.0, a)[0], (v,)),
 "fori": (lambda a: lax.fori_loop(0, 5, lambda i, c: c * 1.1 + i, a), (v,)),
 "while": (lambda a: lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.01), (0, a))[1], (v,)),
 "cond": (lambda a: lax.cond(a.sum() > 0, lambda t: t * 2, lambda t: t - 1, a), (v,)),
 "switch": (lambda a: lax.switch(2, [lambda t: t, lambda t: t*2, lambda t: -t], a), (v,)),
 "gather": (lambda a: a[jnp.array([3, 0, 2])], (x,)),
 "gather2": (lambda a: a[:, jnp.array([5, 1])], (x,)),
 "scatter_add": (lambda a: a.at[jnp.array([0, 2, 0])].add(1.0), (x,)),
 "scatter_set": (lambda a: a.at[1, 2].set(9.0), (x,)),
 "dynamic_slice": (lambda a: lax.dynamic_slice(a, (1, 2), (2, 3)), (x,)),
 "dyn_update": (lambda a: lax.dynamic_update_slice(a, jnp.ones((2, 2), f32), (3, 5)), (x,)),
 "pad": (lambda a: jnp.pad(a, ((1, 2), (0, 1)), mode="reflect"), (x,)),
 "roll": (lambda a: jnp.roll(a, 2, axis=1), (x,)),
 "flip_rot": (lambda a: (jnp.flip(a), jnp.rot90(a)), (x,)),
 "tile_repeat": (lambda a: (jnp.tile(a, (2, 1)), jnp.repeat(a, 2, axis=0)), (x,)),
 "concat_stack": (lambda a: (jnp.concatenate([a, a], 1), jnp.stack([a, a])), (x,)),
 "triu": (lambda a: (jnp.triu(a), jnp.tril(a, -1)), (x,)),
 "conv_nchw": (lambda a, k: lax.conv(a, k, (1, 1), "SAME"), (img, ker)),
 "conv_strided": (lambda a, k: lax.conv_general_dilated(a, k, (2, 2), "VALID", rhs_dilation=(1,1)), (img, ker)),
 "conv_grad": (lambda a, k: jax.grad(lambda q, w: lax.conv(q, w, (1, 1), "SAME").sum(), argnums=(0, 1))(a, k), (img, ker)),
 "depthwise": (lambda a: lax.conv_general_dilated(a, jnp.ones((3,1,3,3), f32), (1,1), "SAME", feature_group_count=3), (img,)),
 "avgpool": (lambda a: lax.reduce_window(a, 0.0, lax.add, (1,1,2,2), (1,1,2,2), "VALID") / 4, (img,)),
 "maxpool_grad": (lambda a: jax.grad(lambda q: lax.reduce_window(q, -jnp.inf, lax.max, (1,1,2,2), (1,1,2,2), "VALID").sum())(a), (img,)),
 "mlp_grad": (lambda a, b: jax.grad(lambda w: jnp.tanh(a @ w).sum())(b), (x, y)),
 "softmax_ce": (lambda a: -jax.nn.log_softmax(a)[jnp.arange(4), jnp.array([0,1,2,3])].mean(), (x,)),
 "random_uniform": (lambda k: jax.random.uniform(k, (5,)), (key,)),
 "random_normal": (lambda k: jax.random.normal(k, (3, 2)), (key,)),
 "random_bits": (lambda k: jax.random.bits(k, (4,)), (key,)),
 "random_perm": (lambda k: jax.random.permutation(k, 8), (key,)),
 "fft": (lambda a: jnp.abs(jnp.fft.fft(a)), (v,)),
 "complex_mul": (lambda a: jnp.real((a + 1j * a) * (a - 2j)), (v,)),
 "bf16_mm": (lambda a, b: (a.astype(jnp.bfloat16) @ b.astype(jnp.bfloat16)).astype(f32), (x, y)),
 "f16_ops": (lambda a: (a.astype(jnp.float16) * 3 + 1).astype(f32), (v,)),
 "int64_ops": (lambda a: (a.astype(jnp.int64) * 10**10) // 3, (iv,)),
 "uint_ops": (lambda a: (a.astype(jnp.uint32) >> 3) ^ 0xFFFF, (iv,)),
 "popcnt": (lambda a: (lax.population_count(a), lax.clz(a)), (iv,)),
 "argsort_stable": (lambda a: jnp.argsort(a // 10, stable=True), (iv,)),
 "unique_size": (lambda a: jnp.unique(a // 10, size=8, fill_value=0), (iv,)),
 "searchsorted": (lambda a: jnp.searchsorted(jnp.sort(a), a[:4]), (v,)),
 "histogram": (lambda a: jnp.histogram(a, bins=4, range=(-2,2))[0], (v,)),
 "bincount": (lambda a: jnp.bincount(jnp.abs(a) % 5, length=5), (iv,)),
 "segment_sum": (lambda a: jax.ops.segment_sum(a, jnp.array([0,0,1,1,2,2,3,3,0,1,2,3,0,1,2,3]), 4), (v,)),
 "reduce_precision": (lambda a: lax.reduce_precision(a, 5, 10), (v,)),
 "nextafter": (lambda a: jnp.nextafter(a, a + 1), (v,)),
 "logaddexp": (lambda a: jnp.logaddexp(a, a*2), (v,)),
 "polyval": (lambda a: jnp.polyval(jnp.array([1., 2, 3], f32), a), (v,)),
 "interp": (lambda a: jnp.interp(a, jnp.linspace(-2, 2, 5), jnp.arange(5.)), (v,)),
 "norm": (lambda a: (jnp.linalg.norm(a), jnp.linalg.norm(a, axis=0, ord=1)), (x,)),
 "outer_kron": (lambda a: (jnp.outer(a[:3], a[:4]), jnp.kron(a[:2], a[:3])), (v,)),
 "vmap_dot": (lambda a: jax.vmap(jnp.dot)(a, a), (x,)),
 "checkpoint": (lambda a: jax.grad(jax.checkpoint(lambda t: jnp.sin(t).sum()))(a), (v,)),
 "eig_general": (lambda a: jnp.abs(jnp.linalg.eigvals(a)), (rng.standard_normal((3,3)).astype(f32),)),
 "convolve1d": (lambda a: jnp.convolve(a, jnp.array([1., 2, 1], f32)), (v,)),
 "correlate": (lambda a: jnp.correlate(a, a[:4], mode="same"), (v,)),
 "resize": (lambda a: jax.image.resize(a, (2, 3, 4, 4), "bilinear"), (img,)),
 "matrix_power": (lambda a: jnp.linalg.matrix_power(a, 3), (rng.standard_normal((4,4)).astype(f32),)),
 "nonzero_size": (lambda a: jnp.nonzero(a > 0, size=6, fill_value=-1)[0], (v,)),
 "assoc_scan": (lambda a: lax.associative_scan(jnp.add, a), (v,)),
 "lax_map": (lambda a: lax.map(lambda t: t.sum(), a), (x,)),
 "categorical": (lambda k: jax.random.categorical(k, jnp.log(jnp.arange(1., 5.))), (key,)),
 "randint": (lambda k: jax.random.randint(k, (6,), 0, 10), (key,)),
 "shuffle_choice": (lambda k: jax.random.choice(k, 10, (3,), replace=False), (key,)),
 "dropout_like": (lambda k, a: jnp.where(jax.random.bernoulli(k, 0.5, a.shape), a, 0), (key, v)),
 "igamma": (lambda a: jax.scipy.special.gammainc(jnp.abs(a)+1, jnp.abs(a)), (v,)),
 "betainc": (lambda a: jax.scipy.special.betainc(2., 3., jax.nn.sigmoid(a)), (v,)),
 "logsumexp_b": (lambda a: jax.scipy.special.logsumexp(a, b=jnp.abs(a)), (v,)),
 "sort_multi": (lambda a, b: lax.sort((a, b), num_keys=1), (v, iv)),
 "top_k_int": (lambda a: lax.top_k(a, 4), (iv,)),
 "argmax_nan": (lambda a: jnp.argmax(jnp.where(a > 1, jnp.nan, a)), (v,)),
 "cumsum_rev": (lambda a: jnp.cumsum(a[::-1])[::-1], (v,)),
 "meshgrid": (lambda a: jnp.stack(jnp.meshgrid(a[:3], a[:4])), (v,)),
 "einsum3": (lambda a, b: jnp.einsum("ij,jk,kl->il", a, b, b.T), (x, y)),
 "dot_general_batch": (lambda a: lax.dot_general(a, a, (((2,), (1,)), ((0,), (0,)))), (rng.standard_normal((2,3,3)).astype(f32),)),
 "bitcast_convert": (lambda a: lax.bitcast_convert_type(a, jnp.int32), (v,)),
 "bitcast_convert_narrow": (lambda a: lax.bitcast_convert_type(a, jnp.uint16), (v,)),
 "expand_dims_squeeze": (lambda a: jnp.squeeze(jnp.expand_dims(a, 0)).T, (x,)),
 "clamp_int": (lambda a: jnp.clip(a, -10, 10), (iv,)),
 "hessian": (lambda a: jax.hessian(lambda t: (t ** 3).sum())(a[:3]), (v,)),
 "jvp": (lambda a: jax.jvp(jnp.sin, (a,), (jnp.ones_like(a),))[1], (v,)),
 "reduce_window_sum_pad": (lambda a: lax.reduce_window(a, 0., lax.add, (3,), (1,), "SAME"), (v,)),
 "reduce_and": (lambda a: jnp.all(a > -1) & jnp.any(a > 2), (v,)),
 "mod_float": (lambda a: (jnp.mod(a, 0.7), jnp.fmod(a, 0.7), jnp.remainder(-a, 0.3)), (v,)),
 "pow_float": (lambda a: (jnp.power(jnp.abs(a), 1.5), jnp.power(a, 3), jnp.sqrt(jnp.abs(a)), lax.rsqrt(jnp.abs(a)+1), jnp.cbrt(a)), (v,)),
 "int_pow": (lambda a: lax.integer_pow(a, 5), (v,)),
 "is_finite": (lambda a: jnp.isfinite(a / (a > 0)), (v,)),
 "u8_image": (lambda a: (a.astype(jnp.uint8) * 2).astype(f32), (jnp.abs(v)*50,)),
 "s8_dot": (lambda a: lax.dot(a.astype(jnp.int8), a.astype(jnp.int8).T, preferred_element_type=jnp.int32), (iv.reshape(4,4),)),
 "bool_ops": (lambda a: ((a > 0) ^ (a < 1)) | ~(a > 2), (v,)),
 "cond_tuple": (lambda a: lax.cond(a[0] > 0, lambda t: (t, t.sum()), lambda t: (-t, t.max()), a), (v,)),
 "while_tuple_dyn": (lambda a: lax.fori_loop(0, 4, lambda i, c: lax.dynamic_update_slice(c, jnp.ones((1,), f32) * i, (i,)), a), (v,)),
 "select_n": (lambda a: lax.select_n(jnp.clip(a.astype(jnp.int32), 0, 2), a, a*2, a*3), (jnp.abs(v)*1.5,)),
 "round_even": (lambda a: lax.round(a * 2.5, lax.RoundingMethod.TO_NEAREST_EVEN), (v,)),
 "nextafter_f64": (lambda a: jnp.nextafter(a.astype(jnp.float64), 0.0), (v,)),
 "float64_mix": (lambda a: (a.astype(jnp.float64) ** 2).sum() / 3, (v,)),
 "psum_vmap": (lambda a: jax.vmap(lambda t: lax.psum(t, "i"), axis_name="i")(a), (v,)),
 "argmin_axis": (lambda a: jnp.argmin(a, axis=0), (x,)),
 "take_along": (lambda a: jnp.take_along_axis(a, jnp.argsort(a, axis=1), axis=1), (x,)),
 "put_along": (lambda a: jnp.put_along_axis(a, jnp.zeros((4,1), jnp.int32), 5.0, axis=1, inplace=False), (x,)),
 "transformer_fwd": (lambda *a: block(a[:8], a[8]), (*P, T)),
 "transformer_grad": (lambda *a: jax.grad(lambda p, t: block(p, t).sum())(list(a[:8]), a[8]), (*P, T)),
 "adam": (lambda p, g, m, vv: adam_step(p, g, m, vv), (P[0], P[1], P[2], np.abs(P[3]))),
 "cnn_train_step": (lambda k1, k2, w, a: jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, [k1, k2, w],
      jax.grad(lambda ps: -jax.nn.log_softmax(cnn(ps, a))[jnp.arange(2), LBL].mean())([k1, k2, w])), (*CP, IMG)),
 "batchnorm_train": (lambda a: (a - a.mean((0,1,2))) / jnp.sqrt(a.var((0,1,2)) + 1e-5), (IMG,)),
 "dropout_train": (lambda k, a: jnp.where(jax.random.bernoulli(k, 0.9, a.shape), a / 0.9, 0), (key, T)),
 "scan_rnn": (lambda w, xs: lax.scan(lambda h, t: (jnp.tanh(h @ w + t), h.sum()), jnp.zeros(D, f32), xs), (P[0], T[0])),
 "vmap_grad": (lambda w, xs: jax.vmap(jax.grad(lambda t: jnp.tanh(t @ w).sum()))(xs), (P[0], T[0])),
 "embedding": (lambda e, ids: e[ids].sum(0), (P[4], np.array([0, 3, 3, 15], np.int32))),
 "one_hot_ce": (lambda lg: optax_like(lg), (rng.standard_normal((4, 10)).astype(f32),)),
}
def optax_like(lg):
    return -(jax.nn.one_hot(jnp.arange(4), 10) * jax.nn.log_softmax(lg)).sum(-1).mean()


def run(name, fn, args, kiln, out):
    """The failures of one program's two modules, as (form, reason)."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    jitted = jax.jit(fn)
    lowered = jitted.lower(*args)
    texts = {"lowered": lowered.as_text(dialect="hlo"), "optimized": lowered.compile().as_text()}
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jitted(*args))]
    inputs = []
    for i, a in enumerate(args):
        path = os.path.join(d, f"in_{i}.npy")
        np.save(path, np.asarray(a))
        inputs.append(path)
    failures = []
    for form, text in texts.items():
        module = os.path.join(d, f"{form}.hlo")
        with open(module, "w") as f:
            f.write(text)
        outputs = os.path.join(d, f"out_{form}")
        os.makedirs(outputs, exist_ok=True)
        for old in os.listdir(outputs):
            os.remove(os.path.join(outputs, old))
        r = subprocess.run([kiln, "run", module, "--output_dir=" + outputs] +
                           [f"--input={p}" for p in inputs], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            failures.append((form, (r.stderr.strip().splitlines() or ["?"])[-1][:240]))
            continue
        got = sorted(os.listdir(outputs), key=lambda s: int(re.findall(r"\d+", s)[0]))
        if len(got) != len(want):
            failures.append((form, f"{len(got)} outputs, JAX has {len(want)}"))
            continue
        loose = "bf16" in name or "f16" in name
        for k, (g_path, w) in enumerate(zip(got, want)):
            g = np.load(os.path.join(outputs, g_path))
            if g.shape != w.shape:
                failures.append((form, f"output {k} is {g.shape}, JAX's {w.shape}"))
                break
            if g.dtype.kind in "fc":
                same = np.allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=2e-2 if loose else 1e-3, atol=1e-4, equal_nan=True)
            else:
                same = np.array_equal(g, w)
            if not same:
                failures.append((form, f"output {k} differs from JAX's"))
                break
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--kiln", default=os.path.join(here, "..", "build", "bin", "kiln"))
    p.add_argument("--out", default="/tmp/kiln_jax_sweep", help="where modules and outputs go")
    args = p.parse_args()
    modules = failed = 0
    for name, (fn, inputs) in CASES.items():
        try:
            failures = run(name, fn, inputs, args.kiln, args.out)
        except Exception as e:  # JAX itself could not trace or run it
            print(f"{name}: JAX failed: {e}"[:300])
            continue
        modules += 2
        failed += len(failures)
        for form, why in failures:
            print(f"{name} ({form}): {why}")
    print(f"{modules - failed} of {modules} modules read, ran and matched JAX")
    return 0


if __name__ == "__main__":
    sys.exit(main())
