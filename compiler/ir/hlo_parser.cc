#include "compiler/ir/hlo_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "compiler/ir/hlo_lowering.h"
#include "compiler/ir/hlo_values.h"
#include "compiler/ir/shape_inference.h"
#include "compiler/ir/verifier.h"

namespace kiln::ir {
namespace {

using hlo_text::ParseDimLabels;
using hlo_text::ParseInt;
using hlo_text::ParseIntList;
using hlo_text::ParseLiteral;
using hlo_text::ParsePadding;
using hlo_text::ParseReplicaGroups;
using hlo_text::ParseSlice;
using hlo_text::ParseWindow;
using hlo_text::ReadQuoted;

// Attributes that carry nothing we execute; accepted and dropped.
const absl::flat_hash_set<absl::string_view>& IgnoredAttributes() {
  static const auto* const kSet = new absl::flat_hash_set<absl::string_view>{
      "metadata", "sharding", "frontend_attributes", "backend_config",
      "precision_config", "channel_id",
      "use_global_device_ids", "constrain_layout", "indices_are_sorted",
      "unique_indices", "outfeed_shape", "api_version",
      "custom_call_has_side_effect", "output_to_operand_aliasing",
      "operand_layout_constraints", "custom_call_schedule", "type",
      "statistics_viz", "algorithm", "origin", "result_accuracy",
      "control-predecessors", "schedule", "execution_thread",
      // Newer XLA: how parameters are replicated, composite calls (a call
      // whose frontend attributes name a composite op), the role of a
      // convolution; none changes what the instruction computes.
      "parameter_replication", "is_composite", "convolution_kind",
      // Where a sharding domain starts and ends; which thread runs an
      // asynchronous op.
      "domain", "async_execution_thread",
      // Values for visualizing a constant.
      "statistics",
      // A copy-start that prefetches a parameter across programs.
      "cross_program_prefetch_index"};
  return *kSet;
}

// The ops each attribute belongs to. An attribute on another op is an
// error: nothing would read it, so what the text asked for would be lost.
// (fusion, map and the spelled ops are checked where they are read.)
bool AttributeApplies(absl::string_view key, Opcode op) {
  using O = Opcode;
  static const auto* const kOwners =
      new absl::flat_hash_map<absl::string_view, std::vector<Opcode>>{
          {"dimensions", {O::kBroadcast, O::kTranspose, O::kReduce, O::kReverse,
                          O::kConcatenate, O::kSort, O::kAllGather, O::kReduceScatter,
                          O::kAllToAll}},
          {"dynamic_slice_sizes", {O::kDynamicSlice}},
          {"slice_sizes", {O::kGather, O::kDynamicSlice}},
          {"slice", {O::kSlice}},
          {"padding", {O::kPad}},
          {"window", {O::kConvolution, O::kReduceWindow, O::kSelectAndScatter, O::kCustomCall}},
          {"dim_labels", {O::kConvolution, O::kCustomCall}},
          {"feature_group_count", {O::kConvolution, O::kCustomCall}},
          {"batch_group_count", {O::kConvolution, O::kCustomCall}},
          {"lhs_batch_dims", {O::kDot}},
          {"rhs_batch_dims", {O::kDot}},
          {"lhs_contracting_dims", {O::kDot}},
          {"rhs_contracting_dims", {O::kDot}},
          {"direction", {O::kCompare}},
          {"comparison_direction", {O::kCompare}},
          {"offset_dims", {O::kGather}},
          {"collapsed_slice_dims", {O::kGather}},
          {"start_index_map", {O::kGather}},
          {"operand_batching_dims", {O::kGather}},
          {"start_indices_batching_dims", {O::kGather}},
          {"index_vector_dim", {O::kGather, O::kScatter}},
          {"update_window_dims", {O::kScatter}},
          {"inserted_window_dims", {O::kScatter}},
          {"scatter_dims_to_operand_dims", {O::kScatter}},
          {"input_batching_dims", {O::kScatter}},
          {"scatter_indices_batching_dims", {O::kScatter}},
          {"iota_dimension", {O::kIota}},
          {"index", {O::kGetTupleElement}},
          {"replica_groups", {O::kAllReduce, O::kAllGather, O::kReduceScatter, O::kAllToAll,
                              O::kCollectiveBroadcast}},
          {"source_target_pairs", {O::kCollectivePermute}},
          {"exponent_bits", {O::kReducePrecision}},
          {"mantissa_bits", {O::kReducePrecision}},
          {"distribution", {O::kRng}},
          {"operand_precision", {O::kDot, O::kConvolution, O::kCustomCall}},
          {"is_stable", {O::kSort}},
          {"lower", {O::kCholesky, O::kTriangularSolve}},
          {"left_side", {O::kTriangularSolve}},
          {"unit_diagonal", {O::kTriangularSolve}},
          {"transpose_a", {O::kTriangularSolve}},
          {"custom_call_target", {O::kCustomCall}},
          {"infeed_config", {O::kInfeed}},
          {"outfeed_config", {O::kOutfeed}},
          {"to_apply", {O::kReduce, O::kReduceWindow, O::kScatter, O::kSort, O::kCall,
                        O::kAllReduce, O::kReduceScatter, O::kCustomCall}},
          {"select", {O::kSelectAndScatter}},
          {"scatter", {O::kSelectAndScatter}},
          {"condition", {O::kWhile}},
          {"body", {O::kWhile}},
          {"true_computation", {O::kConditional}},
          {"false_computation", {O::kConditional}},
          {"branch_computations", {O::kConditional}},
          {"calls", {O::kCall}},
      };
  auto it = kOwners->find(key);
  if (it == kOwners->end()) return true;  // not an op attribute: judged by the caller
  return std::find(it->second.begin(), it->second.end(), op) != it->second.end();
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '-';
}

struct PendingInstr {
  PendingInstr(Instruction* instr, std::vector<std::string> operand_names, int line)
      : instr(instr), operand_names(std::move(operand_names)), line(line) {}

