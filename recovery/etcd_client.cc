#include "recovery/etcd_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "recovery/etcd_gateway.pb.h"

namespace revenant {
namespace recovery {
namespace {

namespace pb = ::revenant::recovery::etcd;
using google::protobuf::util::JsonParseOptions;
using google::protobuf::util::JsonPrintOptions;

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

EtcdKv FromPb(const pb::KeyValue& kv) {
  return {kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

}  // namespace

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const std::string& endpoint,
                                                                EtcdClientOptions options) {
  std::string e = endpoint;
  if (absl::StartsWith(e, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint ", endpoint, ": TLS is not supported (use http://)"));
  }
  if (!absl::StartsWith(e, "http://")) e = "http://" + e;
  while (absl::EndsWith(e, "/")) e.pop_back();
  const std::string hostport = e.substr(7);
  if (hostport.empty() || hostport.find(':') == std::string::npos ||
      hostport.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint '", endpoint, "': expected HOST:PORT"));
  }
  GlobalInit();
  return std::unique_ptr<EtcdClient>(new EtcdClient(e, options));
}

absl::Status EtcdClient::Post(const std::string& url, const std::string& body, long* http_status,
                              std::string* answer) {
  *http_status = 0;
  answer->clear();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, answer);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(
                       1, absl::ToInt64Milliseconds(options_.request_timeout))));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(
                       1, absl::ToInt64Milliseconds(options_.request_timeout))));
  curl_easy_setopt(curl, CURLOPT_PROXY, "");  // never through a proxy from the environment
  const CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, http_status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) return absl::UnavailableError(curl_easy_strerror(rc));
  return absl::OkStatus();
}

absl::Status EtcdClient::Call(const std::string& path, const google::protobuf::Message& request,
                              google::protobuf::Message* response) {
  std::string body;
  JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(request, &body, print); !s.ok()) {
    return absl::InternalError(absl::StrCat("etcd request ", path, ": ", s.ToString()));
  }
  const std::string url = endpoint_ + path;
  const absl::Time deadline = absl::Now() + options_.unreachable_timeout;
  absl::Duration pause = options_.first_retry_pause;
  int attempts = 0;
  std::string last;
  while (true) {
    ++attempts;
    long status = 0;
    std::string answer;
    absl::Status s = Post(url, body, &status, &answer);
    if (s.ok() && status == 200) {
      JsonParseOptions parse;
      parse.ignore_unknown_fields = true;
      if (auto p = google::protobuf::util::JsonStringToMessage(answer, response, parse); !p.ok()) {
        return absl::InternalError(absl::StrCat("etcd at ", endpoint_, path,
                                                ": cannot parse the answer (", p.ToString(),
                                                "): ", answer.substr(0, 200)));
      }
      return absl::OkStatus();
    }
    if (s.ok() && status >= 400 && status < 500) {
      // etcd's own answer (a bad request, a lease that is gone): final.
      const absl::StatusCode code = absl::StrContains(answer, "not found")
                                        ? absl::StatusCode::kNotFound
                                        : absl::StatusCode::kFailedPrecondition;
      return absl::Status(code, absl::StrCat("etcd at ", endpoint_, path, " answered HTTP ",
                                             status, ": ", answer.substr(0, 300)));
    }
    last = s.ok() ? absl::StrCat("HTTP ", status, ": ", answer.substr(0, 200))
                  : std::string(s.message());
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, options_.max_retry_pause);
  }
  return absl::UnavailableError(absl::StrCat(
      "etcd at ", endpoint_, " unreachable: ", attempts, " attempt(s) of ", path, " over ",
      absl::FormatDuration(options_.unreachable_timeout), " failed; last error: ", last));
}

absl::StatusOr<std::optional<EtcdKv>> EtcdClient::Get(const std::string& key) {
  pb::RangeRequest req;
  req.set_key(key);
  pb::RangeResponse resp;
  if (absl::Status s = Call("/v3/kv/range", req, &resp); !s.ok()) return s;
  if (resp.kvs_size() == 0) return std::optional<EtcdKv>();
  return std::optional<EtcdKv>(FromPb(resp.kvs(0)));
}

absl::StatusOr<std::vector<EtcdKv>> EtcdClient::GetPrefix(const std::string& prefix) {
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixRangeEnd(prefix));
  pb::RangeResponse resp;
  if (absl::Status s = Call("/v3/kv/range", req, &resp); !s.ok()) return s;
  std::vector<EtcdKv> out;
  for (const pb::KeyValue& kv : resp.kvs()) out.push_back(FromPb(kv));
  return out;
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  pb::PutResponse resp;
  return Call("/v3/kv/put", req, &resp);
}

absl::StatusOr<bool> EtcdClient::CreateIfAbsent(const std::string& key, const std::string& value,
                                                int64_t lease, std::string* existing) {
  pb::TxnRequest req;
  pb::Compare* c = req.add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(0);
  pb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  req.add_failure()->mutable_request_range()->set_key(key);
  pb::TxnResponse resp;
  if (absl::Status s = Call("/v3/kv/txn", req, &resp); !s.ok()) return s;
  if (resp.succeeded()) return true;
  std::string found;
  if (resp.responses_size() > 0 && resp.responses(0).response_range().kvs_size() > 0) {
    found = resp.responses(0).response_range().kvs(0).value();
  }
  if (existing != nullptr) *existing = found;
  return false;
}

absl::StatusOr<bool> EtcdClient::CompareAndSwap(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired,
                                                std::string* current) {
  pb::TxnRequest req;
  pb::Compare* c = req.add_compare();
  c->set_key(key);
  if (expected.has_value()) {
    c->set_target(pb::Compare::VALUE);
    c->set_result(pb::Compare::EQUAL);
    c->set_value(*expected);
  } else {
    c->set_target(pb::Compare::CREATE);
    c->set_result(pb::Compare::EQUAL);
    c->set_create_revision(0);
  }
  pb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(desired);
  req.add_failure()->mutable_request_range()->set_key(key);
  pb::TxnResponse resp;
  if (absl::Status s = Call("/v3/kv/txn", req, &resp); !s.ok()) return s;
  if (resp.succeeded()) return true;
  std::string found;
  if (resp.responses_size() > 0 && resp.responses(0).response_range().kvs_size() > 0) {
    found = resp.responses(0).response_range().kvs(0).value();
  }
  if (current != nullptr) *current = found;
  return false;
}

absl::StatusOr<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  pb::DeleteRangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixRangeEnd(prefix));
  pb::DeleteRangeResponse resp;
  if (absl::Status s = Call("/v3/kv/deleterange", req, &resp); !s.ok()) return s;
  return resp.deleted();
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  pb::LeaseGrantResponse resp;
  if (absl::Status s = Call("/v3/lease/grant", req, &resp); !s.ok()) return s;
  if (!resp.error().empty() || resp.id() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd at ", endpoint_, " refused a lease: ", resp.error()));
  }
  return resp.id();
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  pb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  pb::LeaseKeepAliveStreamed resp;
  if (absl::Status s = Call("/v3/lease/keepalive", req, &resp); !s.ok()) return s;
  if (resp.has_error()) {
    return absl::UnavailableError(
        absl::StrCat("etcd at ", endpoint_, ": keep-alive failed: ", resp.error().message()));
  }
  // An expired or revoked lease answers with no TTL.
  if (resp.result().ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  return resp.result().ttl();
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  return Call("/v3/lease/revoke", req, &resp);
}

}  // namespace recovery
}  // namespace revenant
