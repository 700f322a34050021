#!/usr/bin/env python3
"""Mutation testing by hand: does the test suite notice a planted bug?

Each mutation below is the kind of slip a real change could make: a flipped
comparison, a dropped check, swapped arguments, a wrong constant. For each
one the script edits the file, rebuilds the listed targets, runs the listed
tests and restores the file. A mutation is "killed" when a test fails (or
hangs past its timeout), "survived" when every test passes and
"build-failed" when the mutant does not compile.

Run it on a scratch copy of the tree, never on a tree someone is editing:

  tools/mutate.py --source /path/to/copy --build /path/to/copy/build \
      --report mutation-report.md

Builds take /tmp/kiln-build.lock so that they never overlap with another
build on the same machine. Standard library only.
"""

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

BUILD_LOCK = "/tmp/kiln-build.lock"
BUILD_JOBS = "2"


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    description: str
    file: str  # relative to the source root
    find: str  # must occur exactly once in the file
    replace: str
    targets: tuple  # CMake targets to rebuild
    # Each test is "binary", "binary:gtest_filter" or "ctest:regex"; they
    # run in order and the first failure kills the mutant.
    tests: tuple
    timeout: int = 300  # seconds per test command


def M(id, description, file, find, replace, targets, tests, timeout=300):
    return Mutation(id, description, file, find, replace, tuple(targets), tuple(tests),
                    timeout)


IR = ["kiln_ir_test"]
HOST_T = ["kiln_host_test", "kiln_cli_test", "kiln"]
# The unit tests, then the HLO corpus (every op against expected values).
HOST = ["kiln_host_test", "kiln_cli_test:Corpus/*"]
TPU = ["kiln_tpusim_test"]
SERVICE = ["kiln_service_test"]
E2E_T = ["kiln_server_e2e_test", "kiln-server", "lease_client"]
FEED_T = ["kiln_feed_e2e_test", "kiln-server", "feed_producer"]
EMBEDDED = ["kiln_embedded_test"]
TENSOR = ["kiln_tensor_test"]