  Instruction* instr;
  std::vector<std::string> operand_names;
  // (attribute, computation name) to resolve once all computations exist.
  std::vector<std::pair<std::string, std::string>> called_names;
  int line;
  // The text gave no result shape: inferred once the operands are known.
  bool infer_shape = false;
  // A `map`: calls its computation made elementwise over the result's dims.
  bool map = false;
  // A `fusion`: a call, with a `kind`.
  bool fusion = false;
  // A convolution's window dimensions whose kernel is read reversed
  // (rhs_reversal): the kernel goes through a `reverse` first.
  std::vector<int64_t> rhs_reversal;
  // Batching dimensions of a gather or scatter, of the operand and of the
  // indices (lowered to index components once the operands are known).
  std::vector<int64_t> operand_batching, indices_batching;
  // A compare with type=TOTALORDER (lowered once the operands are known).
  bool total_order = false;
  // A get-dimension-size, read as a constant.
  bool dimension_size = false;
  // A topk (a tuple whose elements are lowered once its operand is known):
  // k and largest.
  bool topk = false;
  int64_t topk_k = -1;
  bool topk_largest = true;
  // A batch-norm-training, -inference or -grad (lowered once its operands
  // are known), with its epsilon and feature_index.
  std::optional<BatchNormKind> batch_norm;
  // stochastic-convert: lowered to elementwise ops ending in a select.
  bool stochastic_convert = false;
  // rng-get-and-update-state: a draw of fresh state bits.
  bool rng_state = false;
  double epsilon = 0;
  int64_t feature_index = -1;
  // A custom call's called_computations (XLA's TopK names one).
  std::string custom_called;
  // A custom call's backend_config, as written (read by the lowering of
  // XLA's LAPACK calls; ignored otherwise).
  std::string backend_config;
  // The op as the text names it, for messages.
  std::string op_name;
};

// The layout (minor to major) a shape was written with; empty: none.
using Layout = std::vector<int64_t>;

// What the text said of an instruction: its shape, when written, and the
// layout of that shape.
struct Declared {
  Shape shape;
  Layout layout;
};

// How Kiln reads an instruction that XLA writes with an op of its own.
enum class Spelling {
  kPlain,
  // Its value is its first operand's (opt-barrier, add-dependency, domain):
  // a copy of it, element by element for a tuple.
  kPassThrough,
  // get-dimension-size: a constant, as every dimension is static.
  kDimensionSize,
  // "X-start" computes X; "X-done" and "async-update" hand its value on.
  kAsyncStart,
  kAsyncUpdate,
  kAsyncDone,
};

struct SpelledOp {
  std::optional<Opcode> op;
  Spelling spelling = Spelling::kPlain;
  // kAsyncStart: the op it starts ("copy", "all-gather", "async", ...).
  absl::string_view started;
};

SpelledOp ReadOpName(absl::string_view op_name) {
  SpelledOp out{OpcodeFromName(op_name)};
  // XLA's spellings of a call (fusion, map) and of a reshape (bitcast).
  if (op_name == "fusion" || op_name == "map") out.op = Opcode::kCall;
  if (op_name == "bitcast") out.op = Opcode::kReshape;
  // Ordering and sharding annotations: opt-barrier only orders scheduling,
  // add-dependency orders its operand after a token, domain marks where a
  // sharding changes.
  if (op_name == "opt-barrier" || op_name == "add-dependency" || op_name == "domain") {
    out.op = Opcode::kCopy;
    out.spelling = Spelling::kPassThrough;
  }
  // topk: the tuple of its values and indices, lowered to a sort.
  if (op_name == "topk") out.op = Opcode::kTuple;
  // Batch normalization, written out: a tuple, or for inference the final
  // add.
  if (op_name == "batch-norm-training" || op_name == "batch-norm-grad") out.op = Opcode::kTuple;
  if (op_name == "batch-norm-inference") out.op = Opcode::kAdd;
  // stochastic-convert: elementwise ops, the last a select.
  if (op_name == "stochastic-convert") out.op = Opcode::kSelect;
  // rng-get-and-update-state: an rng of the state's bits.
  if (op_name == "rng-get-and-update-state") out.op = Opcode::kRng;
  if (op_name == "get-dimension-size") {
    out.op = Opcode::kConstant;
    out.spelling = Spelling::kDimensionSize;
  }
  absl::string_view base = op_name;
  if (absl::ConsumeSuffix(&base, "-start")) {
    out.op = base == "async" ? std::optional<Opcode>(Opcode::kCall) : OpcodeFromName(base);
    out.spelling = Spelling::kAsyncStart;
    out.started = base;
  } else if (absl::ConsumeSuffix(&base, "-update")) {
    out.op = Opcode::kCopy;
    out.spelling = Spelling::kAsyncUpdate;
  } else if (absl::ConsumeSuffix(&base, "-done")) {
    out.op = Opcode::kCopy;
    out.spelling = Spelling::kAsyncDone;
  }
  return out;
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}
  // A parser of a part of `owner`'s text (an operand list) whose
  // instructions join the owner's.
  Parser(absl::string_view text, Parser* owner) : text_(text), owner_(owner) {}

  absl::StatusOr<std::unique_ptr<Module>> Parse();
  absl::StatusOr<Shape> ParseShapeOnly() {
    ASSIGN_OR_RETURN(Shape s, ParseShapeText());
    SkipWs();
    if (pos_ != text_.size()) return Error("trailing text after shape");
    return s;
  }

