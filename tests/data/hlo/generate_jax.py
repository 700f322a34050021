#!/usr/bin/env python3
"""Writes the jax_*.hlo modules here: what JAX and XLA's CPU compiler emit
for common jax.numpy and lax programs, with XLA's own results as the
expectation.

Each case is jitted on JAX's CPU backend twice over: NAME.hlo is the module
XLA's CPU compiler runs after its passes (fusions, bitcasts, its TopK and
LAPACK calls, layouts, stack-frame tables), NAME_lowered.hlo the module JAX
hands to XLA. NAME/in_K.npy are the arguments and NAME/expected_K.npy the
outputs XLA computed. Modules whose lowered form XLA computes differently
from the HLO semantics (bf16 arithmetic kept in f32) keep only their
optimized form.

JAX is not a dependency of Kiln: run this with a Python that has jax[cpu]
(benchmarks/fashion_mnist_vs_torch.py makes one in build/peers-venv):

    build/peers-venv/bin/python tests/data/hlo/generate_jax.py
"""
import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map  # noqa: E402
except ImportError:
    from jax.experimental.shard_map import shard_map  # noqa: E402

jax.config.update("jax_enable_x64", True)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_expected  # noqa: E402
rng = np.random.default_rng(20261127)
f32 = np.float32

x = np.linspace(-3, 3, 24, dtype=f32).reshape(4, 6)
m = rng.standard_normal((5, 5)).astype(f32)
spd = (m @ m.T + 5 * np.eye(5)).astype(f32)
spd_batch = np.stack([spd, (spd.T + np.eye(5, dtype=f32)) * 0.5]).astype(f32)
not_pd = spd.copy()
not_pd[2, 2] = -40.0
v = np.arange(10, dtype=np.int32)
img = rng.standard_normal((2, 8, 8, 3)).astype(f32)
ker = rng.standard_normal((3, 3, 3, 4)).astype(f32)
tri = np.tril(spd) + np.eye(5, dtype=f32)
rhs = rng.standard_normal((5, 4)).astype(f32)
tall = rng.standard_normal((6, 4)).astype(f32)
# One device: sharding annotations and shard_map over a mesh of one.
MESH = Mesh(np.array(jax.devices()[:1]), ("d",))


