// Instruction, Computation and Module: the in-memory IR.
//
// A Module owns its computations; a Computation owns its instructions, kept
// in an order where every operand precedes its users. Instructions refer to
// operands and called computations by borrowed pointers that stay valid as
// long as the module lives. Not thread-safe for mutation; a finished module
// may be read from any number of threads.
#ifndef KILN_COMPILER_IR_INSTRUCTION_H_
#define KILN_COMPILER_IR_INSTRUCTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/ir/literal.h"
#include "compiler/ir/opcode.h"
#include "compiler/ir/shape.h"

namespace kiln::ir {

class Computation;
class Module;

struct SliceDim {
  int64_t start = 0, limit = 0, stride = 1;
  bool operator==(const SliceDim&) const = default;
};
struct PadDim {
  int64_t lo = 0, hi = 0, interior = 0;
  bool operator==(const PadDim&) const = default;
};
struct WindowDim {
  int64_t size = 1, stride = 1, pad_lo = 0, pad_hi = 0;
  int64_t base_dilation = 1, window_dilation = 1;
  bool operator==(const WindowDim&) const = default;
};
struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
  bool operator==(const DotDims&) const = default;
};
// Which dimension of each operand plays which role (dim_labels).
struct ConvDims {
  int64_t input_batch = 0, input_feature = 1;
  std::vector<int64_t> input_spatial;
  int64_t kernel_input_feature = 0, kernel_output_feature = 1;
  std::vector<int64_t> kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  std::vector<int64_t> output_spatial;
  bool operator==(const ConvDims&) const = default;
};
struct GatherDims {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  int64_t index_vector_dim = 0;
  bool operator==(const GatherDims&) const = default;
};
struct ScatterDims {
  std::vector<int64_t> update_window_dims, inserted_window_dims,
      scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
  bool operator==(const ScatterDims&) const = default;
};
enum class RngDistribution : uint8_t { kUniform, kNormal };
// How precisely dot and convolution treat an operand (operand_precision):
// on backends whose matrix units round inputs (tpusim), only kHighest keeps
// full f32.
enum class Precision : uint8_t { kDefault, kHigh, kHighest };
absl::string_view PrecisionName(Precision p);
// Accepts XLA's spellings in either case ("default", "HIGHEST").
std::optional<Precision> PrecisionFromName(absl::string_view name);

// cholesky (lower) and triangular-solve (all four): which triangle of the
// matrix is read, on which side it multiplies the unknowns, whether its
// diagonal is taken as ones, and how it is transposed first.
enum class TransposeKind : uint8_t { kNoTranspose, kTranspose, kAdjoint };
absl::string_view TransposeKindName(TransposeKind t);  // "NO_TRANSPOSE", ...
std::optional<TransposeKind> TransposeKindFromName(absl::string_view name);
struct LinalgOptions {
  bool lower = false;
  bool left_side = false;
  bool unit_diagonal = false;
  TransposeKind transpose_a = TransposeKind::kNoTranspose;
  bool operator==(const LinalgOptions&) const = default;
};

// Every attribute an op may carry; each op reads the ones it documents.
struct Attributes {
  std::vector<int64_t> dimensions;   // broadcast, transpose, reduce, reverse,
                                     // concatenate, sort
  std::vector<int64_t> slice_sizes;  // dynamic-slice, gather
  std::vector<SliceDim> slice;       // slice
  std::vector<PadDim> padding;       // pad
  std::vector<WindowDim> window;     // reduce-window, select-and-scatter,
                                     // convolution
  DotDims dot;
  ConvDims conv;
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
  GatherDims gather;
  ScatterDims scatter;
  ComparisonDirection direction = ComparisonDirection::kEq;
  int64_t parameter_number = 0;
  int64_t tuple_index = 0;
  int64_t iota_dimension = 0;
  std::vector<std::vector<int64_t>> replica_groups;
  // collective-permute: {source, target} replica pairs.
  std::vector<std::vector<int64_t>> source_target_pairs;
  int64_t exponent_bits = 0;  // reduce-precision
  int64_t mantissa_bits = 0;  // reduce-precision
  RngDistribution distribution = RngDistribution::kUniform;
  bool is_stable = false;
  std::vector<Precision> operand_precision;  // dot, convolution: none or one
                                             // per operand
  std::string custom_call_target;
  std::string config;  // infeed_config / outfeed_config; a LAPACK custom
                       // call's backend_config; rng-bit-generator's
                       // algorithm ("" for rng_default, "rng_philox",
                       // "rng_three_fry")
  Literal literal;     // constant
  LinalgOptions linalg;  // cholesky, triangular-solve
  bool operator==(const Attributes&) const = default;
};