MUTATIONS = [
    # --- compiler/ir: shape inference -------------------------------------
    M("ir-concat-dims", "concatenate no longer checks the non-concatenated dimensions",
      "compiler/ir/shape_inference.cc",
      "if (j != d && b.dim(j) != a.dim(j)) {",
      "if (false && j != d && b.dim(j) != a.dim(j)) {",
      IR, IR),
    M("ir-dot-contracting", "dot no longer checks that contracting dimensions agree",
      "compiler/ir/shape_inference.cc",
      "if (lhs.dim(d.lhs_contracting[i]) != rhs.dim(d.rhs_contracting[i])) {",
      "if (false) {",
      IR, IR),
    M("ir-slice-limit", "slice accepts a limit one past the dimension (off by one)",
      "compiler/ir/shape_inference.cc",
      "if (s.start < 0 || s.limit > a.dim(i) || s.start > s.limit ||",
      "if (s.start < 0 || s.limit > a.dim(i) + 1 || s.start > s.limit ||",
      IR, IR),
    M("ir-slice-size", "slice result size rounds down instead of up",
      "compiler/ir/shape_inference.cc",
      ": (s.limit - s.start - 1) / s.stride + 1);",
      ": (s.limit - s.start) / s.stride);",
      IR, IR),
    M("ir-broadcast-dims", "broadcast no longer checks operand dims against the result",
      "compiler/ir/shape_inference.cc",
      "if (a.dim(i) != out.dim(at.dimensions[i])) {",
      "if (false) {",
      IR, IR),
    M("ir-reshape-count", "reshape no longer checks the element count",
      "compiler/ir/shape_inference.cc",
      "if (a.ElementCount() != instr.shape().ElementCount()) {",
      "if (false) {",
      IR, IR),
    # --- compiler/ir: verifier -----------------------------------------------
    M("ir-verify-shape", "the verifier no longer compares declared and inferred shapes",
      "compiler/ir/verifier.cc",
      "if (*inferred != instr->shape()) {",
      "if (false) {",
      IR, IR),
    M("ir-verify-replica-ids", "the verifier accepts negative replica ids",
      "compiler/ir/verifier.cc",
      "if (id < 0 || !ids.insert(id).second) {",
      "if (!ids.insert(id).second) {",
      IR, IR),
    M("ir-verify-param-number", "the verifier accepts parameter number == kMaxParameters",
      "compiler/ir/verifier.cc",
      "if (n < 0 || n >= Computation::kMaxParameters) {",
      "if (n < 0 || n > Computation::kMaxParameters) {",
      IR, IR),
    # --- compiler/ir: text, literals, fingerprint ------------------------------
    M("ir-parse-slice-limit", "the parser reads a slice's start as its limit",
      "compiler/ir/hlo_values.cc",
      "ASSIGN_OR_RETURN(s.limit, ParseInt(f[1]));",
      "ASSIGN_OR_RETURN(s.limit, ParseInt(f[0]));",
      IR, IR),
    M("ir-print-padding", "the printer swaps padding low and high",
      "compiler/ir/hlo_printer.cc",
      "? absl::StrCat(p.lo, \"_\", p.hi)",
      "? absl::StrCat(p.hi, \"_\", p.lo)",
      IR, IR),
    M("ir-fingerprint-names", "the fingerprint hashes instruction names as written",
      "compiler/ir/fingerprint.cc",
      "options.canonical_names = true;",
      "options.canonical_names = false;",
      IR, IR),
    M("ir-f32-digits", "f32 constants print with 6 significant digits, not the shortest round trip",
      "compiler/ir/literal.cc",
      "if (t == ElementType::kF32) return FormatShortest(lit.data<float>()[i]);",
      "if (t == ElementType::kF32) { char b6[32]; std::snprintf(b6, sizeof(b6), \"%.6g\", "
      "lit.data<float>()[i]); return b6; }",
      IR, IR),
    # --- runtime/host kernels ------------------------------------------------
    M("host-atan2-swap", "atan2 computes atan2(y, x) instead of atan2(x, y)",
      "runtime/host/elementwise.cc",
      "KILN_FLOAT_BINARY(kAtan2, std::atan2(x, y))",
      "KILN_FLOAT_BINARY(kAtan2, std::atan2(y, x))",
      HOST_T + TPU, HOST + TPU),
    M("host-int-max", "integer maximum picks the smaller operand",
      "runtime/host/elementwise.cc",
      "KILN_INT_BINARY(kMaximum, a[i] > b[i] ? a[i] : b[i])",
      "KILN_INT_BINARY(kMaximum, a[i] < b[i] ? a[i] : b[i])",
      HOST_T, HOST),
    M("host-compare-le", "compare LE behaves as LT",
      "runtime/host/elementwise.cc",
      "KILN_CMP(kLe, <=)",
      "KILN_CMP(kLe, <)",
      HOST_T, HOST),
    M("host-reduce-tail", "the add reduction drops the last element of a run not divisible by 4",
      "runtime/host/reduce_loops.h",
      "for (; i < run; ++i) s0 += static_cast<A>(p[i]);",
      "for (; i + 1 < run; ++i) s0 += static_cast<A>(p[i]);",
      HOST_T, HOST),
    M("host-partials-tail", "a leading sum's last rows go to the first partial sum only",
      "runtime/host/reduce_loops.h",
      "for (int j = 0; j < kCols; ++j) partials[q * kCols + j] += in[r * kCols + j];",
      "for (int j = 0; j < kCols; ++j) partials[j] += in[r * kCols + j];",
      HOST_T, HOST),
    M("host-fused-reduce-rows", "a fused trailing reduction writes each chunk's results at the start",
      "runtime/host/fused_reduce.cc",
      "ReduceRuns<T>(f.op, v, init, r1 - r0, f.length, o + r0);",
      "ReduceRuns<T>(f.op, v, init, r1 - r0, f.length, o);",
      HOST_T, HOST),
    M("host-dot-fusion-beta", "a fused dot adds its addend unscaled (beta 1)",
      "runtime/host/dot_kernels.cc",
      "ops[1]->as<float>(), out->as<float>(), beta);",
      "ops[1]->as<float>(), out->as<float>(), 1.0f);",
      HOST_T, HOST),
    M("host-dot-fusion-in-place", "a fused dot accumulates into an addend the caller still holds",
      "runtime/host/dot_kernels.cc",
      "if (Unshared(ops[2]) && ops[2]->shape() == p.out_shape) {",
      "if (ops[2]->shape() == p.out_shape) {",
      HOST_T, HOST),
    M("passes-dot-fusion-zero-beta", "dot-fusion takes a zero scale as the GEMM's beta",
      "compiler/passes/dot_fusion.cc",
      "  if (value == 0) return std::nullopt;\n",
      "",
      HOST_T, HOST),
    M("host-conv-bias-feature", "the bias's pass after a convolution indexes the bias by the wrong unit",
      "runtime/host/conv_kernels.cc",
      "const float b = bias[u % features];",
      "const float b = bias[u % features == 0 ? 0 : u % features - 1];",
      HOST_T, HOST),
    M("host-conv-bias-dropped", "oneDNN's convolution with a bias is bound without it",
      "runtime/host/dnnl_conv.cc",
      "  if (plan.bias.has_value()) {\n    RETURN_IF_ERROR(bind(*plan.bias, const_cast<uint8_t*>(bias), true));",
      "  if (false) {\n    RETURN_IF_ERROR(bind(*plan.bias, const_cast<uint8_t*>(bias), true));",
      HOST_T, HOST),
    M("passes-buffer-read-later", "the buffer assignment lets a result take an operand read again later",
      "compiler/passes/buffer_assignment.cc",
      "return v.shape().IsArray() && v.shape().ElementCount() != 1 && v.shape() == shape &&\n         last_reader[v.index()] == reader;",
      "return v.shape().IsArray() && v.shape().ElementCount() != 1 && v.shape() == shape;",
      HOST_T + ["kiln_passes_test"], HOST + ["kiln_passes_test"]),
    M("passes-buffer-loop-order", "a loop's output takes an input a later node of the loop reads",
      "compiler/passes/buffer_assignment.cc",
      "last_in_loop[q] <= outputs[j]->index() &&",
      "",
      HOST_T + ["kiln_passes_test"], HOST + ["kiln_passes_test"]),
    M("host-relu-nan", "the relu epilogue takes a NaN to 0 (as oneDNN's relu does)",
      "runtime/host/epilogue.h",
      "_mm_storeu_ps(at + j, _mm_and_ps(v, _mm_cmpnle_ps(v, zero)));\n  }\n#endif\n  for (; j < n; ++j) at[j] = Relu(add",
      "_mm_storeu_ps(at + j, _mm_max_ps(v, zero));\n  }\n#endif\n  for (; j < n; ++j) at[j] = Relu(add",
      HOST_T, HOST),
    M("host-dot-bias-row", "the dot bias epilogue adds the bias to the first row only",
      "runtime/host/dot_kernels.cc",
      "for (int64_t i = 0; i < m; ++i, row += n) {",
      "for (int64_t i = 0; i < std::min<int64_t>(m, 1); ++i, row += n) {",
      HOST_T, HOST),
    M("passes-relu-read-again", "a relu joins a library fusion though its operand is read again",
      "compiler/passes/bias_layer.cc",
      "if (add != comp.root() && readers[add].size() == 1 && IsReluOf(*readers[add][0], *add)) {",
      "if (add != comp.root() && IsReluOf(*readers[add][0], *add)) {",
      ["kiln_passes_test"], ["kiln_passes_test"]),
    M("passes-relu-minus-zero", "a maximum with -0 counts as a relu",
      "compiler/passes/bias_layer.cc",
      "if (i.operand(k) == &x && IsUniform(i.operand(1 - k), *plus_zero)) return true;",
      "if (i.operand(k) == &x && (IsUniform(i.operand(1 - k), *plus_zero) ||\n"
      "                             IsUniform(i.operand(1 - k), ir::Literal::Scalar<float>(\n"
      "                                                             ir::ElementType::kF32, -0.0f)))) {\n"
      "      return true;\n    }",
      ["kiln_passes_test"], ["kiln_passes_test"]),
    M("passes-conv-layout-output", "convolution-layout maps a transposed result's dimensions forward, not back",
      "compiler/passes/convolution_layout.cc",
      "for (size_t j = 0; j < perm.size(); ++j) inverse[perm[j]] = static_cast<int64_t>(j);",
      "for (size_t j = 0; j < perm.size(); ++j) inverse[j] = perm[j];",
      HOST_T + ["kiln_passes_test"], HOST + ["kiln_passes_test"]),
    M("cl-relu-grad-operand", "Relu's gradient passes at zero, reading its operand",
      "client/autodiff.cc",
      "return std::vector<Tensor>{Select(Greater(y, x[1]), g, zero_g), Tensor()};",
      "return std::vector<Tensor>{Select(GreaterEqual(x[0], x[1]), g, zero_g), Tensor()};",
      TENSOR, TENSOR),
    M("passes-conv-fusion-bias-dim", "convolution-fusion takes a bias broadcast along any dimension",
      "compiler/passes/convolution_fusion.cc",
      "b.attrs().dimensions[0] == feature && feature >= 0 &&",
      "feature >= 0 &&",
      ["kiln_passes_test"], ["kiln_passes_test"]),
    M("host-fill-repeated", "a fused loop's scalar input fills only part of its block",
      "runtime/host/elementwise.cc",
      "    const int64_t n = std::min(filled, total - filled);\n    std::memcpy(dst + filled, dst, n);\n    filled += n;",
      "    const int64_t n = std::min(filled, total - filled);\n    std::memcpy(dst + filled, dst, n / 2);\n    filled += n;",
      HOST_T, HOST),
    M("host-reducer-min", "the min reducer returns the larger value",
      "runtime/host/reducer_ops.h",
      "return a < b ? a : b;",
      "return a > b ? a : b;",
      HOST_T, HOST),
    M("host-gemm-lda", "the BLAS call gets the wrong leading dimension for a transposed lhs",
      "runtime/host/gemm.cc",
      "static_cast<int>(ta ? m : k), b,",
      "static_cast<int>(ta ? k : m), b,",
      HOST_T, HOST),
    M("host-gemm-int-transpose", "the integer GEMM indexes a transposed lhs as untransposed",
      "runtime/host/gemm.cc",
      "static_cast<uint64_t>(ta ? a[p * m + i] : a[i * k + p]);",
      "static_cast<uint64_t>(ta ? a[i * k + p] : a[p * m + i]);",
      HOST_T, HOST),
    M("host-conv-pad", "convolution adds the low padding instead of subtracting it",
      "runtime/host/conv_kernels.cc",
      "int64_t pos = oidx[d] * w.stride - w.pad_lo + kidx[d] * w.window_dilation;",
      "int64_t pos = oidx[d] * w.stride + w.pad_lo + kidx[d] * w.window_dilation;",
      HOST_T, HOST),
    M("host-window-dilation", "reduce-window ignores window dilation",
      "runtime/host/window_kernels.cc",
      "int64_t p = o[d] * wd.stride - wd.pad_lo + w[d] * wd.window_dilation;",
      "int64_t p = o[d] * wd.stride - wd.pad_lo + w[d];",
      HOST_T, HOST),
    M("host-select-scatter-keep", "select-and-scatter keeps the element the select rejects",
      "runtime/host/window_kernels.cc",
      "if (!keep) selected = i;",
      "if (keep) selected = i;",
      HOST_T, HOST),
    M("host-sort-descending", "the fast descending sort sorts ascending",
      "runtime/host/sort_kernels.cc",
      "return static_cast<A>(p[a * stride]) > static_cast<A>(p[b * stride]);",
      "return static_cast<A>(p[a * stride]) < static_cast<A>(p[b * stride]);",
      HOST_T, HOST),
    M("host-gather-clamp", "gather clamps start indices one past the last valid start",
      "runtime/host/gather_scatter_kernels.cc",
      "std::clamp<int64_t>(start[k], 0, operand.dim(d) - sizes[d]);",
      "std::clamp<int64_t>(start[k], 0, operand.dim(d) - sizes[d] + 1);",
      HOST_T, HOST),
    M("host-scatter-bounds", "scatter skips updates whose window ends exactly at the edge",
      "runtime/host/gather_scatter_kernels.cc",
      "if (full_start[d] < 0 || full_start[d] + extent > operand.dim(d)) {",
      "if (full_start[d] < 0 || full_start[d] + extent >= operand.dim(d)) {",
      HOST_T, HOST),
    M("host-conditional-pred", "a pred conditional runs the false branch for true",
      "runtime/host/control_kernels.cc",
      "index = ops[0]->as<bool>()[0] ? 0 : 1;",
      "index = ops[0]->as<bool>()[0] ? 1 : 0;",
      HOST_T, HOST),
    M("host-allreduce-last", "all-reduce leaves out the last replica of the group",
      "runtime/host/collective_kernels.cc",
      "for (size_t g = 1; g < round.members.size(); ++g) {",
      "for (size_t g = 1; g + 1 < round.members.size(); ++g) {",
      TPU, TPU),
    M("host-allgather-order", "all-gather places the members in replica order, not group order",
      "runtime/host/collective_kernels.cc",
      "static_cast<int64_t>(m) * a.extent, a.extent, a);",
      "static_cast<int64_t>(round.group[m] % round.members.size()) * a.extent, a.extent, a);",
      TPU, TPU),
    M("host-replica-group-range", "a replica group may name replica == replica_count",
      "runtime/host/collective_kernels.cc",
      "if (id >= replica_count) {",
      "if (id > replica_count) {",
      TPU, TPU),
    # --- runtime ------------------------------------------------------------------
    M("rt-memory-capacity", "memory accounting ignores what is already in use",
      "runtime/memory.cc",
      "if (bytes < 0 || bytes > capacity_ - in_use_) {",
      "if (bytes < 0 || bytes > capacity_) {",
      TPU + SERVICE, TPU + SERVICE),
    M("rt-memory-release", "releasing a buffer does not return its bytes",
      "runtime/memory.cc",
      "absl::MutexLock lock(&mu_);\n    in_use_ -= bytes;\n    auto it = live_.find(owner);",
      "absl::MutexLock lock(&mu_);\n    auto it = live_.find(owner);",
      TPU + SERVICE, TPU + SERVICE),
    M("rt-memory-peak", "peak memory is the current use, not the maximum",
      "runtime/memory.cc",
      "peak_ = std::max(peak_, in_use_);",
      "peak_ = in_use_;",
      TPU + SERVICE + ["kiln_runtime_test"], TPU + SERVICE + ["kiln_runtime_test"]),
    M("rt-feed-capacity", "a feed queue holds one item more than its capacity",
      "runtime/feed_queue.cc",
      "items_.size() < capacity_;",
      "items_.size() <= capacity_;",
      SERVICE + ["kiln_loop_test", "kiln_runtime_test"],
      SERVICE + ["kiln_loop_test", "kiln_runtime_test"]),
    M("rt-spec-suffix", "a byte count with suffix M is read as kibibytes",
      "runtime/backend.cc",
      "case 'M': shift = 20; break;",
      "case 'M': shift = 10; break;",
      ["kiln_runtime_test"], ["kiln_runtime_test"]),
    M("rt-spec-overflow", "byte counts are no longer checked for overflow",
      "runtime/backend.cc",
      "if (!absl::SimpleAtoi(text, &value) || value < 0 || value > (int64_t{1} << (62 - shift))) {",
      "if (!absl::SimpleAtoi(text, &value) || value < 0) {",
      ["kiln_runtime_test"], ["kiln_runtime_test"]),
    M("rt-spec-count", "a backend may be created with zero devices",
      "runtime/backend.cc",
      "if (spec.count < 1) {",
      "if (spec.count < 0) {",
      ["kiln_runtime_test"], ["kiln_runtime_test"]),
    # --- runtime/tpusim -----------------------------------------------------------
    M("tpu-bf16-round", "matrix inputs are no longer rounded to bf16",
      "runtime/tpusim/tpusim_device.cc",
      "for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(kiln::bf16(in[i]));",
      "for (int64_t i = 0; i < count; ++i) out[i] = in[i];",
      TPU, TPU),
    M("tpu-bf16-highest", "operands marked HIGHEST are rounded to bf16 too",
      "runtime/tpusim/tpusim_device.cc",
      "round[i] = instr.operand(i)->shape().type() == ir::ElementType::kF32 && !highest;",
      "round[i] = instr.operand(i)->shape().type() == ir::ElementType::kF32;",
      TPU, TPU),
    M("tpu-cost-matrix-pad", "the matrix cost ignores padding m to 8 rows",
      "runtime/tpusim/cost_model.cc",
      "return passes * 2.0 * batch * RoundUp(m, 8) *",
      "return passes * 2.0 * batch * m *",
      TPU, TPU),
    M("tpu-cost-allreduce", "the on-chip all-reduce cost uses c instead of c - 1 steps",
      "runtime/tpusim/cost_model.cc",
      "const double on_chip = 2.0 * (c - 1) / c * b",
      "const double on_chip = 2.0 * c / c * b",
      TPU, TPU),
    M("tpu-layout-rows", "layout padding ignores the second-minor tile",
      "runtime/tpusim/layout.cc",
      "RoundUp(shape.dim(rank - 2), tile_rows) * RoundUp(shape.dim(rank - 1), kLaneCount);",
      "shape.dim(rank - 2) * RoundUp(shape.dim(rank - 1), kLaneCount);",
      TPU, TPU),
    M("tpu-layout-bf16-tile", "bf16 tiles get 8 rows instead of 16",
      "runtime/tpusim/layout.cc",
      "case 2: return 16;",
      "case 2: return 8;",
      TPU, TPU),
    # --- server -------------------------------------------------------------------
    M("srv-cache-key-kind", "the compile-cache key leaves out the backend kind",
      "server/service.cc",
      "absl::StrCat(fingerprint, \"/\", backend.kind(), \"/\",",
      "absl::StrCat(fingerprint, \"/\",",
      SERVICE, SERVICE),
    M("srv-cache-key-seed", "the compile-cache key leaves out the rng seed",
      "server/service.cc",
      "backend.config_key(), \"/seed=\", options.rng_seed);",
      "backend.config_key());",
      SERVICE, SERVICE),
    M("srv-arg-shape", "execute no longer checks argument shapes",
      "server/service_execute.cc",
      "if (buffer.shape() != param) {",
      "if (false) {",
      SERVICE, SERVICE),
    M("srv-arg-count", "execute no longer checks the argument count",
      "server/service_execute.cc",
      "if (handles.size() != params.size()) {",
      "if (handles.size() > params.size()) {",
      SERVICE, SERVICE),
    M("srv-arg-device", "execute accepts arguments that live on another device",
      "server/service_execute.cc",
      "if (device != &runs_on) {",
      "if (false) {",
      SERVICE, SERVICE),
    M("srv-donate-range", "a donated argument index equal to the count is accepted",
      "server/service_execute.cc",
      "for (int index : req.donated_arguments()) {\n    if (index < 0 || index >= static_cast<int>(params.size())) {",
      "for (int index : req.donated_arguments()) {\n    if (index < 0 || index > static_cast<int>(params.size())) {",
      SERVICE, SERVICE),
    M("srv-transfer-truncated", "a truncated transfer is accepted",
      "server/service.cc",
      "if (received != total) {",
      "if (false) {",
      SERVICE, SERVICE),
    M("srv-feed-token-device", "a feed token opens a device it was not issued for",
      "server/service.cc",
      "if (!target.device().empty() && target.device() != grant.device) {",
      "if (false) {",
      SERVICE + FEED_T, SERVICE + ["kiln_feed_e2e_test"]),
    M("srv-cancel-drain", "a cancelled execution no longer aborts its infeed",
      "server/service_execute.cc",
      "f->infeed.Abort();",
      "",
      SERVICE + FEED_T, SERVICE + ["kiln_feed_e2e_test"]),
    M("srv-replica-kind", "a replica may run on a device of another kind",
      "server/service_execute.cc",
      "if ((*device)->kind() != exe.device->kind()) {",
      "if (false) {",
      SERVICE + TPU, SERVICE + TPU),
    M("srv-session-release", "releasing an unknown (or another session's) handle succeeds",
      "server/session.cc",
      "return absl::NotFoundError(absl::StrCat(\"unknown buffer handle '\", h, \"'\"));\n    }\n    for (const std::string& h : executables) {",
      "continue;\n    }\n    for (const std::string& h : executables) {",
      SERVICE + E2E_T, SERVICE + ["kiln_server_e2e_test"]),
    M("srv-lease-renew", "using a session no longer renews its lease",
      "server/session.cc",
      "if (renewed_at != nullptr) it->second.deadline = *renewed_at + lease_;",
      "(void)renewed_at;",
      SERVICE + E2E_T, SERVICE + ["kiln_server_e2e_test"]),
    M("srv-lease-reap", "the reaper frees live sessions instead of expired ones",
      "server/session.cc",
      "if (it->second.deadline < now) {",
      "if (it->second.deadline > now) {",
      SERVICE, SERVICE),
    # --- client -------------------------------------------------------------------
    M("cl-lazy-key-device", "the lazy executable cache key leaves out the device",
      "client/lazy.cc",
      "const std::string key = absl::StrCat(fingerprint, \"@\", device);",
      "const std::string key = absl::StrCat(fingerprint);",
      TENSOR + ["kiln_data_parallel_test"], TENSOR + ["kiln_data_parallel_test"]),
    M("cl-grad-subtract", "the gradient of a - b w.r.t. b is +g",
      "client/autodiff.cc",
      "case Opcode::kSubtract: return std::vector<Tensor>{g, -g};",
      "case Opcode::kSubtract: return std::vector<Tensor>{g, g};",
      TENSOR, TENSOR),
    M("cl-grad-divide", "the gradient of a / b w.r.t. b loses its sign",
      "client/autodiff.cc",
      "-(g * x[0]) / (x[1] * x[1])",
      "(g * x[0]) / (x[1] * x[1])",
      TENSOR, TENSOR),
    M("cl-grad-multiply", "the gradient of a * b swaps its factors",
      "client/autodiff.cc",
      "return std::vector<Tensor>{g * x[1], g * x[0]};",
      "return std::vector<Tensor>{g * x[0], g * x[1]};",
      TENSOR, TENSOR),
    M("cl-grad-power", "the gradient of x^p uses x^p instead of x^(p-1)",
      "client/autodiff.cc",
      "g * x[1] * Pow(x[0], x[1] - 1.0)",
      "g * x[1] * Pow(x[0], x[1])",
      TENSOR, TENSOR),
    M("cl-grad-max-ties", "the maximum gradient goes to the second operand",
      "client/autodiff.cc",
      "Tensor take_a = GreaterEqual(x[0], x[1]);",
      "Tensor take_a = LessEqual(x[0], x[1]);",
      TENSOR, TENSOR),
    M("cl-walk-numbers", "a short walk's node numbers forget the first node once hashed",
      "client/lower.h",
      "for (size_t i = 0; i < listed_.size(); ++i) hashed_[listed_[i]] = static_cast<int64_t>(i);",
      "for (size_t i = 1; i < listed_.size(); ++i) hashed_[listed_[i]] = static_cast<int64_t>(i);",
      TENSOR, TENSOR),
    M("cl-eager-grad-constant", "gradients treat every eager value as a constant",
      "client/autodiff.cc",
      "(!node->realized() || node->keeps_graph);",
      "!node->realized();",
      TENSOR, TENSOR),
    M("cl-no-grad-ignored", "values recorded without gradients still pass them",
      "client/autodiff.cc",
      "const bool walked = !is_param && !node->stops_gradients &&",
      "const bool walked = !is_param &&",
      TENSOR, TENSOR),
    M("cl-no-grad-graph-kept", "eager values computed without gradients keep their graphs",
      "client/lazy.cc",
      "if (!eager_ || !record_gradients_) node.operands.clear();",
      "if (!eager_) node.operands.clear();",
      TENSOR, TENSOR),
    # --- embedded -----------------------------------------------------------------
    M("em-direct-donation-copied", "a donated held buffer is copied into the program, not moved",
      "embedded/embedded.cc",
      "to.buffer = donated && a.local.use_count() == 1 ? std::move((*held)->buffer) : (*held)->buffer;",
      "to.buffer = (*held)->buffer;",
      EMBEDDED, EMBEDDED),
    M("em-direct-donation-range", "the direct path takes a donated index past the arguments",
      "server/service_execute.cc",
      "    if (index < 0 || index >= static_cast<int>(params.size())) {\n      return absl::InvalidArgumentError(absl::StrCat(\"donated argument \", index, \" out of range\"));\n    }\n  }\n  auto donated",
      "    if (index < 0) {\n      return absl::InvalidArgumentError(absl::StrCat(\"donated argument \", index, \" out of range\"));\n    }\n  }\n  auto donated",
      EMBEDDED, EMBEDDED),
    M("em-direct-donated-kept", "a failed direct execution keeps its donated handles",
      "server/service_execute.cc",
      "if (!result.ok() && !donated_handles.empty()) session->Drop(donated_handles);",
      "if (false) session->Drop(donated_handles);",
      EMBEDDED, EMBEDDED),
    M("em-adopt-once", "a held buffer's handle is not kept once made",
      "client/client.cc",
      "      if (handle.ok()) handle_ = *std::move(handle);",
      "      if (handle.ok()) adopted_ = false;",
      EMBEDDED, EMBEDDED),
    M("host-arena-held-overlap", "an arena offers a slice over the bytes of an array still held",
      "runtime/host/arena.cc",
      "      if (other.offset < mine.end && mine.offset < other.end) clear = false;\n",
      "",
      HOST_T, HOST),
    M("host-arena-expiry", "a slice held past its planned life is not listed as held",
      "runtime/host/arena.cc",
      "    if (!Free(slice)) Hold(slice);\n",
      "",
      HOST_T, HOST),
    M("host-arena-offer-twice", "a step's planned array is taken twice",
      "runtime/host/arena.h",
      "        taken_ |= 1u << i;\n",
      "",
      HOST_T, HOST),
    M("passes-arena-outputs", "an output's value takes a slice of the arena",
      "compiler/passes/buffer_assignment.cc",
      "if (live_until[i] < n && !in_place(0) && instr.shape().ByteSize() > 0) {",
      "if (!in_place(0) && instr.shape().ByteSize() > 0) {",
      HOST_T + ["kiln_passes_test"], HOST + ["kiln_passes_test"]),
    M("passes-arena-holders", "a value's slice ends before what holds its buffer does",
      "compiler/passes/buffer_assignment.cc",
      "      for (int j : HoldingResults(user, fresh[u], q, a)) whole = std::max(whole, end_of(u, j));\n",
      "",
      HOST_T + ["kiln_passes_test"], HOST + ["kiln_passes_test"]),
]


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):
    raise Interrupted(f"signal {signum}")


