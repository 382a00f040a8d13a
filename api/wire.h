// The wire encoding of a forwarded call's arguments and reply.
//
// Generated shim stubs encode arguments with Encoder into a request body;
// the agent's generated dispatcher decodes them with Decoder, in the same
// order, and encodes OUT values into the reply the same way. The format is
// private to one build of Revenant (shim and agent always come from the same
// build; the channel header carries a layout version) and is:
//
//   scalar   : its bytes (memcpy of sizeof(T)), unaligned
//   flag     : one byte, 0 or 1 (presence of an OUT pointer)
//   bytes    : uint64 length (kNullBytes for a null pointer), then padding to
//              an 8-byte boundary of the body, then the bytes
//
// Example (what a generated stub does):
//   wire::Sizer sizer;  sizer.Put(size); sizer.PutFlag();
//   ... reserve sizer.size() bytes ...
//   wire::Encoder enc(body, sizer.size());  enc.Put(size); enc.PutFlag(p != nullptr);
#ifndef REVENANT_API_WIRE_H_
#define REVENANT_API_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace revenant {
namespace wire {

// Which integers are values of an enum E: specialized per enum type in
// api/wire_enums.h (included at the end of this header).
template <typename E>
struct WireEnum;

inline constexpr uint64_t kNullBytes = ~uint64_t{0};

inline size_t AlignUp8(size_t n) { return (n + 7) & ~size_t{7}; }

// A byte field of a hook row's struct (api/hook_structs.h): `size` bytes at
// `data` (null: a null pointer on the wire, decoded as null). With `reserve`,
// Encode reserves `size` bytes instead of copying and sets `fill` to where
// they go (null on overflow), for a reply the agent fills in place.
struct Bytes {
  const char* data = nullptr;
  uint64_t size = 0;
  bool reserve = false;
  mutable char* fill = nullptr;

  static Bytes Of(const void* p, uint64_t n) {
    Bytes b;
    b.data = static_cast<const char*>(p);
    b.size = n;
    return b;
  }
  static Bytes Reserved(uint64_t n) {
    Bytes b;
    b.size = n;
    b.reserve = true;
    return b;
  }
  // Copies the field's bytes to `dst`, at most `capacity` of them (a reply's
  // OUT value into the application's variable); none for a null field.
  // Returns how many it copied.
  size_t CopyTo(void* dst, size_t capacity) const {
    if (data == nullptr) return 0;
    const size_t n = size < capacity ? size : capacity;
    std::memcpy(dst, data, n);
    return n;
  }
};

// Counts the bytes an encoding will take; mirrors Encoder call for call.
class Sizer {
 public:
  template <typename T>
  void Put(const T&) {
    static_assert(std::is_trivially_copyable<T>::value, "wire scalars are PODs");
    size_ += sizeof(T);
  }
  void PutFlag() { size_ += 1; }
  void PutBytes(const void* data, uint64_t length) {
    size_ = AlignUp8(AlignUp8(size_) + sizeof(uint64_t));
    if (data != nullptr) size_ = AlignUp8(size_ + length);
  }
  // Mirrors Encoder::ReserveBytes.
  void ReserveBytes(uint64_t length) { PutBytes(this, length); }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

// Writes an encoding into a caller-owned buffer of known capacity. Writing
// past the capacity sets overflow() and writes nothing more.
class Encoder {
 public:
  Encoder() = default;
  Encoder(char* data, size_t capacity) : data_(data), capacity_(capacity) {}

  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable<T>::value, "wire scalars are PODs");
    if (!Reserve(sizeof(T))) return;
    std::memcpy(data_ + pos_, &value, sizeof(T));
    pos_ += sizeof(T);
  }
  void PutFlag(bool present) { Put<uint8_t>(present ? 1 : 0); }
  void PutBytes(const void* data, uint64_t length) {
    Pad();
    Put<uint64_t>(data == nullptr ? kNullBytes : length);
    Pad();
    if (data == nullptr || length == 0) return;
    if (!Reserve(length)) return;
    std::memcpy(data_ + pos_, data, length);
    pos_ += length;
    Pad();
  }
  // Reserves `length` bytes as a byte field and returns where to write them
  // (nullptr on overflow). For OUT buffers the agent fills in place.
  char* ReserveBytes(uint64_t length) {
    Pad();
    Put<uint64_t>(length);
    Pad();
    if (!Reserve(length)) return nullptr;
    char* where = data_ + pos_;
    pos_ += length;
    Pad();
    return where;
  }
  size_t size() const { return pos_; }
  bool overflow() const { return overflow_; }
  char* data() { return data_; }

 private:
  bool Reserve(uint64_t n) {
    if (overflow_ || n > capacity_ - pos_) {
      overflow_ = true;
      return false;
    }
    return true;
  }
  void Pad() {
    size_t aligned = AlignUp8(pos_);
    if (aligned == pos_) return;
    if (!Reserve(aligned - pos_)) return;
    std::memset(data_ + pos_, 0, aligned - pos_);
    pos_ = aligned;
  }

  char* data_ = nullptr;
  size_t capacity_ = 0;
  size_t pos_ = 0;
  bool overflow_ = false;
};

// Reads an encoding. Every getter returns false (and leaves the output
// untouched) when the input is too short: a truncated or hostile request
// never reads out of bounds.
class Decoder {
 public:
  Decoder() = default;
  Decoder(const char* data, size_t size) : data_(data), size_(size) {}

  // An enum is read as its underlying integer and accepted only if it names
  // a value of the enum (WireEnum<T>, api/wire_enums.h): an application may
  // send any integer, and holding one outside the enum is undefined.
  template <typename T>
  bool Get(T* value) {
    static_assert(std::is_trivially_copyable<T>::value, "wire scalars are PODs");
    if constexpr (std::is_enum<T>::value) {
      std::underlying_type_t<T> raw{};
      if (!Get(&raw)) return false;
      if (!WireEnum<T>::Valid(raw)) return Fail();
      *value = static_cast<T>(raw);
      return true;
    } else {
      if (sizeof(T) > size_ - pos_) return Fail();
      std::memcpy(value, data_ + pos_, sizeof(T));
      pos_ += sizeof(T);
      return true;
    }
  }
  bool GetFlag(bool* present) {
    uint8_t byte = 0;
    if (!Get(&byte) || byte > 1) return Fail();
    *present = byte == 1;
    return true;
  }
  // On success *data is nullptr for a null pointer, else points into the
  // input (8-byte aligned relative to the start of the input).
  bool GetBytes(const char** data, uint64_t* length) {
    uint64_t n = 0;
    if (!Skip() || !Get(&n) || !Skip()) return Fail();
    if (n == kNullBytes) {
      *data = nullptr;
      *length = 0;
      return true;
    }
    if (n > size_ - pos_) return Fail();
    *data = data_ + pos_;
    *length = n;
    pos_ += n;
    return Skip();
  }
  size_t remaining() const { return size_ - pos_; }
  bool failed() const { return failed_; }

 private:
  bool Skip() {
    size_t aligned = AlignUp8(pos_);
    if (aligned > size_) {
      // Trailing padding may be absent at the very end of the input.
      if (pos_ == size_) return true;
      return Fail();
    }
    pos_ = aligned;
    return true;
  }
  bool Fail() {
    failed_ = true;
    return false;
  }

  const char* data_ = nullptr;
  size_t size_ = 0;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace wire
}  // namespace revenant

#include "api/wire_enums.h"

#endif  // REVENANT_API_WIRE_H_
