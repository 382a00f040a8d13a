#include "api/wire.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace revenant {
namespace wire {
namespace {

struct Odd {
  char c;
  double d;
  int i;
};

TEST(WireTest, RoundTripsScalarsFlagsAndBytes) {
  const std::string payload = "hello, agent";
  Odd odd{'x', 2.5, -7};
  Sizer sizer;
  sizer.Put(uint16_t{1});
  sizer.PutFlag();
  sizer.PutBytes(payload.data(), payload.size());
  sizer.Put(odd);
  sizer.PutBytes(nullptr, 0);
  sizer.ReserveBytes(24);
  std::vector<char> buf(sizer.size());
  Encoder enc(buf.data(), buf.size());
  enc.Put(uint16_t{1});
  enc.PutFlag(true);
  enc.PutBytes(payload.data(), payload.size());
  enc.Put(odd);
  enc.PutBytes(nullptr, 0);
  char* reserved = enc.ReserveBytes(24);
  ASSERT_NE(reserved, nullptr);
  EXPECT_EQ((reserved - buf.data()) % 8, 0);
  EXPECT_FALSE(enc.overflow());
  EXPECT_EQ(enc.size(), sizer.size()) << "Sizer must mirror Encoder exactly";

  Decoder dec(buf.data(), enc.size());
  uint16_t u = 0;
  bool flag = false;
  const char* data = nullptr;
  uint64_t n = 0;
  Odd back{};
  ASSERT_TRUE(dec.Get(&u));
  EXPECT_EQ(u, 1);
  ASSERT_TRUE(dec.GetFlag(&flag));
  EXPECT_TRUE(flag);
  ASSERT_TRUE(dec.GetBytes(&data, &n));
  EXPECT_EQ(std::string(data, n), payload);
  ASSERT_TRUE(dec.Get(&back));
  EXPECT_EQ(back.c, 'x');
  EXPECT_EQ(back.d, 2.5);
  EXPECT_EQ(back.i, -7);
  ASSERT_TRUE(dec.GetBytes(&data, &n));
  EXPECT_EQ(data, nullptr);
  ASSERT_TRUE(dec.GetBytes(&data, &n));
  EXPECT_EQ(n, 24u);
  EXPECT_EQ(dec.remaining(), 0u);
}

TEST(WireTest, EncoderStopsAtCapacity) {
  char buf[8];
  Encoder enc(buf, sizeof(buf));
  enc.Put(uint64_t{1});
  EXPECT_FALSE(enc.overflow());
  enc.Put(uint8_t{1});
  EXPECT_TRUE(enc.overflow());
  EXPECT_EQ(enc.size(), 8u);
}

TEST(WireTest, DecoderRejectsTruncatedAndHostileInput) {
  // A byte field claiming more bytes than the input holds.
  std::vector<char> buf(16, 0);
  uint64_t huge = 1ull << 40;
  std::memcpy(buf.data(), &huge, sizeof(huge));
  Decoder dec(buf.data(), buf.size());
  const char* data = nullptr;
  uint64_t n = 0;
  EXPECT_FALSE(dec.GetBytes(&data, &n));
  EXPECT_TRUE(dec.failed());

  // Every prefix of a valid encoding fails cleanly somewhere, never reads past it.
  const std::string payload(100, 'p');
  Sizer sizer;
  sizer.Put(uint32_t{5});
  sizer.PutBytes(payload.data(), payload.size());
  std::vector<char> full(sizer.size());
  Encoder enc(full.data(), full.size());
  enc.Put(uint32_t{5});
  enc.PutBytes(payload.data(), payload.size());
  for (size_t cut = 0; cut < enc.size() - 8; ++cut) {
    std::vector<char> prefix(full.begin(), full.begin() + cut);
    Decoder d(prefix.data(), prefix.size());
    uint32_t v = 0;
    bool ok = d.Get(&v) && d.GetBytes(&data, &n);
    EXPECT_FALSE(ok) << "prefix of " << cut << " bytes decoded";
  }
  // A flag byte other than 0/1 is malformed.
  char bad = 7;
  Decoder flags(&bad, 1);
  bool present = false;
  EXPECT_FALSE(flags.GetFlag(&present));
}

// Enums are decoded through their underlying integer and accepted only when
// the integer is a value of the enum (api/wire_enums.h): dense, sparse and
// flag-like enums, with and without negative values.
TEST(WireTest, EnumsOutsideTheirValuesAreRefusedAtDecode) {
  auto decode = [](auto sent, auto* got) {
    std::vector<char> buf(16);
    Encoder enc(buf.data(), buf.size());
    enc.Put(sent);
    Decoder dec(buf.data(), enc.size());
    const bool ok = dec.Get(got);
    EXPECT_EQ(ok, !dec.failed());
    return ok;
  };
  cudaMemcpyKind kind = cudaMemcpyHostToHost;
  EXPECT_TRUE(decode(int32_t{cudaMemcpyDefault}, &kind));
  EXPECT_EQ(kind, cudaMemcpyDefault);
  EXPECT_FALSE(decode(int32_t{5}, &kind));
  EXPECT_FALSE(decode(int32_t{-1}, &kind));
  EXPECT_EQ(kind, cudaMemcpyDefault);  // untouched by a refused value
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  EXPECT_TRUE(decode(int32_t{CUBLAS_COMPUTE_64F_PEDANTIC}, &compute));
  EXPECT_FALSE(decode(int32_t{66}, &compute));  // a gap between enumerators
  EXPECT_FALSE(decode(int32_t{CUDA_R_32F}, &compute));
  cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT;
  EXPECT_TRUE(decode(int32_t{-1}, &algo));
  EXPECT_TRUE(decode(int32_t{CUBLAS_GEMM_ALGO15_TENSOR_OP}, &algo));
  EXPECT_FALSE(decode(int32_t{24}, &algo));
  EXPECT_FALSE(decode(int32_t{-2}, &algo));
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  EXPECT_TRUE(decode(int32_t{CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION},
                     &math));
  EXPECT_FALSE(decode(int32_t{9}, &math));
  ncclRedOp_t op = ncclSum;
  EXPECT_TRUE(decode(int32_t{ncclNumOps + 3}, &op));  // a user-made operation
  EXPECT_FALSE(decode(int32_t{-1}, &op));
  cudaGraphNodeType node = cudaGraphNodeTypeKernel;
  EXPECT_TRUE(decode(int32_t{cudaGraphNodeTypeConditional}, &node));
  EXPECT_FALSE(decode(int32_t{0x0c}, &node));
  cudnnBackendAttributeName_t name = CUDNN_ATTR_POINTWISE_MODE;
  EXPECT_TRUE(decode(int32_t{CUDNN_ATTR_TENSOR_UNIQUE_ID}, &name));
  EXPECT_FALSE(decode(int32_t{-1}, &name));
  // A truncated enum fails like any scalar.
  Decoder short_input("\x01", 1);
  EXPECT_FALSE(short_input.Get(&kind));
}

TEST(WireTest, ToEnumRefusesIntegersTheEnumCannotHold) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  EXPECT_TRUE(ToEnum(int32_t{cudaStreamCaptureModeRelaxed}, &mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  EXPECT_FALSE(ToEnum(int32_t{3}, &mode));
  EXPECT_FALSE(ToEnum(int32_t{-1}, &mode));
  EXPECT_FALSE(ToEnum(int64_t{1} << 32, &mode));  // wraps to 0 in 32 bits
  EXPECT_FALSE(ToEnum(uint64_t{1} << 63, &mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  cudaLaunchAttributeID id = cudaLaunchAttributeIgnore;
  EXPECT_TRUE(ToEnum(16, &id));
  EXPECT_FALSE(ToEnum(15, &id));
}

}  // namespace
}  // namespace wire
}  // namespace revenant
