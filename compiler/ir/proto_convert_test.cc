#include "compiler/ir/proto_convert.h"

#include <unistd.h>

#include <fstream>
#include <limits>

#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir {
namespace {

TEST(ProtoConvertTest, ModuleRoundTripKeepsTextAndFingerprint) {
  auto m = ParseModule(R"(
HloModule rt
max { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
ENTRY e {
  x = f32[1,4,4,1] parameter(0)
  init = f32[] constant(-inf)
  rw = f32[1,2,2,1] reduce-window(x, init), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  k = f32[2,2,1,3] constant({{{{1,2,3}}, {{4,5,6}}}, {{{7,8,9}}, {{1,1,1}}}})
  cv = f32[1,3,3,3] convolution(x, k), window={size=2x2}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[1,2,2,1], f32[1,3,3,3]) tuple(rw, cv)
}
)");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(Verify(**m).ok());
  v1::ModuleProto proto = ModuleToProto(**m);
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  v1::ModuleProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto back = ModuleFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(Verify(**back).ok()) << Verify(**back);
  EXPECT_EQ(PrintModule(**back), PrintModule(**m));
  EXPECT_EQ(Fingerprint(**back), Fingerprint(**m));
}

TEST(ProtoConvertTest, MalformedProtoIsAnError) {
  v1::ModuleProto proto;
  auto* c = proto.add_computations();
  c->set_id(0);
  c->set_name("e");
  auto* i = c->add_instructions();
  i->set_id(0);
  i->set_name("a");
  i->set_opcode("negate");
  i->mutable_shape()->set_element_type(v1::F32);
  i->add_operand_ids(7);
  c->set_root_id(0);
  auto m = ModuleFromProto(proto);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("operand id 7"), std::string::npos);

  i->clear_operand_ids();
  i->set_opcode("frobnicate");
  m = ModuleFromProto(proto);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown opcode"), std::string::npos);
}

TEST(ProtoConvertTest, LiteralSizeChecked) {
  v1::LiteralProto lit;
  lit.mutable_shape()->set_element_type(v1::F32);
  lit.mutable_shape()->add_dims(4);
  lit.set_data(std::string(8, '\0'));
  auto l = LiteralFromProto(lit);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("needs 16 bytes, got 8"), std::string::npos);
}

// An array of no elements has no bytes to copy: decoding it copies
// nothing (module_proto_fuzzer found a copy from a null pointer, which the
// sanitizer build of this test reports).
TEST(ProtoConvertTest, AnArrayOfNoElementsDecodes) {
  v1::LiteralProto lit;
  lit.mutable_shape()->set_element_type(v1::F32);
  lit.mutable_shape()->add_dims(0);
  lit.mutable_shape()->add_dims(3);
  auto l = LiteralFromProto(lit);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->shape().ToString(), "f32[0,3]");
  EXPECT_TRUE(l->bytes().empty());
}

// Pred values from the wire may hold any byte (module_proto_fuzzer found
// one read as a bool): they decode as 0 or 1, nonzero being true, in a
// literal and in a value assembled from a stream.
TEST(ProtoConvertTest, PredBytesDecodeAsZeroOrOne) {
  v1::LiteralProto lit;
  lit.mutable_shape()->set_element_type(v1::PRED);
  lit.mutable_shape()->add_dims(3);
  lit.set_data(std::string("\x00\x6b\x01", 3));
  auto l = LiteralFromProto(lit);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->bytes(), (std::vector<uint8_t>{0, 1, 1}));
  ChunkedValue value;
  ASSERT_TRUE(value.Start(lit.shape(), 3, 1 << 20).ok());
  ASSERT_TRUE(value.Append(std::string("\x02\x00\xff", 3)).ok());
  EXPECT_EQ(value.Take().bytes(), (std::vector<uint8_t>{1, 0, 1}));
}

