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
#include "runtime/host/philox.h"
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
      // Philox4x32-10 keyed by state[0], counting from the 128-bit counter
      // state[1] (low) and state[2] (high, when there is one); the bits are
      // the generated words in order, and the new state's counter has moved
      // past every block used.
      return Kernel([out_shape](ExecState& st, const std::vector<BufferPtr>& ops)
                        -> absl::StatusOr<BufferPtr> {
        const Shape& state_shape = out_shape.tuple_shape(0);
        const Shape& bits_shape = out_shape.tuple_shape(1);
        ASSIGN_OR_RETURN(BufferPtr state, st.Allocate(state_shape));
        ASSIGN_OR_RETURN(BufferPtr bits, st.Allocate(bits_shape));
        const int64_t n = state_shape.dim(0);
        const uint64_t* in = ops[0]->as<uint64_t>();
        const std::array<uint32_t, 2> key = {static_cast<uint32_t>(in[0]),
                                             static_cast<uint32_t>(in[0] >> 32)};
        const uint64_t low = in[1], high = n > 2 ? in[2] : 0;
        const int64_t bytes = bits_shape.ByteSize();
        const int64_t blocks = (bytes + 15) / 16;
        uint8_t* out = bits->data();
        for (int64_t b = 0; b < blocks; ++b) {
          const uint64_t lo = low + static_cast<uint64_t>(b);
          const uint64_t hi = high + (lo < low ? 1 : 0);
          const std::array<uint32_t, 4> words =
              Philox4x32({static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32),
                          static_cast<uint32_t>(hi), static_cast<uint32_t>(hi >> 32)},
                         key);
          std::memcpy(out + b * 16, words.data(), std::min<int64_t>(16, bytes - b * 16));
        }
        uint64_t* next = state->as<uint64_t>();
        std::memcpy(next, in, n * sizeof(uint64_t));
        next[1] = low + static_cast<uint64_t>(blocks);
        if (n > 2 && next[1] < low) ++next[2];
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
