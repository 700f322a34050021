#include "server/exposure.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::server {

absl::StatusOr<std::string> CheckExposure(absl::string_view address, const Exposure& exposure) {
  if (IsLoopbackHost(HostOf(address))) return std::string();
  if (exposure.tls && exposure.authenticated) return std::string();
  std::vector<std::string> missing;
  if (!exposure.tls) missing.push_back("TLS (--tls_cert and --tls_key)");
  if (!exposure.authenticated) {
    missing.push_back("client authentication (--auth_tokens_file or --tls_client_ca)");
  }
  const std::string what = absl::StrJoin(missing, " and ");
  if (!exposure.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        address, " is reachable from other machines, and this server has no ", what,
        "; configure them, listen on loopback, or pass --insecure to accept anyone who "
        "reaches the port"));
  }
  return absl::StrCat("INSECURE: ", address, " is reachable from other machines without ", what,
                      " (--insecure): anyone who reaches it can run programs and read data");
}

}  // namespace kiln::server