 private:
  absl::Status Error(absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", LineAt(pos_), ": ", msg));
  }
  absl::Status ErrorAt(int line, absl::string_view msg) const {
    // A message from a part of the text that already names its line.
    if (absl::StartsWith(msg, "line ")) {
      absl::string_view rest = msg.substr(5);
      const size_t colon = rest.find(':');
      int64_t written;
      if (colon != absl::string_view::npos && absl::SimpleAtoi(rest.substr(0, colon), &written)) {
        return absl::InvalidArgumentError(msg);
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", msg));
  }
  int LineAt(size_t pos) const {
    int line = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line;
    }
    return line;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipWs() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//" || c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else if (text_.substr(pos_, 2) == "/*") {
        size_t end = text_.find("*/", pos_ + 2);
        pos_ = end == absl::string_view::npos ? text_.size() : end + 2;
      } else {
        break;
      }
    }
  }
  bool Consume(absl::string_view s) {
    SkipWs();
    if (text_.substr(pos_, s.size()) == s) {
      pos_ += s.size();
      return true;
    }
    return false;
  }
  absl::Status Expect(absl::string_view s) {
    if (!Consume(s)) {
      return Error(absl::StrCat("expected '", s, "' but found '",
                                text_.substr(pos_, 12), "'"));
    }
    return absl::OkStatus();
  }
  // A keyword only if followed by a non-name character.
  bool ConsumeKeyword(absl::string_view kw) {
    SkipWs();
    if (text_.substr(pos_, kw.size()) == kw &&
        (pos_ + kw.size() >= text_.size() || !IsNameChar(text_[pos_ + kw.size()]))) {
      pos_ += kw.size();
      return true;
    }
    return false;
  }
  absl::string_view ReadName() {
    SkipWs();
    if (Peek() == '%') ++pos_;
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // Text up to the matching close of the bracket at pos_ (exclusive of the
  // outer brackets); pos_ ends after the close.
  absl::StatusOr<absl::string_view> ReadBalanced(char open, char close) {
    SkipWs();
    if (Peek() != open) return Error(absl::StrCat("expected '", std::string(1, open), "'"));
    size_t start = ++pos_;
    int depth = 1;
    bool in_string = false;
    while (!AtEnd()) {
      char c = text_[pos_];
      if (in_string) {
        if (c == '\\') ++pos_;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == open) {
        ++depth;
      } else if (c == close) {
        if (--depth == 0) {
          ++pos_;
          return text_.substr(start, pos_ - 1 - start);
        }
      }
      ++pos_;
    }
    return Error(absl::StrCat("unbalanced '", std::string(1, open), "'"));
  }

  bool LooksLikeShape() {
    SkipWs();
    if (Peek() == '(') return true;
    size_t p = pos_;
    while (p < text_.size() && std::isalnum(static_cast<unsigned char>(text_[p]))) ++p;
    return p < text_.size() && text_[p] == '[' &&
           ElementTypeFromName(text_.substr(pos_, p - pos_)).has_value();
  }

  // `layout`, when given, receives the array's layout ({1,0}: {1, 0};
  // empty when none is written).
  absl::StatusOr<Shape> ParseShapeText(Layout* layout = nullptr);
  absl::Status ParseComputation(Module* module);
  absl::Status ParseInstruction(Computation* comp, bool* is_root);
  // "[shape] opcode(operands)" and, with `attributes`, ", key=value"...:
  // adds the instruction named `name` to `comp` (with `map`, `bitcast` and
  // inline operands, the instructions it stands for).
  absl::Status ParseExpression(Computation* comp, const std::string& name, int line,
                               bool attributes);
  absl::Status ParseOperands(Computation* comp, absl::string_view args, const std::string& user,
                             int line, PendingInstr& pending,
                             std::vector<std::optional<Declared>>* declared);
  absl::Status ParseAttributes(PendingInstr& pending, int line);
  absl::Status ParseAttribute(PendingInstr& pending, absl::string_view key,
                              absl::string_view value);
  // A bitcast as a reshape between the transposes its layouts need.
  absl::Status AddBitcast(Computation* comp, const std::string& name, const Declared& result,
                          const std::string& operand, const std::optional<Declared>& written,
                          int line);
  // An optimization barrier as the value it passes through: `name` is a
  // tuple of the elements of `operand` (a copy of it, for an array).
  absl::Status AddBarrier(Computation* comp, const std::string& name, const Shape& shape,
                          const std::string& operand, int line);
  // An instruction read as others (Spelling): a copy of its operand, a
  // constant dimension size, or the value of an asynchronous start.
  absl::Status AddSpelled(Computation* comp, const std::string& name, absl::string_view op_name,
                          Spelling spelling, const std::optional<Declared>& declared,
                          const Attributes& attrs, const std::vector<std::string>& operands,
                          const std::vector<std::optional<Declared>>& operands_declared,
                          int line);
  // The tuple an asynchronous start stands for: its operands (a tuple of
  // them where the shape has one), the value computed as `value`, and zero
  // for each context element.
  absl::Status AddStartTuple(Computation* comp, const std::string& name, const Shape& shape,
                             const std::string& value, int64_t value_index,
                             const std::vector<std::string>& operands, int line);
  // Skips the stack-frame tables newer dumps put after the header.
  void SkipStackFrameTables();
  absl::Status ResolveAll(Module* module);
  absl::Status Resolve(Module* module, PendingInstr& p,
                       const absl::flat_hash_map<absl::string_view, Instruction*>& names);
  Parser& Root() { return owner_ != nullptr ? owner_->Root() : *this; }

  absl::string_view text_;
  Parser* owner_ = nullptr;
  size_t pos_ = 0;
  int shape_depth_ = 0;  // tuple shapes being parsed, nested
  int inline_depth_ = 0;  // operands written inline, nested
  std::vector<PendingInstr> pending_;
  // What the text declared of each instruction of the computation being
  // parsed, by name (a bitcast needs its operand's shape and layout).
  absl::flat_hash_map<std::string, Declared> declared_;
  // Instructions whose shape is still to be inferred.
  absl::flat_hash_set<const Instruction*> unknown_shape_;
  // Asynchronous starts read as tuples: where in each the value is.
  absl::flat_hash_map<std::string, int64_t> async_value_;
};

absl::StatusOr<Shape> Parser::ParseShapeText(Layout* layout) {
  SkipWs();
  if (Peek() == '(') {
    // The nesting is the text's choice: bounded before recursing.
    ++shape_depth_;
    absl::Cleanup leave = [this] { --shape_depth_; };
    if (shape_depth_ > kMaxTupleDepth) {
      return Error(absl::StrCat("tuples nested more than ", kMaxTupleDepth, " deep"));
    }
    ++pos_;
    std::vector<Shape> elements;
    SkipWs();
    if (Peek() != ')') {
      while (true) {
        ASSIGN_OR_RETURN(Shape s, ParseShapeText());
        elements.push_back(std::move(s));
        if (Consume(",")) continue;
        break;
      }
    }
    RETURN_IF_ERROR(Expect(")"));
    return Shape::Tuple(std::move(elements));
  }
  size_t start = pos_;
  while (!AtEnd() && std::isalnum(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  absl::string_view type_name = text_.substr(start, pos_ - start);
  std::optional<ElementType> type = ElementTypeFromName(type_name);
  if (!type.has_value() || *type == ElementType::kTuple) {
    pos_ = start;
    return Error(absl::StrCat("unknown element type '", type_name, "'"));
  }
  ASSIGN_OR_RETURN(absl::string_view dims_text, ReadBalanced('[', ']'));
  std::vector<int64_t> dims;
  if (!absl::StripAsciiWhitespace(dims_text).empty()) {
    for (absl::string_view d : absl::StrSplit(dims_text, ',')) {
      d = absl::StripAsciiWhitespace(d);
      int64_t v;
      if (!absl::SimpleAtoi(d, &v)) {
        return Error(absl::StrCat("unsupported dimension '", d,
                                  "' (only static sizes are supported)"));
      }
      dims.push_back(v);
    }
  }
  // Layouts ({1,0} or {1,0:T(8,128)}): Kiln arrays are row-major, so a
  // layout only matters to a bitcast, which reads it here.
  if (!AtEnd() && text_[pos_] == '{') {
    ASSIGN_OR_RETURN(absl::string_view written, ReadBalanced('{', '}'));
    if (layout != nullptr) {
      absl::string_view dims_part = written.substr(0, written.find(':'));
      for (absl::string_view d : absl::StrSplit(dims_part, ',', absl::SkipWhitespace())) {
        int64_t v;
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &v)) {
          return Error(absl::StrCat("bad layout '{", written, "}'"));
        }
        layout->push_back(v);
      }
    }
  }
  Shape shape(*type, std::move(dims));
  if (shape.IsToken() && shape.rank() != 0) return Error("token has no dims");
  if (absl::Status st = ValidateShape(shape); !st.ok()) return Error(st.message());
  return shape;
}

absl::Status Parser::ParseAttribute(PendingInstr& pending, absl::string_view key,
                                    absl::string_view value) {
  Instruction* instr = pending.instr;
  Attributes& a = instr->mutable_attrs();
  const Opcode op = instr->opcode();
  // fusion (a call), map (a call with dimensions) and get-dimension-size
  // (read as a constant) carry attributes their op would not.
  const bool applies = IgnoredAttributes().contains(key) ? true
                       : pending.map ? key == "dimensions" || key == "to_apply"
                       : pending.fusion ? key == "calls" || key == "kind"
                       : pending.dimension_size ? key == "dimensions"
                       : pending.rng_state ? key == "delta"
                       : pending.topk ? key == "k" || key == "largest"
                       : pending.batch_norm ? key == "epsilon" || key == "feature_index"
                                                : AttributeApplies(key, op);
  if (!applies) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", key, "' does not apply to ",
                                                   pending.op_name));
  }
  auto computation_ref = [&](absl::string_view v) {
    pending.called_names.push_back(
        {std::string(key), std::string(absl::StripPrefix(
                               absl::StripAsciiWhitespace(v), "%"))});
  };
  if (key == "backend_config") {
    pending.backend_config = std::string(value);
  } else if (key == "dimensions") {
    ASSIGN_OR_RETURN(a.dimensions, ParseIntList(value));
  } else if (key == "dynamic_slice_sizes" || key == "slice_sizes") {
    ASSIGN_OR_RETURN(a.slice_sizes, ParseIntList(value));
  } else if (key == "slice") {
    ASSIGN_OR_RETURN(a.slice, ParseSlice(value));
  } else if (key == "padding") {
    ASSIGN_OR_RETURN(a.padding, ParsePadding(value));
  } else if (key == "window") {
    ASSIGN_OR_RETURN(a.window, ParseWindow(value, &pending.rhs_reversal));
  } else if (key == "dim_labels") {
    ASSIGN_OR_RETURN(a.conv, ParseDimLabels(value));
  } else if (key == "feature_group_count") {
    ASSIGN_OR_RETURN(a.feature_group_count, ParseInt(value));
  } else if (key == "batch_group_count") {
    ASSIGN_OR_RETURN(a.batch_group_count, ParseInt(value));
  } else if (key == "lhs_batch_dims") {
    ASSIGN_OR_RETURN(a.dot.lhs_batch, ParseIntList(value));
  } else if (key == "rhs_batch_dims") {
    ASSIGN_OR_RETURN(a.dot.rhs_batch, ParseIntList(value));
  } else if (key == "lhs_contracting_dims") {
    ASSIGN_OR_RETURN(a.dot.lhs_contracting, ParseIntList(value));
  } else if (key == "rhs_contracting_dims") {
    ASSIGN_OR_RETURN(a.dot.rhs_contracting, ParseIntList(value));
  } else if (key == "direction" || key == "comparison_direction") {
    auto d = ComparisonDirectionFromName(absl::StripAsciiWhitespace(value));
    if (!d) return absl::InvalidArgumentError(absl::StrCat("bad direction '", value, "'"));
    a.direction = *d;
  } else if (key == "offset_dims") {
    ASSIGN_OR_RETURN(a.gather.offset_dims, ParseIntList(value));
  } else if (key == "collapsed_slice_dims") {
    ASSIGN_OR_RETURN(a.gather.collapsed_slice_dims, ParseIntList(value));
  } else if (key == "start_index_map") {
    ASSIGN_OR_RETURN(a.gather.start_index_map, ParseIntList(value));
  } else if (key == "index_vector_dim") {
    ASSIGN_OR_RETURN(int64_t d, ParseInt(value));
    a.gather.index_vector_dim = d;
    a.scatter.index_vector_dim = d;
  } else if (key == "operand_batching_dims" || key == "input_batching_dims") {
    ASSIGN_OR_RETURN(pending.operand_batching, ParseIntList(value));
  } else if (key == "start_indices_batching_dims" || key == "scatter_indices_batching_dims") {
    ASSIGN_OR_RETURN(pending.indices_batching, ParseIntList(value));
  } else if (key == "update_window_dims") {
    ASSIGN_OR_RETURN(a.scatter.update_window_dims, ParseIntList(value));
  } else if (key == "inserted_window_dims") {
    ASSIGN_OR_RETURN(a.scatter.inserted_window_dims, ParseIntList(value));
  } else if (key == "scatter_dims_to_operand_dims") {
    ASSIGN_OR_RETURN(a.scatter.scatter_dims_to_operand_dims, ParseIntList(value));
  } else if (key == "iota_dimension") {
    ASSIGN_OR_RETURN(a.iota_dimension, ParseInt(value));
  } else if (key == "index") {
    ASSIGN_OR_RETURN(a.tuple_index, ParseInt(value));
  } else if (key == "replica_groups") {
    ASSIGN_OR_RETURN(a.replica_groups, ParseReplicaGroups(value));
  } else if (key == "source_target_pairs") {
    ASSIGN_OR_RETURN(a.source_target_pairs, ParseReplicaGroups(value));
  } else if (key == "exponent_bits") {
    ASSIGN_OR_RETURN(a.exponent_bits, ParseInt(value));
  } else if (key == "mantissa_bits") {
    ASSIGN_OR_RETURN(a.mantissa_bits, ParseInt(value));
  } else if (key == "distribution") {
    absl::string_view d = absl::StripAsciiWhitespace(value);
    if (d == "rng_uniform") a.distribution = RngDistribution::kUniform;
    else if (d == "rng_normal") a.distribution = RngDistribution::kNormal;
    else return absl::InvalidArgumentError(absl::StrCat("unsupported distribution '", d, "'"));
  } else if (key == "operand_precision") {
    absl::string_view v = absl::StripAsciiWhitespace(value);
    if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
      return absl::InvalidArgumentError("operand_precision must be {...}");
    }
    for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      std::optional<Precision> p = PrecisionFromName(absl::StripAsciiWhitespace(name));
      if (!p) return absl::InvalidArgumentError(absl::StrCat("bad precision '", name, "'"));
      a.operand_precision.push_back(*p);
    }
  } else if (key == "is_stable") {
    a.is_stable = absl::StripAsciiWhitespace(value) == "true";
  } else if (key == "lower" || key == "left_side" || key == "unit_diagonal") {
    const absl::string_view v = absl::StripAsciiWhitespace(value);
    if (v != "true" && v != "false") {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be true or false, got '", v, "'"));
    }
    bool& flag = key == "lower" ? a.linalg.lower
                 : key == "left_side" ? a.linalg.left_side
                                      : a.linalg.unit_diagonal;
    flag = v == "true";
  } else if (key == "transpose_a") {
    const absl::string_view v = absl::StripAsciiWhitespace(value);
    std::optional<TransposeKind> t = TransposeKindFromName(v);
    if (!t) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT, got '", v, "'"));
    }
    a.linalg.transpose_a = *t;
  } else if (key == "custom_call_target") {
    ASSIGN_OR_RETURN(a.custom_call_target, ReadQuoted(value));
  } else if (key == "infeed_config" || key == "outfeed_config") {
    ASSIGN_OR_RETURN(a.config, ReadQuoted(value));
  } else if (key == "to_apply" || key == "select" || key == "scatter" ||
             key == "condition" || key == "body" || key == "true_computation" ||
             key == "false_computation" || key == "calls") {
    computation_ref(value);
  } else if (key == "branch_computations") {
    absl::string_view v = absl::StripAsciiWhitespace(value);
    if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
      return absl::InvalidArgumentError("branch_computations must be {...}");
    }
    for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      computation_ref(name);
    }
  } else if (key == "delta" && pending.rng_state) {
    // How far the state advances; every call draws fresh bits instead.
    ASSIGN_OR_RETURN(const int64_t delta, ParseInt(value));
    if (delta < 0) return absl::InvalidArgumentError(absl::StrCat("negative delta ", delta));
  } else if (key == "epsilon" && pending.batch_norm) {
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(value), &pending.epsilon)) {
      return absl::InvalidArgumentError(absl::StrCat("bad epsilon '", value, "'"));
    }
  } else if (key == "feature_index" && pending.batch_norm) {
    ASSIGN_OR_RETURN(pending.feature_index, ParseInt(value));
  } else if (key == "k" && pending.topk) {
    ASSIGN_OR_RETURN(pending.topk_k, ParseInt(value));
  } else if (key == "largest" && pending.topk) {
    const absl::string_view v = absl::StripAsciiWhitespace(value);
    if (v != "true" && v != "false") {
      return absl::InvalidArgumentError(absl::StrCat("largest must be true or false, got '", v,
                                                     "'"));
    }
    pending.topk_largest = v == "true";
  } else if ((key == "called_computations" || key == "literal") && op == Opcode::kCustomCall) {
    // What these mean is the target's to say; Kiln's registered targets
    // (runtime/custom_call.h) take neither, and an unregistered target is
    // refused when the module is compiled. XLA's TopK call names its
    // comparator here.
    if (key == "called_computations") {
      absl::string_view v = absl::StripAsciiWhitespace(value);
      absl::ConsumePrefix(&v, "{");
      absl::ConsumeSuffix(&v, "}");
      pending.custom_called = std::string(absl::StripPrefix(absl::StripAsciiWhitespace(v), "%"));
    }
  } else if (key == "algorithm" && op == Opcode::kRngBitGenerator) {
    // XLA's bit streams: rng_default is the backend's generator, which on
    // Kiln's backends is XLA's CPU default, Philox.
    absl::string_view algorithm = absl::StripAsciiWhitespace(value);
    if (algorithm != "rng_default" && algorithm != "rng_philox" &&
        algorithm != "rng_three_fry") {
      return absl::InvalidArgumentError(absl::StrCat(
          "rng-bit-generator algorithm=", algorithm,
          " is unknown: rng_default, rng_philox or rng_three_fry"));
    }
    a.config = algorithm == "rng_default" ? "" : std::string(algorithm);
  } else if (key == "type" && op == Opcode::kCompare) {
    // FLOAT, SIGNED and UNSIGNED are what the element type implies;
    // TOTALORDER orders NaNs and signed zeros too.
    absl::string_view type = absl::StripAsciiWhitespace(value);
    if (type == "TOTALORDER") {
      pending.total_order = true;
    } else if (type != "FLOAT" && type != "SIGNED" && type != "UNSIGNED") {
      return absl::InvalidArgumentError(absl::StrCat("unknown comparison type '", type, "'"));
    }
  } else if (key == "kind" && pending.fusion) {
    // How XLA grouped the fused ops; the fused computation says what they
    // compute.
    absl::string_view kind = absl::StripAsciiWhitespace(value);
    if (kind != "kLoop" && kind != "kInput" && kind != "kOutput" && kind != "kCustom") {
      return absl::InvalidArgumentError(absl::StrCat("unknown fusion kind '", kind, "'"));
    }
  } else if (IgnoredAttributes().contains(key)) {
    // Carries nothing the IR needs.
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported attribute '", key, "' on ", OpcodeName(op)));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseInstruction(Computation* comp, bool* is_root) {
  const int line = LineAt(pos_);
  *is_root = ConsumeKeyword("ROOT");
  absl::string_view name = ReadName();
  if (name.empty()) return Error("expected an instruction name");
  RETURN_IF_ERROR(Expect("="));
  return ParseExpression(comp, std::string(name), line, /*attributes=*/true);
}

