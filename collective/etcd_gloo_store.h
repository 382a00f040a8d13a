// EtcdGlooStore: a Gloo rendezvous store (gloo::rendezvous::Store) kept in
// etcd under a key prefix, for communicators whose members run on several
// nodes (a job of revenant-run --rdzv-endpoint): the members' Gloo
// addresses travel through etcd instead of a directory only one node sees.
//
//   auto client = recovery::EtcdClient::Create(endpoint);
//   EtcdGlooStore store(client->get(), "/revenant/job/gloo/collectives-<token>/",
//                       absl::Seconds(60));
//   gloo::rendezvous::PrefixStore prefixed("comm", store);
//   context->connectFullMesh(prefixed, device);
//
// set() puts the key; get() and wait() poll for keys (10 ms at first, then
// up to every 100 ms) until they exist, bounded by the wait's timeout
// (get: the store's); a timeout or an etcd that stays unreachable past the
// client's retries throws gloo::IoException, which Gloo's callers turn into
// a failed rendezvous (GlooEngine: kDeadlineExceeded / kUnavailable).
//
// Thread safety: as EtcdClient (any thread).
#ifndef REVENANT_COLLECTIVE_ETCD_GLOO_STORE_H_
#define REVENANT_COLLECTIVE_ETCD_GLOO_STORE_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "recovery/etcd_client.h"

namespace revenant {
namespace collective {

class EtcdGlooStore : public gloo::rendezvous::Store {
 public:
  // `client` must outlive the store.
  EtcdGlooStore(recovery::EtcdClient* client, std::string prefix, absl::Duration timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  recovery::EtcdClient* const client_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

}  // namespace collective
}  // namespace revenant

#endif  // REVENANT_COLLECTIVE_ETCD_GLOO_STORE_H_