def conv(a, k, stride=(1, 1)):
    return lax.conv_general_dilated(a, k, stride, "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def maxpool(a):
    return lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


# name: (function, arguments, keep the lowered form)
CASES = {
    "tanh_sum": (lambda a: jnp.tanh(a).sum(), (x,), True),
    "softmax": (lambda a: jax.nn.softmax(a, axis=-1), (x,), True),
    "logsumexp": (lambda a: jax.nn.logsumexp(a, axis=0), (x,), True),
    "gelu": (lambda a: jax.nn.gelu(a), (x,), True),
    "layer_norm": (lambda a: (a - a.mean(-1, keepdims=True)) /
                   jnp.sqrt(a.var(-1, keepdims=True) + 1e-5), (x,), True),
    "cumsum": (lambda a: jnp.cumsum(a, axis=1), (x,), True),
    "cummax": (lambda a: lax.cummax(a, axis=1), (x,), True),
    "sort": (lambda a: jnp.sort(a, axis=1), (x,), True),
    "argsort": (lambda a: jnp.argsort(a, axis=1), (x,), True),
    "argmax": (lambda a: jnp.argmax(a, axis=1), (x,), True),
    "top_k": (lambda a: lax.top_k(a, 3), (x,), True),
    "median": (lambda a: jnp.median(a, axis=1), (x,), True),
    "approx_max_k": (lambda a: lax.approx_max_k(a, 2), (x,), True),
    "sharding_constraint": (lambda a: lax.with_sharding_constraint(
        a * 2, NamedSharding(MESH, P("d", None))) + 1, (x,), True),
    "shard_map": (lambda a: shard_map(lambda b: b * 3 + lax.psum(b.sum(), "d"), mesh=MESH,
                                      in_specs=P("d", None), out_specs=P("d", None))(a),
                  (x,), True),
    "einsum": (lambda a: jnp.einsum("ij,kj->ik", a, a), (x,), True),
    "cholesky": (lambda a: jnp.linalg.cholesky(a), (spd,), True),
    "cholesky_batch": (lambda a: jnp.linalg.cholesky(a), (spd_batch,), True),
    "cholesky_upper": (lambda a: jax.scipy.linalg.cholesky(a, lower=False), (spd,), True),
    "cholesky_not_pd": (lambda a: jnp.linalg.cholesky(a), (not_pd,), True),
    "solve_lower": (lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True),
                    (tri, rhs), True),
    "solve_upper_trans_unit": (
        lambda a, b: jax.scipy.linalg.solve_triangular(a, b, trans=1, lower=False,
                                                       unit_diagonal=True),
        (tri.T.copy(), rhs), True),
    "solve_right": (lambda a, b: lax.linalg.triangular_solve(a, b, left_side=False, lower=True),
                    (tri, rhs.T.copy()), True),
    "det_slogdet": (lambda a: (jnp.linalg.det(a), *jnp.linalg.slogdet(a)), (m,), True),
    "inv": (lambda a: jnp.linalg.inv(a), (spd,), True),
    "inv_batch_f64": (lambda a: jnp.linalg.inv(a.astype(np.float64)), (spd_batch,), True),
    "solve": (lambda a, b: jnp.linalg.solve(a, b), (m, rhs), True),
    "lu_factor": (lambda a: jax.scipy.linalg.lu_factor(a), (m,), True),
    "qr_reduced": (lambda a: jnp.linalg.qr(a), (tall,), True),
    "qr_complete": (lambda a: jnp.linalg.qr(a, mode="complete"), (tall,), True),
    # Eigenvectors and singular vectors are unique up to sign: the checks
    # are the values, the reconstruction and the vectors' magnitudes.
    "eigh": (lambda a: (lambda w, v: (w, (v * w) @ v.T, jnp.abs(v)))(*jnp.linalg.eigh(a)),
             (spd,), True),
    "eigh_upper_f64": (lambda a: jnp.linalg.eigvalsh(a.astype(np.float64), UPLO="U"),
                       (np.triu(spd),), True),
    "svd": (lambda a: (lambda u, s, vt: (s, (u * s) @ vt, jnp.abs(u), jnp.abs(vt)))(
        *jnp.linalg.svd(a, full_matrices=False)), (tall,), True),
    "svd_full": (lambda a: (lambda u, s, vt: (s, jnp.abs(u[:, :4]), jnp.abs(vt)))(
        *jnp.linalg.svd(a, full_matrices=True)), (tall,), True),
    "svd_values": (lambda a: jnp.linalg.svd(a, compute_uv=False), (m,), True),
    "pinv": (lambda a: jnp.linalg.pinv(a), (tall,), True),
    "cho_solve": (lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b),
                  (spd, rhs), True),
    "conv": (lambda a, k: conv(a, k), (img, ker), True),
    "conv_grads": (lambda a, k: jax.grad(lambda a, k: jnp.tanh(conv(a, k, (2, 2))).sum(),
                                         argnums=(0, 1))(a, k), (img, ker), True),
    "maxpool_grad": (lambda a: jax.grad(lambda a: maxpool(a).sum())(a), (img,), True),
    "avgpool": (lambda a: lax.reduce_window(a, 0., lax.add, (1, 3, 3, 1), (1, 1, 1, 1),
                                            "SAME") / 9, (img,), True),
    "take_along": (lambda a, i: jnp.take_along_axis(a, i, axis=1),
                   (x, np.argsort(-x, axis=1).astype(np.int32)), True),
    "scatter_add": (lambda a, i: a.at[i].add(1.0), (x, np.array([0, 2, 0], np.int32)), True),
    "segment_sum": (lambda a, i: jax.ops.segment_sum(a, i, 3),
                    (x, np.array([0, 2, 1, 0], np.int32)), True),
    "nanmax": (lambda a: jnp.nanmax(jnp.where(a > 1, jnp.nan, a), axis=1), (x,), True),
    "int_ops": (lambda a: (a // 3, a % 3, a << 2, a >> 1, -a, abs(a - 5)), (v,), True),
    "bitcast_convert": (lambda a: lax.bitcast_convert_type(a * 2, np.int32) >> 3, (x,), True),
    "bf16": (lambda a: (a.astype(jnp.bfloat16) * 3).astype(f32), (x,), False),
    "f16_exp": (lambda a: jnp.exp(a.astype(jnp.float16)), (x,), True),
    "while_loop": (lambda a: lax.while_loop(lambda c: c[0] < 10,
                                            lambda c: (c[0] + 1, c[1] * 1.1), (0, a))[1],
                   (x,), True),
    "scan": (lambda a: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(6, f32), a), (x,), True),
    "switch": (lambda i, a: lax.switch(i, [lambda b: b, lambda b: b * 2, lambda b: -b], a),
               (np.int32(1), x), True),
    "grad_mlp": (lambda w, a: jax.grad(lambda w: jnp.tanh(a @ w).sum())(w),
                 (rng.standard_normal((6, 3)).astype(f32), x), True),
    "random_uniform": (lambda k: jax.random.uniform(jax.random.key(k), (4, 3)),
                       (np.uint32(7),), True),
    "random_normal": (lambda k: jax.random.normal(jax.random.key(k), (8,)),
                      (np.uint32(3),), True),
    "rng_bit_generator": (lambda s: lax.rng_bit_generator(s, (4, 4), dtype=np.uint32),
                          (np.array([1, 2], np.uint64),), True),
    "rng_philox": (lambda s: (lax.rng_bit_generator(s, (3, 5), dtype=np.uint64,
                                                    algorithm=lax.RandomAlgorithm.RNG_PHILOX),
                              lax.rng_bit_generator(s, (7,), dtype=np.uint8,
                                                    algorithm=lax.RandomAlgorithm.RNG_PHILOX)),
                   (np.array([5, 2**64 - 1], np.uint64),), True),
    "rng_three_fry": (lambda s: (lax.rng_bit_generator(s, (3, 1, 5), dtype=np.uint32,
                                                       algorithm=lax.RandomAlgorithm.RNG_THREE_FRY),
                                 lax.rng_bit_generator(s, (3,), dtype=np.uint64,
                                                       algorithm=lax.RandomAlgorithm.RNG_THREE_FRY),
                                 lax.rng_bit_generator(s, (), dtype=np.uint16,
                                                       algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)),
                      (np.array([12345678901234, 2**64 - 3], np.uint64),), True),
    "erf_lgamma": (lambda a: (jax.scipy.special.erf(a),
                              jax.scipy.special.gammaln(jnp.abs(a) + 0.5)), (x,), True),
    "pad_reflect": (lambda a: jnp.flip(jnp.pad(a, ((1, 2), (0, 3)), mode="reflect"), 0),
                    (x,), True),
    "dynamic_update": (lambda a, i: lax.dynamic_update_slice(a, jnp.ones((2, 2), f32), (i, i)),
                       (x, np.int32(2)), True),
    "one_hot": (lambda i: jax.nn.one_hot(i, 10), (v,), True),
    "attention": (lambda q: jax.nn.dot_product_attention(q[None], q[None], q[None]),
                  (rng.standard_normal((8, 2, 4)).astype(f32),), True),
    "searchsorted": (lambda a, q: jnp.searchsorted(a, q),
                     (np.sort(x.ravel()), np.array([0.1, -2, 5], f32)), True),
    "remat_grad": (lambda a: jax.grad(jax.checkpoint(lambda a: jnp.sin(jnp.sin(a)).sum()))(a),
                   (x,), True),
}