// Ops whose result shape does not follow from their operands: the text
// must give it.
bool NeedsWrittenShape(absl::string_view op_name, Opcode op) {
  switch (op) {
    case Opcode::kParameter: case Opcode::kConstant: case Opcode::kIota:
    case Opcode::kConvert: case Opcode::kBitcastConvert: case Opcode::kBroadcast:
    case Opcode::kReshape: case Opcode::kRng: case Opcode::kInfeed:
    case Opcode::kCustomCall: case Opcode::kDot:
      return true;
    case Opcode::kAllGather: case Opcode::kReduceScatter: case Opcode::kRngBitGenerator:
      return true;
    default:
      return op_name == "bitcast" || op_name == "map";
  }
}


absl::Status Parser::ParseExpression(Computation* comp, const std::string& name, int line,
                                     bool attributes) {
  std::optional<Declared> declared;
  if (LooksLikeShape()) {
    Layout layout;
    absl::StatusOr<Shape> shape = ParseShapeText(&layout);
    if (!shape.ok()) return ErrorAt(line, shape.status().message());
    declared = Declared{*std::move(shape), std::move(layout)};
  }
  SkipWs();
  size_t op_start = pos_;
  while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
  const absl::string_view op_name = text_.substr(op_start, pos_ - op_start);
  const SpelledOp spelled = ReadOpName(op_name);
  const std::optional<Opcode> op = spelled.op;
  if (!op.has_value()) {
    if (Peek() == '[') {
      // "s4[2] ...": a shape of a type Kiln does not have, not an op.
      return ErrorAt(line, absl::StrCat("unknown element type '", op_name, "'"));
    }
    return ErrorAt(line, absl::StrCat("unknown or unsupported opcode '", op_name, "'"));
  }
  if (!declared.has_value() && spelled.spelling == Spelling::kPlain &&
      NeedsWrittenShape(op_name, *op)) {
    return ErrorAt(line, absl::StrCat("%", name, ": the result shape of ", op_name,
                                      " does not follow from its operands; write it"));
  }
  // An asynchronous start written as XLA does, ((operands), value,
  // context...) (a copy-start: (value, operand, context)): the op computes
  // the value as "<name>.value" and "<name>" is that tuple, which the done
  // reads the value from.
  std::string instr_name = name;
  std::optional<Declared> start_tuple;
  int64_t start_value_index = 0;
  if (spelled.spelling == Spelling::kAsyncStart) {
    if (!declared.has_value()) {
      return ErrorAt(line, absl::StrCat("%", name, ": write the result shape of ", op_name));
    }
    const Shape& d = declared->shape;
    const bool tuple_form = spelled.started != "all-reduce" && d.IsTuple() &&
                            d.tuple_shapes().size() >= 2;
    if (!tuple_form && (spelled.started == "async" || spelled.started == "copy")) {
      return ErrorAt(line, absl::StrCat(op_name, " must have a tuple shape (operands, value, "
                                        "context...), got ", d.ToString()));
    }
    if (tuple_form) {
      start_value_index = spelled.started == "copy" ? 0 : 1;
      start_tuple = declared;
      declared = Declared{d.tuple_shape(static_cast<int>(start_value_index)), {}};
      instr_name = absl::StrCat(name, ".value");
    }
  }
  absl::StatusOr<absl::string_view> args = ReadBalanced('(', ')');
  if (!args.ok()) return ErrorAt(line, args.status().message());
  PendingInstr pending(nullptr, {}, line);
  pending.op_name = std::string(op_name);
  pending.infer_shape = !declared.has_value();
  pending.map = op_name == "map";
  pending.fusion = op_name == "fusion";
  pending.topk = op_name == "topk";
  if (op_name == "batch-norm-training") pending.batch_norm = BatchNormKind::kTraining;
  if (op_name == "batch-norm-inference") pending.batch_norm = BatchNormKind::kInference;
  if (op_name == "batch-norm-grad") pending.batch_norm = BatchNormKind::kGrad;
  pending.stochastic_convert = op_name == "stochastic-convert";
  pending.rng_state = op_name == "rng-get-and-update-state";
  auto instr = std::make_unique<Instruction>(
      *op, declared.has_value() ? declared->shape : Shape::Tuple({}), instr_name);
  std::vector<std::optional<Declared>> operands_declared;
  if (*op == Opcode::kConstant && spelled.spelling == Spelling::kPlain) {
    absl::StatusOr<Literal> lit = ParseLiteral(*args, declared->shape, line);
    if (!lit.ok()) return lit.status();
    instr->mutable_attrs().literal = *std::move(lit);
  } else if (*op == Opcode::kParameter) {
    absl::StatusOr<int64_t> n = ParseInt(*args);
    if (!n.ok()) return ErrorAt(line, n.status().message());
    instr->mutable_attrs().parameter_number = *n;
  } else {
    RETURN_IF_ERROR(ParseOperands(comp, *args, name, line, pending, &operands_declared));
  }
  Parser& root = Root();
  if (op_name == "bitcast") {
    if (pending.operand_names.size() != 1) {
      return ErrorAt(line, absl::StrCat("bitcast takes one operand, got ",
                                        pending.operand_names.size()));
    }
    if (attributes) {
      PendingInstr ignored(instr.get(), {}, line);
      ignored.op_name = std::string(op_name);
      RETURN_IF_ERROR(ParseAttributes(ignored, line));
    }
    root.declared_[name] = *declared;
    return AddBitcast(comp, name, *declared, pending.operand_names[0], operands_declared[0], line);
  }
  if (spelled.spelling != Spelling::kPlain && spelled.spelling != Spelling::kAsyncStart) {
    if (attributes) {
      PendingInstr read(instr.get(), {}, line);
      read.op_name = std::string(op_name);
      read.dimension_size = spelled.spelling == Spelling::kDimensionSize;
      RETURN_IF_ERROR(ParseAttributes(read, line));
    }
    return AddSpelled(comp, name, op_name, spelled.spelling, declared, instr->attrs(),
                      pending.operand_names, operands_declared, line);
  }
  pending.instr = comp->AddInstruction(std::move(instr));
  if (declared.has_value()) {
    root.declared_[instr_name] = *declared;
  } else {
    root.unknown_shape_.insert(pending.instr);
  }
  const std::vector<std::string> operand_names = pending.operand_names;
  if (attributes) RETURN_IF_ERROR(ParseAttributes(pending, line));
  if (pending.map) {
    // Applied to every element: a call needs none of map's dimensions,
    // which must be all of them, in order.
    std::vector<int64_t>& dims = pending.instr->mutable_attrs().dimensions;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != static_cast<int64_t>(i) || dims.size() != declared->shape.dims().size()) {
        return ErrorAt(line, "map's dimensions must be every dimension of its result, in order");
      }
    }
    dims.clear();
  }
  root.pending_.push_back(std::move(pending));
  if (start_tuple.has_value()) {
    root.declared_[name] = *start_tuple;
    root.async_value_[name] = start_value_index;
    return AddStartTuple(comp, name, start_tuple->shape, instr_name, start_value_index,
                         operand_names, line);
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseOperands(Computation* comp, absl::string_view args,
                                   const std::string& user, int line, PendingInstr& pending,
                                   std::vector<std::optional<Declared>>* declared) {
  // Each operand: a name, optionally preceded by its shape, or an
  // instruction written inline ("exponential(f32[] parameter(0))").
  Parser sub(args, this);
  while (true) {
    sub.SkipWs();
    if (sub.AtEnd()) break;
    const size_t start = sub.pos_;
    std::optional<Declared> written;
    if (sub.LooksLikeShape()) {
      Layout layout;
      absl::StatusOr<Shape> s = sub.ParseShapeText(&layout);
      if (!s.ok()) return ErrorAt(line, s.status().message());
      written = Declared{*std::move(s), std::move(layout)};
    }
    absl::string_view operand = sub.ReadName();
    if (operand.empty()) {
      return ErrorAt(line, absl::StrCat("bad operand list '", args, "'"));
    }
    sub.SkipWs();
    if (sub.Peek() == '(') {
      // The nesting is the text's choice: bounded before recursing.
      Parser& root = Root();
      if (++root.inline_depth_ > kMaxCallDepth) {
        return ErrorAt(line, absl::StrCat("operands written inline more than ", kMaxCallDepth,
                                          " deep"));
      }
      absl::Cleanup leave = [&root] { --root.inline_depth_; };
      const std::string inline_name =
          absl::StrCat(user, ".operand", pending.operand_names.size());
      sub.pos_ = start;
      RETURN_IF_ERROR(sub.ParseExpression(comp, inline_name, line, /*attributes=*/false));
      pending.operand_names.push_back(inline_name);
      auto it = root.declared_.find(inline_name);
      written = it == root.declared_.end() ? std::nullopt : std::optional<Declared>(it->second);
    } else {
      pending.operand_names.emplace_back(operand);
    }
    declared->push_back(std::move(written));
    if (!sub.Consume(",")) {
      sub.SkipWs();
      if (!sub.AtEnd()) {
        return ErrorAt(line, absl::StrCat("bad operand list '", args, "'"));
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseAttributes(PendingInstr& pending, int line) {
  // ", key=value" repeated.
  while (true) {
    size_t save = pos_;
    if (!Consume(",")) break;
    SkipWs();
    size_t key_start = pos_;
    while (!AtEnd() && (IsNameChar(text_[pos_]))) ++pos_;
    absl::string_view key = text_.substr(key_start, pos_ - key_start);
    if (key.empty() || !Consume("=")) {
      pos_ = save;
      return ErrorAt(line, "expected attribute 'name=value'");
    }
    SkipWs();
    absl::string_view value;
    if (Peek() == '{') {
      size_t vstart = pos_;
      RETURN_IF_ERROR(ReadBalanced('{', '}').status());
      value = text_.substr(vstart, pos_ - vstart);
    } else if (Peek() == '"') {
      size_t vstart = pos_++;
      while (!AtEnd() && text_[pos_] != '"') {
        if (text_[pos_] == '\\') ++pos_;
        ++pos_;
      }
      if (AtEnd()) return ErrorAt(line, "unterminated string");
      ++pos_;
      value = text_.substr(vstart, pos_ - vstart);
    } else {
      // Up to a comma or a space outside brackets: an iota list of replica
      // groups ("[2,4]<=[4,2]T(1,0)") has commas inside its brackets.
      size_t vstart = pos_;
      int depth = 0;
      while (!AtEnd() && text_[pos_] != '\n' &&
             (depth > 0 || (text_[pos_] != ',' &&
                            !std::isspace(static_cast<unsigned char>(text_[pos_]))))) {
        if (text_[pos_] == '[' || text_[pos_] == '(') ++depth;
        if ((text_[pos_] == ']' || text_[pos_] == ')') && depth > 0) --depth;
        ++pos_;
      }
      if (key == "literal") {
        // A custom call's literal: "s32[2]{0} {1, 2}", a shape and values.
        size_t after_shape = pos_;
        while (after_shape < text_.size() && (text_[after_shape] == ' ' || text_[after_shape] == '\t')) {
          ++after_shape;
        }
        if (after_shape < text_.size() && text_[after_shape] == '{') {
          pos_ = after_shape;
          RETURN_IF_ERROR(ReadBalanced('{', '}').status());
        } else {
          pos_ = after_shape;
          while (!AtEnd() && text_[pos_] != ',' && text_[pos_] != '\n' &&
                 !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
            ++pos_;
          }
        }
      }
      value = text_.substr(vstart, pos_ - vstart);
    }
    absl::Status st = ParseAttribute(pending, key, value);
    if (!st.ok()) return ErrorAt(line, st.message());
  }
  return absl::OkStatus();
}

absl::Status Parser::AddBitcast(Computation* comp, const std::string& name,
                                const Declared& result, const std::string& operand,
                                const std::optional<Declared>& written, int line) {
  Parser& root = Root();
  std::optional<Declared> from = written;
  if (!from.has_value()) {
    auto it = root.declared_.find(operand);
    if (it != root.declared_.end()) from = it->second;
  }
  if (!from.has_value()) {
    return ErrorAt(line, absl::StrCat("bitcast %", name, ": the shape of its operand %", operand,
                                      " is not written before it"));
  }
  // XLA's optimized modules reinterpret an element type as another of the
  // same width with a bitcast (f32 as s32 in a sort's total order): the
  // values move as for any bitcast, then their bits are read as the new
  // type. Widths that differ would split or join elements.
  const bool retyped = from->shape.IsArray() && result.shape.IsArray() &&
                       from->shape.type() != result.shape.type();
  if (retyped && ElementTypeSize(from->shape.type()) != ElementTypeSize(result.shape.type())) {
    return ErrorAt(line, absl::StrCat("bitcast %", name, " from ", from->shape.ToString(), " to ",
                                      result.shape.ToString(),
                                      " changes the element width, which is not supported"));
  }
  const Shape moved = retyped ? Shape(from->shape.type(), result.shape.dims()) : result.shape;
  absl::StatusOr<BitcastSteps> steps =
      PlanBitcast(from->shape, from->layout, moved, result.layout);
  if (!steps.ok()) return ErrorAt(line, steps.status().message());
  // Each step names its operand; the last takes the bitcast's name.
  std::string input = operand;
  auto add = [&](Opcode op, Shape shape, std::vector<int64_t> dims, const std::string& step) {
    auto instr = std::make_unique<Instruction>(op, std::move(shape), step);
    instr->mutable_attrs().dimensions = std::move(dims);
    PendingInstr pending(comp->AddInstruction(std::move(instr)), {input}, line);
    root.pending_.push_back(std::move(pending));
    input = step;
  };
  const std::string moved_name = retyped ? name + ".moved" : name;
  const Shape& in = from->shape;
  if (!steps->to_physical.empty()) {
    std::vector<int64_t> dims;
    for (int64_t d : steps->to_physical) dims.push_back(in.dim(d));
    add(Opcode::kTranspose, Shape(in.type(), dims), steps->to_physical, name + ".physical");
  }
  if (steps->from_physical.empty()) {
    add(Opcode::kReshape, moved, {}, moved_name);
  } else {
    add(Opcode::kReshape, Shape(in.type(), steps->physical_dims), {}, name + ".reshaped");
    add(Opcode::kTranspose, moved, steps->from_physical, moved_name);
  }
  if (retyped) add(Opcode::kBitcastConvert, result.shape, {}, name);
  return absl::OkStatus();
}

absl::Status Parser::AddBarrier(Computation* comp, const std::string& name, const Shape& shape,
                                const std::string& operand, int line) {
  Parser& root = Root();
  auto add = [&](Opcode op, const Shape& s, std::vector<std::string> operands,
                 const std::string& step) {
    Instruction* added = comp->AddInstruction(std::make_unique<Instruction>(op, s, step));
    root.pending_.push_back(PendingInstr(added, std::move(operands), line));
    return added;
  };
  if (!shape.IsTuple()) {
    add(Opcode::kCopy, shape, {operand}, name);
    return absl::OkStatus();
  }
  std::vector<std::string> elements;
  for (size_t i = 0; i < shape.tuple_shapes().size(); ++i) {
    elements.push_back(absl::StrCat(name, ".", i));
    add(Opcode::kGetTupleElement, shape.tuple_shape(i), {operand}, elements.back())
        ->mutable_attrs()
        .tuple_index = static_cast<int64_t>(i);
  }
  add(Opcode::kTuple, shape, elements, name);
  return absl::OkStatus();
}

absl::Status Parser::AddSpelled(Computation* comp, const std::string& name,
                                absl::string_view op_name, Spelling spelling,
                                const std::optional<Declared>& declared, const Attributes& attrs,
                                const std::vector<std::string>& operands,
                                const std::vector<std::optional<Declared>>& operands_declared,
                                int line) {
  Parser& root = Root();
  const size_t want = op_name == "add-dependency" ? 2 : 1;
  if (operands.size() != want) {
    return ErrorAt(line, absl::StrCat(op_name, " takes ", want, want == 1 ? " operand" : " operands",
                                      ", got ", operands.size()));
  }
  // The shape the text gave the operand, inline or where it was defined.
  std::optional<Shape> operand_shape;
  if (!operands_declared.empty() && operands_declared[0].has_value()) {
    operand_shape = operands_declared[0]->shape;
  } else if (auto it = root.declared_.find(operands[0]); it != root.declared_.end()) {
    operand_shape = it->second.shape;
  }
  if (spelling == Spelling::kDimensionSize) {
    if (!operand_shape.has_value() || !operand_shape->IsArray()) {
      return ErrorAt(line, absl::StrCat("get-dimension-size %", name, ": the array shape of %",
                                        operands[0], " is not written before it"));
    }
    if (attrs.dimensions.size() != 1 || attrs.dimensions[0] < 0 ||
        attrs.dimensions[0] >= operand_shape->rank()) {
      return ErrorAt(line, absl::StrCat("get-dimension-size %", name,
                                        " needs one dimension of ", operand_shape->ToString()));
    }
    Instruction* size = comp->AddInstruction(
        std::make_unique<Instruction>(Opcode::kConstant, Shape::Scalar(ElementType::kS32), name));
    size->mutable_attrs().literal =
        Literal::Scalar<int64_t>(ElementType::kS32, operand_shape->dim(attrs.dimensions[0]));
    root.declared_[name] = Declared{size->shape(), {}};
    return absl::OkStatus();
  }
  if (spelling == Spelling::kAsyncDone) {
    if (auto it = root.async_value_.find(operands[0]); it != root.async_value_.end()) {
      const int64_t index = it->second;
      std::optional<Shape> shape;
      if (declared.has_value()) {
        shape = declared->shape;
      } else if (operand_shape.has_value()) {
        shape = operand_shape->tuple_shape(static_cast<int>(index));
      }
      Instruction* value = comp->AddInstruction(std::make_unique<Instruction>(
          Opcode::kGetTupleElement, shape.value_or(Shape::Tuple({})), name));
      value->mutable_attrs().tuple_index = index;
      PendingInstr pending(value, {operands[0]}, line);
      if (shape.has_value()) {
        root.declared_[name] = Declared{*shape, {}};
      } else {
        pending.infer_shape = true;
        root.unknown_shape_.insert(value);
      }
      root.pending_.push_back(std::move(pending));
      return absl::OkStatus();
    }
  }
  // The operand's value passed on: an async-update's, a done's whose start
  // computed the value itself (all-reduce-start), or an annotation's.
  if (spelling == Spelling::kAsyncUpdate) {
    if (auto it = root.async_value_.find(operands[0]); it != root.async_value_.end()) {
      root.async_value_[name] = it->second;
    }
  }
  const std::optional<Shape> shape = declared.has_value() ? declared->shape : operand_shape;
  if (!shape.has_value()) {
    return ErrorAt(line, absl::StrCat("%", name, ": the shape of ", op_name, "'s operand %",
                                      operands[0], " is not written before it; write one"));
  }
  root.declared_[name] = declared.value_or(Declared{*shape, {}});
  return AddBarrier(comp, name, *shape, operands[0], line);
}

absl::Status Parser::AddStartTuple(Computation* comp, const std::string& name, const Shape& shape,
                                   const std::string& value, int64_t value_index,
                                   const std::vector<std::string>& operands, int line) {
  Parser& root = Root();
  const size_t operand_index = value_index == 0 ? 1 : 0;
  std::vector<std::string> elements;
  for (size_t i = 0; i < shape.tuple_shapes().size(); ++i) {
    const Shape& element = shape.tuple_shape(static_cast<int>(i));
    if (i == static_cast<size_t>(value_index)) {
      elements.push_back(value);
    } else if (i == operand_index && element.IsTuple()) {
      elements.push_back(absl::StrCat(name, ".operands"));
      Instruction* added = comp->AddInstruction(
          std::make_unique<Instruction>(Opcode::kTuple, element, elements.back()));
      root.pending_.push_back(PendingInstr(added, operands, line));
    } else if (i == operand_index) {
      if (operands.size() != 1) {
        return ErrorAt(line, absl::StrCat("%", name, ": ", operands.size(),
                                          " operands do not fit ", element.ToString()));
      }
      elements.push_back(operands[0]);
    } else {
      // A context the hardware would use to track the operation; nothing
      // reads it.
      if (!element.IsArray()) {
        return ErrorAt(line, absl::StrCat("%", name, ": context element ", i, " is ",
                                          element.ToString(), ", not an array"));
      }
      elements.push_back(absl::StrCat(name, ".context", i));
      Instruction* added = comp->AddInstruction(
          std::make_unique<Instruction>(Opcode::kConstant, element, elements.back()));
      added->mutable_attrs().literal = Literal(element);
    }
  }
  Instruction* tuple =
      comp->AddInstruction(std::make_unique<Instruction>(Opcode::kTuple, shape, name));
  root.pending_.push_back(PendingInstr(tuple, std::move(elements), line));
  return absl::OkStatus();
}

void Parser::SkipStackFrameTables() {
  // FileNames, FunctionNames, FileLocations, StackFrames: each a keyword
  // line, then one line per entry, each starting with its id.
  while (ConsumeKeyword("FileNames") || ConsumeKeyword("FunctionNames") ||
         ConsumeKeyword("FileLocations") || ConsumeKeyword("StackFrames")) {
    while (true) {
      SkipWs();
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) break;
      while (!AtEnd() && text_[pos_] != '\n') ++pos_;
    }
  }
}

absl::Status Parser::ParseComputation(Module* module) {
  const bool is_entry = ConsumeKeyword("ENTRY");
  absl::string_view name = ReadName();
  if (name.empty()) {
    return Error(absl::StrCat("expected a computation, found '",
                              text_.substr(pos_, 16), "'"));
  }
  SkipWs();
  if (Peek() == '(') RETURN_IF_ERROR(ReadBalanced('(', ')').status());
  if (Consume("->")) RETURN_IF_ERROR(ParseShapeText().status());
  RETURN_IF_ERROR(Expect("{"));
  declared_.clear();  // names are the computation's own
  async_value_.clear();
  Computation* comp =
      module->AddComputation(std::make_unique<Computation>(std::string(name)));
  if (is_entry) {
    if (module->entry() != nullptr) return Error("two ENTRY computations");
    module->set_entry(comp);
  }
  Instruction* root = nullptr;
  while (!Consume("}")) {
    if (AtEnd()) return Error(absl::StrCat("computation ", name, " is not closed"));
    bool is_root = false;
    RETURN_IF_ERROR(ParseInstruction(comp, &is_root));
    if (is_root) {
      if (root != nullptr) {
        return Error(absl::StrCat("computation ", name, " has two ROOTs"));
      }
      root = comp->instructions().back().get();
    }
  }
  // Which thread runs the computation (newer dumps): scheduling only.
  while (Consume(",")) {
    SkipWs();
    if (!ConsumeKeyword("execution_thread") || !Consume("=")) {
      return Error(absl::StrCat("unsupported attribute after computation ", name, ": '",
                                text_.substr(pos_, 24), "'"));
    }
    SkipWs();
    if (Peek() != '"') return Error("execution_thread must be a quoted name");
    const size_t end = text_.find('"', pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    pos_ = end + 1;
  }
  if (comp->instructions().empty()) {
    return Error(absl::StrCat("computation ", name, " is empty"));
  }
  // Without ROOT the last instruction is the root.
  comp->set_root(root != nullptr ? root : comp->instructions().back().get());
  return absl::OkStatus();
}

absl::Status Parser::ResolveAll(Module* module) {
  absl::flat_hash_map<const Computation*,
                      absl::flat_hash_map<absl::string_view, Instruction*>>
      by_name;
  for (const auto& c : module->computations()) {
    auto& names = by_name[c.get()];
    for (const auto& instr : c->instructions()) {
      if (!names.emplace(instr->name(), instr.get()).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "duplicate instruction name %", instr->name(), " in ", c->name()));
      }
    }
  }
  for (PendingInstr& p : pending_) {
    p.instr->set_source_line(p.line);
    RETURN_IF_ERROR(Resolve(module, p, by_name[p.instr->parent()]));
  }
  // A map's computation is made elementwise once every computation is
  // whole.
  for (PendingInstr& p : pending_) {
    if (!p.map) continue;
    for (const auto& [key, cname] : p.called_names) {
      Computation* c = module->FindComputation(cname);
      if (c == nullptr) return ErrorAt(p.line, absl::StrCat("unknown computation %", cname));
      absl::StatusOr<Computation*> array = ElementwiseComputation(module, *c, p.instr->shape().dims());
      if (!array.ok()) return ErrorAt(p.line, array.status().message());
      p.instr->AddCalled(*array);
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::Resolve(Module* module, PendingInstr& p,
                             const absl::flat_hash_map<absl::string_view, Instruction*>& names) {
  Instruction* instr = p.instr;
  std::vector<Instruction*> operands;
  for (const std::string& operand : p.operand_names) {
    auto it = names.find(operand);
    if (it == names.end()) {
      return ErrorAt(p.line, absl::StrCat("unknown operand %", operand, " of %", instr->name()));
    }
    operands.push_back(it->second);
  }
  // The lowerings below (topk, batch normalization, total-order compares)
  // read their operands' shapes, so each must be known; their errors name
  // the instruction and its line.
  auto computation = [&] { return module->FindComputation(instr->parent()->name()); };
  auto shapes_known = [&](const std::vector<Instruction*>& ops) -> absl::Status {
    for (const Instruction* operand : ops) {
      if (unknown_shape_.contains(operand)) {
        return ErrorAt(p.line, absl::StrCat("%", instr->name(), ": the shape of %",
                                            operand->name(), " is not known yet; write one"));
      }
    }
    return absl::OkStatus();
  };
  auto lowered = [&](const absl::Status& status) -> absl::Status {
    if (status.ok()) return status;
    return ErrorAt(p.line, absl::StrCat("%", instr->name(), ": ", status.message()));
  };
  if (p.topk) {
    if (operands.size() != 1 || p.topk_k < 0) {
      return ErrorAt(p.line, absl::StrCat("topk %", instr->name(),
                                          " takes one operand and k=, got ", operands.size(),
                                          " operands"));
    }
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(lowered(
        LowerTopK(module, computation(), instr, operands[0], p.topk_k, p.topk_largest)));
    operands.clear();
  }
  if (instr->opcode() == Opcode::kCustomCall) {
    RETURN_IF_ERROR(lowered(LowerXlaMarkerCall(instr, operands)));
  }
  if (instr->opcode() == Opcode::kCustomCall && instr->attrs().custom_call_target == "TopK") {
    // XLA's TopK: the k greatest under its comparator, with their indices;
    // k is the result's last dimension.
    const Shape& declared = instr->shape();
    Computation* comparator = module->FindComputation(p.custom_called);
    if (operands.size() != 1 || comparator == nullptr || !declared.IsTuple() ||
        declared.tuple_shapes().size() != 2 || declared.tuple_shape(0).rank() < 1) {
      return ErrorAt(p.line, absl::StrCat(
          "custom-call %", instr->name(), " to TopK takes one operand and a comparator in "
          "called_computations, and returns (values, indices)"));
    }
    RETURN_IF_ERROR(shapes_known(operands));
    const Shape& values = declared.tuple_shape(0);
    instr->set_opcode(Opcode::kTuple);
    instr->mutable_attrs() = Attributes();
    RETURN_IF_ERROR(lowered(LowerTopK(module, computation(), instr, operands[0],
                                      values.dim(static_cast<int>(values.rank() - 1)),
                                      /*largest=*/true, comparator)));
    operands.clear();
  }
  if (instr->opcode() == Opcode::kCustomCall && IsGemmTarget(instr->attrs().custom_call_target)) {
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(lowered(LowerGemmCall(computation(), instr, operands, p.backend_config)));
    operands.clear();
  }
  if (instr->opcode() == Opcode::kCustomCall &&
      IsCudnnConvTarget(instr->attrs().custom_call_target)) {
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(lowered(LowerCudnnConvCall(computation(), instr, operands, p.backend_config)));
    operands.clear();
  }
  if (instr->opcode() == Opcode::kCustomCall && IsLapackTarget(instr->attrs().custom_call_target)) {
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(
        lowered(LowerLapackCall(module, computation(), instr, operands, p.backend_config)));
    operands.clear();
  }
  if (p.rng_state) {
    // XLA's global random state for its own expansion of rng: Kiln hands
    // each call fresh bits from the execution's random stream (an rng over
    // [0, 2^63)), so that no two calls see the same state.
    const Shape state(ElementType::kU64, {2});
    if (!operands.empty() || instr->shape() != state) {
      return ErrorAt(p.line, absl::StrCat("rng-get-and-update-state %", instr->name(),
                                          " takes no operands and gives u64[2]"));
    }
    for (uint64_t bound : {uint64_t{0}, (uint64_t{1} << 63) - 1}) {
      auto c = std::make_unique<Instruction>(Opcode::kConstant, Shape::Scalar(ElementType::kU64),
                                             absl::StrCat(instr->name(), bound == 0 ? ".low" : ".high"));
      c->mutable_attrs().literal = Literal::Scalar<uint64_t>(ElementType::kU64, bound);
      instr->AddOperand(computation()->AddInstruction(std::move(c)));
    }
    instr->mutable_attrs().distribution = RngDistribution::kUniform;
  }
  if (instr->opcode() == Opcode::kBitcastConvert && operands.size() == 1) {
    RETURN_IF_ERROR(shapes_known(operands));
    const Shape& from = operands[0]->shape();
    const Shape& to = instr->shape();
    if (from.IsArray() && to.IsArray() && ElementTypeSize(from.type()) != ElementTypeSize(to.type())) {
      RETURN_IF_ERROR(lowered(LowerWidthChangingBitcast(computation(), instr, operands[0])));
      operands.clear();
    }
  }
  if (p.stochastic_convert) {
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(lowered(LowerStochasticConvert(computation(), instr, operands)));
    operands.clear();
  }
  if (p.batch_norm.has_value()) {
    RETURN_IF_ERROR(shapes_known(operands));
    RETURN_IF_ERROR(lowered(LowerBatchNorm(module, computation(), instr, *p.batch_norm,
                                           operands, p.epsilon, p.feature_index)));
    operands.clear();
  }
  for (Instruction* operand : operands) instr->AddOperand(operand);
  // Called computations in the order the op expects.
  static const char* const kOrder[] = {
      "condition", "body", "select", "scatter", "true_computation",
      "false_computation", "to_apply", "calls", "branch_computations"};
  for (const char* key : kOrder) {
    for (const auto& [k, cname] : p.called_names) {
      if (k != key || p.map) continue;
      Computation* c = module->FindComputation(cname);
      if (c == nullptr) {
        return ErrorAt(p.line, absl::StrCat("unknown computation %", cname));
      }
      instr->AddCalled(c);
    }
  }
  if (!p.rhs_reversal.empty()) {
    // The kernel read reversed along those window dimensions is a reverse
    // of the kernel.
    const ConvDims& conv = instr->attrs().conv;
    if (instr->opcode() != Opcode::kConvolution || instr->operand_count() != 2) {
      return ErrorAt(p.line, "rhs_reversal applies to a convolution's kernel only");
    }
    Instruction* kernel = instr->operand(1);
    auto reverse = std::make_unique<Instruction>(Opcode::kReverse, kernel->shape(),
                                                 instr->name() + ".reversed_kernel");
    for (int64_t d : p.rhs_reversal) {
      if (d >= static_cast<int64_t>(conv.kernel_spatial.size())) {
        return ErrorAt(p.line, "rhs_reversal names more dimensions than dim_labels has");
      }
      reverse->mutable_attrs().dimensions.push_back(conv.kernel_spatial[d]);
    }
    reverse->AddOperand(kernel);
    instr->ReplaceOperand(1, computation()->AddInstruction(std::move(reverse)));
  }
  if (!p.operand_batching.empty() || !p.indices_batching.empty()) {
    RETURN_IF_ERROR(lowered(
        LowerBatchingDims(computation(), instr, p.operand_batching, p.indices_batching)));
  }
  if (p.total_order) {
    RETURN_IF_ERROR(shapes_known(instr->operands()));
    RETURN_IF_ERROR(lowered(LowerTotalOrderCompare(computation(), instr)));
  }
  if (p.infer_shape) {
    for (const Instruction* operand : instr->operands()) {
      if (unknown_shape_.contains(operand)) {
        return ErrorAt(p.line, absl::StrCat("cannot infer the shape of %", instr->name(),
                                            ": its operand %", operand->name(),
                                            " has no shape yet; write one"));
      }
    }
    for (const Computation* c : instr->called()) {
      if (c->root() == nullptr || unknown_shape_.contains(c->root())) {
        return ErrorAt(p.line, absl::StrCat("cannot infer the shape of %", instr->name(),
                                            ": the result of ", c->name(),
                                            " has no shape yet; write one"));
      }
    }
    absl::StatusOr<Shape> shape = InferShape(*instr);
    if (!shape.ok()) {
      return ErrorAt(p.line, absl::StrCat("%", instr->name(), ": ", shape.status().message()));
    }
    instr->set_shape(*std::move(shape));
    unknown_shape_.erase(instr);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> Parser::Parse() {
  std::string module_name = "module";
  if (ConsumeKeyword("HloModule")) {
    // The name is on the header line: printed back, a missing one would let
    // the next line's name take its place.
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    module_name = std::string(text_.substr(start, pos_ - start));
    if (module_name.empty()) return Error("expected a module name after 'HloModule'");
    // Header attributes (entry_computation_layout={...}, ...) end the line.
    while (!AtEnd() && text_[pos_] != '\n') {
      if (text_[pos_] == '{') {
        RETURN_IF_ERROR(ReadBalanced('{', '}').status());
      } else {
        ++pos_;
      }
    }
  }
  auto module = std::make_unique<Module>(module_name);
  SkipStackFrameTables();
  SkipWs();
  while (!AtEnd()) {
    RETURN_IF_ERROR(ParseComputation(module.get()));
    SkipWs();
  }
  if (module->computations().empty()) {
    return absl::InvalidArgumentError("line 1: no computations in module text");
  }
  if (module->entry() == nullptr) {
    module->set_entry(module->computations().back().get());
  }
  RETURN_IF_ERROR(ResolveAll(module.get()));
  for (const auto& c : module->computations()) {
    RETURN_IF_ERROR(c->Canonicalize());
  }
  return module;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> ParseModule(absl::string_view text) {
  return Parser(text).Parse();
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  return Parser(text).ParseShapeOnly();
}

}  // namespace kiln::ir
