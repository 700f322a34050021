// Tuples, calls and control flow, feeds, tokens, rng, replica and partition
// ids, reduce-precision and custom calls.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/hlo_lowering.h"
#include "base/type_dispatch.h"
#include "runtime/host/kernel.h"
#include "runtime/host/rng_bits.h"
#include "runtime/host/program.h"
#include "runtime/host/reduce_precision.h"
#include "runtime/host/reducer_ops.h"
#include "runtime/custom_call.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

absl::StatusOr<bool> ReadPred(const Buffer& b) { return b.as<bool>()[0]; }

}  // namespace

absl::StatusOr<Kernel> MakeControlKernel(const ir::Instruction& instr,
                                         ProgramSource& programs) {
  const Shape out_shape = instr.shape();
  const ir::Attributes& at = instr.attrs();
  switch (instr.opcode()) {
    case Opcode::kTuple:
      return Kernel([](ExecState&, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        return Buffer::MakeTuple(ops);
      });
    case Opcode::kGetTupleElement: {
      const int64_t index = at.tuple_index;
      return Kernel([index](ExecState&, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        return ops[0]->tuple_elements()[index];
      });
    }
    case Opcode::kCall: {
      ASSIGN_OR_RETURN(auto callee, programs.Get(instr.called(0)));
      return Kernel([callee](ExecState& st, const std::vector<BufferPtr>& ops) {
        return callee->Run(st, ops);
      });
    }
    case Opcode::kWhile: {
      ASSIGN_OR_RETURN(auto cond, programs.Get(instr.called(0)));
      ASSIGN_OR_RETURN(auto body, programs.Get(instr.called(1)));
      return Kernel([cond, body](ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        BufferPtr state = ops[0];
        while (true) {
          ASSIGN_OR_RETURN(BufferPtr keep_going, cond->Run(st, {state}));
          ASSIGN_OR_RETURN(bool go, ReadPred(*keep_going));
          if (!go) return state;
          if (st.options->cancelled && st.options->cancelled()) {
            return absl::CancelledError("the execution was cancelled");
          }
          ASSIGN_OR_RETURN(state, body->Run(st, {state}));
        }
      });
    }
    case Opcode::kConditional: {
      std::vector<std::shared_ptr<const Program>> branches;
      for (const ir::Computation* c : instr.called()) {
        ASSIGN_OR_RETURN(auto p, programs.Get(c));
        branches.push_back(p);
      }
      const bool by_pred = instr.operand(0)->shape().type() == ir::ElementType::kPred;
      return Kernel([branches, by_pred](ExecState& st,
                                        const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        int64_t index;
        if (by_pred) {
          index = ops[0]->as<bool>()[0] ? 0 : 1;
        } else {
          index = ops[0]->as<int32_t>()[0];
          // XLA: an out-of-range index runs the last branch.
          if (index < 0 || index >= static_cast<int64_t>(branches.size())) {
            index = static_cast<int64_t>(branches.size()) - 1;
          }
        }
        return branches[index]->Run(st, {ops[index + 1]});
      });
    }
    case Opcode::kAfterAll:
      return Kernel([](ExecState& st, const std::vector<BufferPtr>&) {
        return st.Allocate(Shape::Token());
      });
    case Opcode::kInfeed: {
      const Shape data_shape = out_shape.tuple_shape(0);
      return Kernel([data_shape](ExecState& st, const std::vector<BufferPtr>&)
                        -> absl::StatusOr<BufferPtr> {
        if (st.infeed == nullptr) {
          return absl::FailedPreconditionError("this device has no infeed queue");
        }
        absl::StatusOr<ir::Literal> value = st.infeed->Pop(st.options->infeed_timeout, st.options->cancelled);
        if (!value.ok()) return WithContext(value.status(), "infeed");
        if (value->shape() != data_shape) {
          return absl::InvalidArgumentError(absl::StrCat(
              "infeed expected ", data_shape.ToString(), " but the queue held ",
              value->shape().ToString()));
        }
        ASSIGN_OR_RETURN(BufferPtr data, Buffer::FromLiteral(*value, st.memory));
        ASSIGN_OR_RETURN(BufferPtr token, st.Allocate(Shape::Token()));
        return Buffer::MakeTuple({data, token});
      });
    }
    case Opcode::kOutfeed:
      return Kernel([](ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        if (st.outfeed == nullptr) {
          return absl::FailedPreconditionError("this device has no outfeed queue");
        }
        absl::Status pushed =
            st.outfeed->Push(ops[0]->ToLiteral(), st.options->outfeed_timeout, st.options->cancelled);
        if (!pushed.ok()) return WithContext(pushed, "outfeed");
        return st.Allocate(Shape::Token());
      });
    case Opcode::kReplicaId:
    case Opcode::kPartitionId:
      // One partition per replica: the program is not split across devices,
      // so the partition id is 0.
      return Kernel([replica = instr.opcode() == Opcode::kReplicaId](
                        ExecState& st, const std::vector<BufferPtr>&)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(Shape::Scalar(ir::ElementType::kU32)));
        out->as<uint32_t>()[0] = replica ? static_cast<uint32_t>(st.options->replica_id) : 0;
        return out;
      });
    case Opcode::kRngBitGenerator:
      // XLA's streams (runtime/host/rng_bits.h), bit for bit.
      return Kernel([out_shape, three_fry = at.config == "rng_three_fry"](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        const Shape& state_shape = out_shape.tuple_shape(0);
        const Shape& bits_shape = out_shape.tuple_shape(1);
        ASSIGN_OR_RETURN(BufferPtr state, st.Allocate(state_shape));
        ASSIGN_OR_RETURN(BufferPtr bits, st.Allocate(bits_shape));
        const int64_t n = state_shape.dim(0);
        std::memcpy(state->data(), ops[0]->data(), n * sizeof(uint64_t));
        const int width = static_cast<int>(ElementTypeSize(bits_shape.type()));
        if (three_fry) {
          ThreeFryBits(state->as<uint64_t>(), bits_shape.dims(), width, bits->data());
        } else {
          PhiloxBits(state->as<uint64_t>(), n, bits_shape.ElementCount(), width, bits->data());
        }
        return Buffer::MakeTuple({state, bits});
      });
    case Opcode::kReducePrecision:
      return Kernel([out_shape, exponent_bits = static_cast<int>(at.exponent_bits),
                     mantissa_bits = static_cast<int>(at.mantissa_bits)](
                        ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        const int64_t n = out_shape.ElementCount();
        ir::DispatchType(out_shape.type(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (ir::kIsFloat<T>) {
            const T* in = ops[0]->as<T>();
            T* o = out->as<T>();
            for (int64_t i = 0; i < n; ++i) {
              o[i] = ReducePrecision(in[i], exponent_bits, mantissa_bits);
            }
          }
        });
        return out;
      });
    case Opcode::kRng: {
      const bool normal = at.distribution == ir::RngDistribution::kNormal;
      return Kernel([out_shape, normal](ExecState& st,
                                        const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(out_shape));
        const ir::Literal a = ops[0]->ToLiteral(), b = ops[1]->ToLiteral();
        const double lo = a.GetAsDouble(0), hi = b.GetAsDouble(0);
        const int64_t n = out_shape.ElementCount();
        ir::DispatchType(out_shape.type(), [&](auto tag) {
          using T = decltype(tag);
          T* o = out->as<T>();
          if constexpr (ir::kIsFloat<T>) {
            if (normal) {
              std::normal_distribution<double> dist(lo, hi > 0 ? hi : 0.0);
              for (int64_t i = 0; i < n; ++i) o[i] = ir::ConvertValue<T>(dist(*st.rng));
            } else {
              std::uniform_real_distribution<double> dist(0.0, 1.0);
              for (int64_t i = 0; i < n; ++i) {
                double v = lo + (hi - lo) * dist(*st.rng);
                o[i] = ir::ConvertValue<T>(v < hi || hi <= lo ? v : lo);
              }
            }
          } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            const int64_t ilo = a.GetAsInt64(0), ihi = b.GetAsInt64(0);
            for (int64_t i = 0; i < n; ++i) {
              o[i] = ihi > ilo ? static_cast<T>(ilo + static_cast<int64_t>(
                                                          (*st.rng)() % uint64_t(ihi - ilo)))
                               : static_cast<T>(ilo);
            }
          }
        });
        return out;
      });
    }
    case Opcode::kCustomCall: {
      if (ir::IsLapackTarget(at.custom_call_target)) return MakeLapackKernel(instr);
      const runtime::CustomCallFn* fn =
          runtime::CustomCallRegistry::Global().Find(at.custom_call_target);
      if (fn == nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            "custom-call target '", at.custom_call_target, "' is not registered"));
      }
      const runtime::CustomCallFn call = *fn;
      return Kernel([call, out_shape](ExecState& st,
                                      const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        std::vector<ir::Literal> args;
        for (const BufferPtr& b : ops) args.push_back(b->ToLiteral());
        ASSIGN_OR_RETURN(ir::Literal result, call(args));
        if (result.shape() != out_shape) {
          return absl::InternalError(absl::StrCat(
              "custom call returned ", result.shape().ToString(), ", declared ",
              out_shape.ToString()));
        }
        return Buffer::FromLiteral(result, st.memory);
      });
    }
    default:
      return absl::UnimplementedError(absl::StrCat(
          "the CPU backend cannot run ", ir::OpcodeName(instr.opcode())));
  }
}

}  // namespace kiln::host