def run_bounded(cmd, timeout, cwd=None):
    """Runs cmd in its own process group; returns (rc, output, timed_out)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -9, out, True
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def build(build_dir, targets):
    cmd = ["flock", BUILD_LOCK, "ninja", "-C", str(build_dir), "-j", BUILD_JOBS]
    cmd += sorted(set(targets))
    rc, out, _ = run_bounded(cmd, timeout=3600)
    return rc == 0, out


def failed_tests(output):
    names = []
    for m in re.finditer(r"^\[  FAILED  \] ([^\s,]+)", output, re.M):
        if m.group(1) not in names:
            names.append(m.group(1))
    for m in re.finditer(r"^\s*\d+ - (\S+) \(", output, re.M):  # ctest summary
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


def run_test(build_dir, spec, timeout):
    """Returns (passed, detail)."""
    kind, _, arg = spec.partition(":")
    if kind == "ctest":
        cmd = ["ctest", "--test-dir", str(build_dir), "-R", arg, "--timeout", str(timeout),
               "--output-on-failure"]
    else:
        cmd = [str(build_dir / "bin" / kind), "--gtest_brief=1"]
        if arg:
            cmd.append(f"--gtest_filter={arg}")
    rc, out, timed_out = run_bounded(cmd, timeout + 30)
    if timed_out:
        return False, f"{kind}: timeout after {timeout} s"
    if rc == 0:
        return True, ""
    names = failed_tests(out)
    if names:
        shown = ", ".join(names[:2]) + (f" (+{len(names) - 2} more)" if len(names) > 2 else "")
        return False, f"{kind}: {shown}"
    if rc < 0:
        return False, f"{kind}: crashed ({signal.Signals(-rc).name})"
    return False, f"{kind}: exit status {rc}"


def check_mutation(source, m):
    path = source / m.file
    if not path.exists():
        return f"{m.file} does not exist"
    count = path.read_text().count(m.find)
    if count != 1:
        return f"its text occurs {count} times in {m.file} (must be exactly once)"
    return None


def where(source, m):
    text = (source / m.file).read_text()
    line = text[: text.index(m.find)].count("\n") + 1
    return f"{m.file}:{line}"


def run_mutation(source, build_dir, m):
    """Applies m, builds, tests, restores. Returns (result, detail)."""
    path = source / m.file
    original = path.read_bytes()
    try:
        path.write_text(original.decode().replace(m.find, m.replace, 1))
        ok, out = build(build_dir, m.targets)
        if not ok:
            errors = [l for l in out.splitlines() if "error" in l]
            return "build-failed", (errors[0][:160] if errors else "ninja failed")
        for spec in m.tests:
            passed, detail = run_test(build_dir, spec, m.timeout)
            if not passed:
                return ("timeout" if "timeout after" in detail else "killed"), detail
        return "survived", ""
    finally:
        path.write_bytes(original)


def write_report(path, rows, started):
    counts = {}
    for r in rows:
        key = "killed" if r["result"] == "timeout" else r["result"]
        counts[key] = counts.get(key, 0) + 1
    lines = [
        f"Mutation run of {time.strftime('%Y-%m-%d', time.gmtime(started))}: "
        f"{len(rows)} mutations, {counts.get('killed', 0)} killed, "
        f"{counts.get('survived', 0)} survived, {counts.get('build-failed', 0)} build-failed.",
        "",
        "| id | where | mutation | result | killed by | s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['id']} | `{r['where']}` | {r['description']} | {r['result']} | "
                     f"{r['detail'].replace('|', '/')} | {r['seconds']:.0f} |")
    Path(path).write_text("\n".join(lines) + "\n")


def main():
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=root, help="tree to mutate")
    parser.add_argument("--build", type=Path, help="its build directory (default SOURCE/build)")
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--report", help="write a Markdown table of the results here")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="do not check that the unmutated tree passes first")
    args = parser.parse_args()
    source = args.source.resolve()
    build_dir = (args.build or source / "build").resolve()

    mutations = MUTATIONS
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {m.id for m in MUTATIONS}
        if unknown:
            sys.exit(f"unknown mutation ids: {', '.join(sorted(unknown))}")
        mutations = [m for m in MUTATIONS if m.id in wanted]
    if len({m.id for m in MUTATIONS}) != len(MUTATIONS):
        sys.exit("mutation ids must be unique")

    problems = [(m.id, p) for m in mutations if (p := check_mutation(source, m))]
    for mid, p in problems:
        print(f"refusing {mid}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    if args.list:
        for m in mutations:
            print(f"{m.id:28} {where(source, m):45} {m.description}")
        return

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    started = time.time()

    if not args.skip_baseline:
        targets = sorted({t for m in mutations for t in m.targets})
        tests = list(dict.fromkeys(t for m in mutations for t in m.tests))
        print(f"baseline: building {len(targets)} targets", flush=True)
        ok, out = build(build_dir, targets)
        if not ok:
            sys.exit("the unmutated tree does not build:\n" + out[-3000:])
        for spec in tests:
            passed, detail = run_test(build_dir, spec, max(m.timeout for m in mutations))
            if not passed:
                sys.exit(f"the unmutated tree fails its tests ({detail}); fix that first")
        print(f"baseline: {len(tests)} test commands pass", flush=True)

    rows = []
    try:
        for n, m in enumerate(mutations, 1):
            t0 = time.time()
            loc = where(source, m)
            print(f"[{n}/{len(mutations)}] {m.id} ({loc}) ...", end=" ", flush=True)
            result, detail = run_mutation(source, build_dir, m)
            seconds = time.time() - t0
            print(f"{result} {detail} [{seconds:.0f} s]", flush=True)
            rows.append({"id": m.id, "where": loc, "description": m.description,
                         "result": result, "detail": detail, "seconds": seconds})
            if args.report:
                write_report(args.report, rows, started)
    except Interrupted as e:
        print(f"\ninterrupted ({e}); the file was restored", file=sys.stderr)
    finally:
        # Leave the build matching the restored sources.
        if rows or mutations:
            build(build_dir, sorted({t for m in mutations for t in m.targets}))

    killed = sum(r["result"] in ("killed", "timeout") for r in rows)
    survived = [r["id"] for r in rows if r["result"] == "survived"]
    failed = [r["id"] for r in rows if r["result"] == "build-failed"]
    print(f"\n{len(rows)} mutations: {killed} killed, {len(survived)} survived"
          f"{' (' + ', '.join(survived) + ')' if survived else ''}, {len(failed)} build-failed"
          f"{' (' + ', '.join(failed) + ')' if failed else ''}")
    return 1 if survived or failed else 0


if __name__ == "__main__":
    sys.exit(main())
