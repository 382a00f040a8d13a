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

}  // namespace
}  // namespace wire
}  // namespace revenant
