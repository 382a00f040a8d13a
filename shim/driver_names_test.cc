// The driver's entry-point table (generated from the toolkit's libcuda
// exports and cudaTypedefs.h) and the lookup rule of shim/driver_names.h.
#include "shim/driver_names.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace revenant {
namespace shim {
namespace {

std::string Find(const char* base, int version, DriverLookup* how) {
  const DriverSymbol* s = FindDriverSymbol(kDriverSymbols, kDriverSymbolCount, base, version, how);
  return s == nullptr ? "" : s->name;
}

TEST(DriverNamesTest, NewestVariantIntroducedByTheVersion) {
  DriverLookup how;
  EXPECT_EQ(Find("cuMemAlloc", 13000, &how), "cuMemAlloc_v2");
  EXPECT_EQ(how, DriverLookup::kFound);
  EXPECT_EQ(Find("cuMemAlloc", 3020, &how), "cuMemAlloc_v2");
  EXPECT_EQ(Find("cuMemAlloc", 3010, &how), "cuMemAlloc");
  EXPECT_EQ(Find("cuStreamGetCaptureInfo", 11030, &how), "cuStreamGetCaptureInfo_v2");
  EXPECT_EQ(Find("cuStreamGetCaptureInfo", 12030, &how), "cuStreamGetCaptureInfo_v3");
  EXPECT_EQ(Find("cuStreamGetCaptureInfo", 11020, &how), "cuStreamGetCaptureInfo");
  // What c10's DriverAPI asks for (version 12000) and CUDA 13's new forms.
  EXPECT_EQ(Find("cuStreamWriteValue32", 12000, &how), "cuStreamWriteValue32_v2");
  EXPECT_EQ(Find("cuMemsetD32Async", 12000, &how), "cuMemsetD32Async");
  EXPECT_EQ(Find("cuCtxGetDevice", 12080, &how), "cuCtxGetDevice");
  EXPECT_EQ(Find("cuCtxGetDevice", 13000, &how), "cuCtxGetDevice_v2");
  EXPECT_EQ(Find("cuGetProcAddress", 12000, &how), "cuGetProcAddress_v2");
  EXPECT_EQ(Find("cuGetProcAddress", 11030, &how), "cuGetProcAddress");
}

TEST(DriverNamesTest, TooOldVersionsAndUnknownNames) {
  DriverLookup how;
  EXPECT_EQ(Find("cuMemAllocAsync", 11010, &how), "");
  EXPECT_EQ(how, DriverLookup::kVersionNotSufficient);
  EXPECT_EQ(Find("cuMemAllocAsync", 11020, &how), "cuMemAllocAsync");
  EXPECT_EQ(Find("cuNoSuchFunction", 13000, &how), "");
  EXPECT_EQ(how, DriverLookup::kNotFound);
  // Base names only, as the driver's lookup.
  EXPECT_EQ(Find("cuMemAlloc_v2", 13000, &how), "");
  EXPECT_EQ(how, DriverLookup::kNotFound);
  EXPECT_EQ(Find("", 13000, &how), "");
  EXPECT_EQ(how, DriverLookup::kNotFound);
}

TEST(DriverNamesTest, TableIsSortedAndHandsOutNoPerThreadVariants) {
  ASSERT_GT(kDriverSymbolCount, 400u);
  for (size_t i = 0; i < kDriverSymbolCount; ++i) {
    const std::string name = kDriverSymbols[i].name;
    EXPECT_EQ(name.find("_ptsz"), std::string::npos) << name;
    EXPECT_EQ(name.find("_ptds"), std::string::npos) << name;
    EXPECT_EQ(name.rfind(kDriverSymbols[i].base, 0), 0u) << name;
    if (i == 0) continue;
    const int c = std::strcmp(kDriverSymbols[i - 1].base, kDriverSymbols[i].base);
    EXPECT_TRUE(c < 0 || (c == 0 && kDriverSymbols[i - 1].version < kDriverSymbols[i].version))
        << kDriverSymbols[i - 1].name << " before " << name;
  }
}

}  // namespace
}  // namespace shim
}  // namespace revenant