class Instruction {
 public:
  Instruction(Opcode opcode, Shape shape, std::string name)
      : opcode_(opcode), shape_(std::move(shape)), name_(std::move(name)) {}

  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  void set_shape(Shape s) { shape_ = std::move(s); }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  // For lowerings that give an instruction another op (its attributes and
  // operands are the caller's to set).
  void set_opcode(Opcode op) { opcode_ = op; }
  // Position within the owning computation's instruction order.
  int index() const { return index_; }

  const std::vector<Instruction*>& operands() const { return operands_; }
  Instruction* operand(int i) const { return operands_[i]; }
  int operand_count() const { return static_cast<int>(operands_.size()); }
  void AddOperand(Instruction* op) { operands_.push_back(op); }
  void ReplaceOperand(int i, Instruction* op) { operands_[i] = op; }

  // Called computations: to_apply; select/scatter; condition/body; branches.
  const std::vector<Computation*>& called() const { return called_; }
  Computation* called(int i) const { return called_[i]; }
  void AddCalled(Computation* c) { called_.push_back(c); }

  const Attributes& attrs() const { return attrs_; }
  Attributes& mutable_attrs() { return attrs_; }

  const Computation* parent() const { return parent_; }

  // The line of the HLO text the instruction was read from; 0 when it was
  // not read from text. Messages about it name the line.
  int source_line() const { return source_line_; }
  void set_source_line(int line) { source_line_ = line; }

 private:
  friend class Computation;
  Opcode opcode_;
  Shape shape_;
  std::string name_;
  int index_ = -1;
  std::vector<Instruction*> operands_;
  std::vector<Computation*> called_;
  Attributes attrs_;
  Computation* parent_ = nullptr;
  int source_line_ = 0;
};

class Computation {
 public:
  explicit Computation(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Takes ownership; returns the borrowed instruction.
  Instruction* AddInstruction(std::unique_ptr<Instruction> instr);
  // Instructions in an order where operands come before users.
  const std::vector<std::unique_ptr<Instruction>>& instructions() const {
    return instructions_;
  }
  int instruction_count() const { return static_cast<int>(instructions_.size()); }
  Instruction* root() const { return root_; }
  void set_root(Instruction* r) { root_ = r; }
  // Parameters by parameter_number (filled by RebuildParameterList).
  const std::vector<Instruction*>& parameters() const { return parameters_; }
  Instruction* parameter(int i) const { return parameters_[i]; }
  int parameter_count() const { return static_cast<int>(parameters_.size()); }

  // Reorders instructions so operands precede users (root's operands first,
  // then whatever is not reachable from it, in original order), and
  // refreshes the parameter list. Fails naming an instruction on a cycle.
  absl::Status Canonicalize();

  // Signature "(f32[2], s32[]) -> f32[]".
  std::vector<Shape> ParameterShapes() const;

  // Parameter numbers at or above this are rejected by the verifier.
  static constexpr int64_t kMaxParameters = 1 << 16;

 private:
  void NoteParameter(Instruction* instr);

  std::string name_;
  std::vector<std::unique_ptr<Instruction>> instructions_;
  std::vector<Instruction*> parameters_;
  Instruction* root_ = nullptr;
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  Computation* AddComputation(std::unique_ptr<Computation> c);
  const std::vector<std::unique_ptr<Computation>>& computations() const {
    return computations_;
  }
  Computation* entry() const { return entry_; }
  void set_entry(Computation* c) { entry_ = c; }
  Computation* FindComputation(absl::string_view name) const;

  // Computations reachable from the entry, callees before callers, entry last.
  std::vector<const Computation*> PostOrder() const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
};

}  // namespace kiln::ir

#endif  // KILN_COMPILER_IR_INSTRUCTION_H_
