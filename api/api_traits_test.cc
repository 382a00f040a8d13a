// Checks the generated traits against the table they come from.
#include <fstream>
#include <sstream>
#include <string>

#include "api/api_table.pb.h"
#include "api/traits.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace revenant {
namespace api {
namespace {

api_table::ApiTable LoadAll() {
  api_table::ApiTable all;
  for (const char* path :
       {"api/cuda_runtime.textproto", "api/cuda_nvcc.textproto", "api/nccl.textproto",
        "api/cublas.textproto", "api/driver.textproto", "api/cublaslt.textproto",
        "api/cudnn.textproto"}) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream buf;
    buf << in.rdbuf();
    api_table::ApiTable t;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(buf.str(), &t)) << path;
    all.MergeFrom(t);
  }
  return all;
}

TEST(ApiTraitsTest, EveryRowHasTraitsMatchingTheTable) {
  api_table::ApiTable table = LoadAll();
  ASSERT_EQ(table.functions_size() + 1, kApiCount);
  for (int i = 0; i < table.functions_size(); ++i) {
    const api_table::Function& f = table.functions(i);
    const ApiTraits& t = Traits(static_cast<uint32_t>(i + 1));
    EXPECT_EQ(f.name(), t.name);
    EXPECT_EQ(static_cast<int>(f.mode()), static_cast<int>(t.mode)) << f.name();
    EXPECT_EQ(static_cast<int>(f.journal()), static_cast<int>(t.journal)) << f.name();
    EXPECT_EQ(static_cast<int>(f.creates()), static_cast<int>(t.creates)) << f.name();
    EXPECT_EQ(static_cast<int>(f.support()), static_cast<int>(t.support)) << f.name();
    EXPECT_EQ(static_cast<int>(f.library()), static_cast<int>(t.library)) << f.name();
    EXPECT_EQ(f.sets_attribute(), t.sets_attribute) << f.name();
    EXPECT_EQ(f.attribute_in_second(), t.attribute_in_second) << f.name();
    EXPECT_EQ(FindApi(f.name().c_str()), static_cast<ApiId>(i + 1));
  }
  EXPECT_EQ(FindApi("cudaNoSuchThing"), ApiId::kInvalid);
  EXPECT_STREQ(Traits(static_cast<uint32_t>(kApiCount + 5)).name, "<invalid>");
}

TEST(ApiTraitsTest, EnumsMirrorTheSchema) {
  EXPECT_EQ(static_cast<int>(HandleKind::kKernel), api_table::KERNEL);
  EXPECT_EQ(static_cast<int>(HandleKind::kComm), api_table::COMM);
  EXPECT_EQ(kHandleKindCount, api_table::HandleKind_ARRAYSIZE);
  EXPECT_EQ(static_cast<int>(Library::kNccl), api_table::NCCL);
  EXPECT_EQ(static_cast<int>(Library::kCublas), api_table::CUBLAS);
  EXPECT_EQ(static_cast<int>(Library::kDriver) + 1, api_table::Library_ARRAYSIZE);
  EXPECT_EQ(static_cast<int>(HandleKind::kBlasHandle), api_table::BLAS_HANDLE);
  EXPECT_EQ(static_cast<int>(HandleKind::kLtHandle), api_table::LT_HANDLE);
  EXPECT_EQ(static_cast<int>(HandleKind::kLtMatmulPreference), api_table::LT_MATMUL_PREFERENCE);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnHandle), api_table::DNN_HANDLE);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnDescriptor), api_table::DNN_DESCRIPTOR);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnActivation), api_table::DNN_ACTIVATION);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnPooling), api_table::DNN_POOLING);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnDropout), api_table::DNN_DROPOUT);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnRnn), api_table::DNN_RNN);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnRnnData), api_table::DNN_RNN_DATA);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnCtcLoss), api_table::DNN_CTC_LOSS);
  EXPECT_EQ(static_cast<int>(HandleKind::kDnnSpatialTransformer), api_table::DNN_SPATIAL_TRANSFORMER);
  EXPECT_EQ(static_cast<int>(Mode::kLocal), api_table::LOCAL);
  EXPECT_EQ(static_cast<int>(JournalClass::kReplay), api_table::REPLAY);
  EXPECT_EQ(static_cast<int>(Support::kRefused), api_table::REFUSED);
}

TEST(ApiTraitsTest, ForwardedRowsAreDispatched) {
  for (int i = 1; i < kApiCount; ++i) {
    const ApiTraits& t = Traits(static_cast<uint32_t>(i));
    const bool forwarded = t.mode != Mode::kLocal && t.support != Support::kRefused;
    EXPECT_EQ(t.dispatched, forwarded) << t.name;
  }
}

}  // namespace
}  // namespace api
}  // namespace revenant