// A tuple of arrays travels as its elements' bytes one after another and
// comes back as the same tuple (pred elements normalized); anything deeper
// than one level of tuple, and tokens, are not feed values.
TEST(ChunkedValueTest, TuplesOfArraysTravelAsTheirElements) {
  std::vector<Literal> parts;
  parts.push_back(Literal::FromVector<float>(ElementType::kF32, {2, 2}, {1, 2, 3, 4}));
  parts.push_back(Literal::FromVector<int32_t>(ElementType::kS32, {3}, {7, -8, 9}));
  Literal pred(Shape(ElementType::kPred, {2}));
  pred.SetFromDouble(1, 1);
  parts.push_back(pred);
  const Literal tuple = Literal::Tuple(std::move(parts));
  std::vector<uint8_t> storage;
  const std::vector<uint8_t>& bytes = FeedValueBytes(tuple, &storage);
  ASSERT_EQ(bytes.size(), 16u + 12u + 2u);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 16),
            tuple.tuple_elements()[0].bytes());
  v1::ShapeProto shape;
  ShapeToProto(tuple.shape(), &shape);
  ChunkedValue value;
  ASSERT_TRUE(value.Start(shape, 30, 1 << 20).ok());
  std::string wire(bytes.begin(), bytes.end());
  wire[29] = 0x7f;  // a pred byte other than 0 and 1 reads as true
  ASSERT_TRUE(value.Append(wire.substr(0, 13)).ok());
  ASSERT_TRUE(value.Append(wire.substr(13)).ok());
  ASSERT_TRUE(value.complete());
  const Literal back = value.Take();
  EXPECT_EQ(back, tuple);
  EXPECT_FALSE(value.started());

  // An array's bytes are its own, with no copy.
  EXPECT_EQ(&FeedValueBytes(tuple.tuple_elements()[1], &storage),
            &tuple.tuple_elements()[1].bytes());

  EXPECT_EQ(value.Start(shape, 31, 1 << 20).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(value.Start(shape, 30, 29).code(), absl::StatusCode::kResourceExhausted);
  v1::ShapeProto nested;
  ShapeToProto(Shape::Tuple({Shape::Tuple({Shape(ElementType::kF32, {1})})}), &nested);
  absl::Status st = value.Start(nested, 4, 1 << 20);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tuples of arrays"), std::string::npos) << st;
  v1::ShapeProto token;
  ShapeToProto(Shape::Tuple({Shape(ElementType::kF32, {1}), Shape::Token()}), &token);
  EXPECT_EQ(value.Start(token, 4, 1 << 20).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckFeedValue(Shape::Tuple({}), 0).ok());
}

// However the bytes are cut into chunks (one byte at a time, across element
// boundaries, around an empty element), the elements come back whole.
TEST(ChunkedValueTest, AnyChunkingGivesTheSameTuple) {
  std::vector<Literal> parts;
  parts.push_back(Literal::FromVector<int32_t>(ElementType::kS32, {3}, {1, -2, 3}));
  parts.push_back(Literal(Shape(ElementType::kF32, {0})));
  parts.push_back(Literal::FromVector<float>(ElementType::kF32, {2}, {0.5f, -4}));
  parts.push_back(Literal::FromVector<int8_t>(ElementType::kS8, {1}, {-7}));
  const Literal tuple = Literal::Tuple(std::move(parts));
  std::vector<uint8_t> storage;
  const std::vector<uint8_t>& bytes = FeedValueBytes(tuple, &storage);
  ASSERT_EQ(bytes.size(), 21u);
  const std::string wire(bytes.begin(), bytes.end());
  v1::ShapeProto shape;
  ShapeToProto(tuple.shape(), &shape);
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{5}, size_t{12}, size_t{20}, size_t{21}}) {
    ChunkedValue value;
    ASSERT_TRUE(value.Start(shape, 21, 1 << 20).ok());
    for (size_t at = 0; at < wire.size(); at += chunk) {
      ASSERT_TRUE(value.Append(absl::string_view(wire).substr(at, chunk)).ok()) << chunk;
    }
    ASSERT_TRUE(value.complete()) << chunk;
    EXPECT_EQ(value.Take(), tuple) << chunk;
  }
}

// A tuple whose elements' sizes would add up past int64 is refused when it
// is announced, whatever byte count it declares.
TEST(ChunkedValueTest, TuplesTooLargeToCountAreRefused) {
  const Shape huge(ElementType::kF64, {kMaxElements});
  v1::ShapeProto shape;
  ShapeToProto(Shape::Tuple({Shape(ElementType::kU8, {4}), huge, huge, huge}), &shape);
  ChunkedValue value;
  for (int64_t declared : {int64_t{4}, int64_t{0}, std::numeric_limits<int64_t>::max()}) {
    const absl::Status st = value.Start(shape, declared, std::numeric_limits<int64_t>::max());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_FALSE(value.started());
  }
}

// Resident memory of this process, in bytes.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A value is rebuilt from its pieces as they arrive: announcing 1 GiB
// allocates nothing until the bytes come, and the pieces reassemble
// exactly.
TEST(ChunkedValueTest, MemoryGrowsWithTheDataNotTheHeader) {
  v1::ShapeProto big;
  ShapeToProto(Shape(ElementType::kF32, {int64_t{1} << 28}), &big);
  const int64_t before = ResidentBytes();
  ChunkedValue value;
  ASSERT_TRUE(value.Start(big, int64_t{1} << 30, int64_t{2} << 30).ok());
  EXPECT_LT(ResidentBytes() - before, int64_t{64} << 20);
  EXPECT_TRUE(value.started());
  EXPECT_FALSE(value.complete());

  ChunkedValue small;
  v1::ShapeProto three;
  ShapeToProto(Shape(ElementType::kF32, {3}), &three);
  ASSERT_TRUE(small.Start(three, 12, 1024).ok());
  const Literal want = Literal::FromVector<float>(ElementType::kF32, {3}, {1, 2, 3});
  const std::string bytes(want.bytes().begin(), want.bytes().end());
  ASSERT_TRUE(small.Append(bytes.substr(0, 5)).ok());
  ASSERT_TRUE(small.Append(bytes.substr(5)).ok());
  EXPECT_EQ(small.Append("x").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(small.complete());
  EXPECT_EQ(small.Take(), want);
  EXPECT_FALSE(small.started());
}

}  // namespace
}  // namespace kiln::ir