def entry_parameters(text):
    """How many parameters the entry computation declares."""
    entry = text[text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    return len(set(re.findall(r"parameter\((\d+)\)", entry)))


def write(name, text, args, outputs):
    if entry_parameters(text) != len(args):
        sys.exit(f"{name}: the module takes {entry_parameters(text)} of {len(args)} arguments; "
                 "give every argument a use")
    # Stack frames name this file: by its place in the repository.
    text = text.replace(os.path.dirname(os.path.dirname(os.path.dirname(HERE))) + "/", "")
    with open(os.path.join(HERE, name + ".hlo"), "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    generate_expected.write_case(name, args, outputs)


def main():
    for case, (fn, args, keep_lowered) in CASES.items():
        lowered = jax.jit(fn).lower(*args)
        compiled = lowered.compile()
        outputs = [np.asarray(r) for r in jax.tree_util.tree_leaves(compiled(*args))]
        write(f"jax_{case}", compiled.as_text(), args, outputs)
        if keep_lowered:
            write(f"jax_{case}_lowered", lowered.as_text(dialect="hlo"), args, outputs)
        print(f"jax_{case}: {len(args)} inputs, {len(outputs)} outputs"
              f"{'' if keep_lowered else ' (optimized form only)'}")
    print(f"jax {jax.__version__}")


if __name__ == "__main__":
    main()
