// EtcdClient: a small client of etcd v3 through its JSON gateway
// (http://HOST:PORT/v3/..., etcd 3.4), over libcurl, the JSON mapped by
// protobuf's JSON support onto the messages of recovery/etcd_gateway.proto.
// docs/multinode.md says why this client and not gRPC.
//
//   absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create("127.0.0.1:2379");
//   (*c)->Put("/revenant/job/x", "1");
//   absl::StatusOr<bool> won = (*c)->CreateIfAbsent("/revenant/job/node/0", "pid 7", lease);
//   absl::StatusOr<bool> swapped = (*c)->CompareAndSwap(key, "3", "4");  // epoch claims
//
// Every call is bounded: one HTTP request takes at most
// options.request_timeout; a request that cannot reach etcd (connection
// refused, timeout, a 5xx answer) is retried with a growing pause until
// options.unreachable_timeout has passed since the call began, then fails
// with kUnavailable naming the endpoint, the attempts and the last error.
// Answers etcd gives (a 4xx: bad request, lease not found) are not retried.
//
// Retried writes: a Put whose answer was lost may have been applied; Put is
// idempotent, and the compare-and-swap calls are written so that a repeated
// attempt that finds its own write reports it (see CompareAndSwap).
//
// Thread safety: every method may be called from any thread (each request
// uses a curl handle of its own).
#ifndef REVENANT_RECOVERY_ETCD_CLIENT_H_
#define REVENANT_RECOVERY_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace google {
namespace protobuf {
class Message;
}  // namespace protobuf
}  // namespace google

namespace revenant {
namespace recovery {

struct EtcdClientOptions {
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration unreachable_timeout = absl::Seconds(20);
  absl::Duration first_retry_pause = absl::Milliseconds(50);
  absl::Duration max_retry_pause = absl::Seconds(1);
};

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // `endpoint`: HOST:PORT or http://HOST:PORT. Checks nothing over the
  // network (the first call does).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(const std::string& endpoint,
                                                            EtcdClientOptions options = {});
  const std::string& endpoint() const { return endpoint_; }

  // The key's value, nullopt when absent.
  absl::StatusOr<std::optional<EtcdKv>> Get(const std::string& key);
  // Every key starting with `prefix`, in key order.
  absl::StatusOr<std::vector<EtcdKv>> GetPrefix(const std::string& prefix);
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Creates `key` only if it does not exist (a transaction comparing its
  // create revision with 0). Returns whether this call created it; when it
  // existed, *existing (if not null) gets its value.
  absl::StatusOr<bool> CreateIfAbsent(const std::string& key, const std::string& value,
                                      int64_t lease = 0, std::string* existing = nullptr);
  // Replaces the value of `key` with `desired` only if it is `expected`
  // (nullopt: only if the key is absent). Returns whether it did; *current
  // (if not null) gets the value found when it did not (empty if absent).
  absl::StatusOr<bool> CompareAndSwap(const std::string& key,
                                      const std::optional<std::string>& expected,
                                      const std::string& desired,
                                      std::string* current = nullptr);
  // Deletes every key starting with `prefix`; returns how many.
  absl::StatusOr<int64_t> DeletePrefix(const std::string& prefix);

  // Leases: Grant returns the lease's id; KeepAlive renews it and returns
  // the TTL left (kNotFound when the lease expired or was revoked).
  absl::StatusOr<int64_t> GrantLease(int64_t ttl_seconds);
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);

  // One POST of `request` to `path` (/v3/kv/range, ...), the answer parsed
  // into `response`, with the retries described above.
  absl::Status Call(const std::string& path, const google::protobuf::Message& request,
                    google::protobuf::Message* response);

 private:
  EtcdClient(std::string endpoint, EtcdClientOptions options)
      : endpoint_(std::move(endpoint)), options_(options) {}
  // One attempt: the HTTP status (0 when none came) and the body.
  absl::Status Post(const std::string& url, const std::string& body, long* http_status,
                    std::string* answer);

  const std::string endpoint_;  // http://HOST:PORT
  const EtcdClientOptions options_;
};

// The end of the key range of every key starting with `prefix` (etcd's
// range_end: the prefix with its last byte incremented).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_ETCD_CLIENT_H_
