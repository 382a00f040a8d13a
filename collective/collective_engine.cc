#include "collective/collective_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/knobs.h"

namespace revenant {
namespace collective {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
  }
  return 0;
}

VirtualRanks VirtualRanks::Identity(int n) {
  VirtualRanks v;
  for (int i = 0; i < n; ++i) {
    v.app_to_engine_.push_back(i);
    v.engine_to_app_.push_back(i);
  }
  return v;
}

absl::StatusOr<VirtualRanks> VirtualRanks::FromPermutation(std::vector<int> app_to_engine) {
  VirtualRanks v;
  const int n = static_cast<int>(app_to_engine.size());
  v.engine_to_app_.assign(n, -1);
  for (int app = 0; app < n; ++app) {
    const int e = app_to_engine[app];
    if (e < 0 || e >= n || v.engine_to_app_[e] != -1) {
      return absl::InvalidArgumentError("virtual ranks: not a permutation");
    }
    v.engine_to_app_[e] = app;
  }
  v.app_to_engine_ = std::move(app_to_engine);
  return v;
}

namespace {

template <typename T>
T Apply(RedOp op, T a, T b) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return static_cast<T>(a + b);
    case RedOp::kProd:
      return static_cast<T>(a * b);
    case RedOp::kMax:
      return std::max(a, b);
    case RedOp::kMin:
      return std::min(a, b);
  }
  return a;
}

template <typename T>
void Fold(const void* contribs, int n, size_t count, RedOp op, void* out) {
  const T* c = static_cast<const T*>(contribs);
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = c[i];
    for (int r = 1; r < n; ++r) acc = Apply<T>(op, acc, c[static_cast<size_t>(r) * count + i]);
    if (op == RedOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    o[i] = acc;
  }
}

// IEEE binary16 <-> float, round to nearest even.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;  // nan
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // overflow (incl. inf) after rounding
  if (abs < 0x33000001u) return sign;            // underflows to zero
  int exp = static_cast<int>(abs >> 23) - 127 + 15;
  uint32_t mant = (abs & 0x7fffff) | 0x800000;
  int shift = 13;
  if (exp <= 0) {  // subnormal half
    shift += 1 - exp;
    exp = 0;
  }
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1))) ++r;
  uint32_t out = exp == 0 ? r : ((static_cast<uint32_t>(exp) << 10) + (r - 0x400));
  return static_cast<uint16_t>(sign | out);  // a mantissa carry rolls into the exponent
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// 16-bit floats: every step computes in float and rounds back to 16 bits,
// as 16-bit arithmetic would.
void Fold16(const void* contribs, int n, size_t count, RedOp op, void* out,
            float (*to)(uint16_t), uint16_t (*from)(float)) {
  const uint16_t* c = static_cast<const uint16_t*>(contribs);
  uint16_t* o = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    uint16_t acc = c[i];
    for (int r = 1; r < n; ++r) {
      acc = from(Apply<float>(op, to(acc), to(c[static_cast<size_t>(r) * count + i])));
    }
    if (op == RedOp::kAvg) acc = from(to(acc) / static_cast<float>(n));
    o[i] = acc;
  }
}

}  // namespace

absl::Status FoldInOrder(const void* contribs, int n, size_t count, DataType t, RedOp op,
                         void* out) {
  if (n <= 0) return absl::InvalidArgumentError("fold of no contributions");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(RedOp::kAvg)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduction op ", static_cast<int>(op)));
  }
  switch (t) {
    case DataType::kInt8: Fold<int8_t>(contribs, n, count, op, out); break;
    case DataType::kUint8: Fold<uint8_t>(contribs, n, count, op, out); break;
    case DataType::kInt32: Fold<int32_t>(contribs, n, count, op, out); break;
    case DataType::kUint32: Fold<uint32_t>(contribs, n, count, op, out); break;
    case DataType::kInt64: Fold<int64_t>(contribs, n, count, op, out); break;
    case DataType::kUint64: Fold<uint64_t>(contribs, n, count, op, out); break;
    case DataType::kFloat32: Fold<float>(contribs, n, count, op, out); break;
    case DataType::kFloat64: Fold<double>(contribs, n, count, op, out); break;
    case DataType::kFloat16: Fold16(contribs, n, count, op, out, HalfToFloat, FloatToHalf); break;
    case DataType::kBfloat16:
      Fold16(contribs, n, count, op, out, Bf16ToFloat, FloatToBf16);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported data type ", static_cast<int>(t)));
  }
  return absl::OkStatus();
}

absl::Duration DefaultCollectiveTimeout() {
  return absl::Seconds(
      knobs::Double(knobs::Id::kCollectiveTimeoutS, 1e-3, 1e7).value_or(60));
}

namespace {
Operation Make(Operation::Kind kind, const void* send, void* recv, size_t count, DataType t,
               RedOp op, int root) {
  Operation o;
  o.kind = kind;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = t;
  o.op = op;
  o.root = root;
  return o;
}
}  // namespace

using K = Operation::Kind;

absl::Status CollectiveEngine::AllReduce(const void* send, void* recv, size_t count, DataType t,
                                         RedOp op) {
  Operation o = Make(K::kAllReduce, send, recv, count, t, op, 0);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Broadcast(const void* send, void* recv, size_t count, DataType t,
                                         int root) {
  Operation o = Make(K::kBroadcast, send, recv, count, t, RedOp::kSum, root);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Reduce(const void* send, void* recv, size_t count, DataType t,
                                      RedOp op, int root) {
  Operation o = Make(K::kReduce, send, recv, count, t, op, root);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::AllGather(const void* send, void* recv, size_t count, DataType t) {
  Operation o = Make(K::kAllGather, send, recv, count, t, RedOp::kSum, 0);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::ReduceScatter(const void* send, void* recv, size_t count,
                                             DataType t, RedOp op) {
  Operation o = Make(K::kReduceScatter, send, recv, count, t, op, 0);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::AllToAll(const void* send, void* recv, size_t count, DataType t) {
  Operation o = Make(K::kAllToAll, send, recv, count, t, RedOp::kSum, 0);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Gather(const void* send, void* recv, size_t count, DataType t,
                                      int root) {
  Operation o = Make(K::kGather, send, recv, count, t, RedOp::kSum, root);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Scatter(const void* send, void* recv, size_t count, DataType t,
                                       int root) {
  Operation o = Make(K::kScatter, send, recv, count, t, RedOp::kSum, root);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Send(const void* send, size_t count, DataType t, int peer) {
  Operation o = Make(K::kSend, send, nullptr, count, t, RedOp::kSum, peer);
  return Run({&o, 1});
}
absl::Status CollectiveEngine::Recv(void* recv, size_t count, DataType t, int peer) {
  Operation o = Make(K::kRecv, nullptr, recv, count, t, RedOp::kSum, peer);
  return Run({&o, 1});
}

}  // namespace collective
}  // namespace revenant
