#include "server/grpc_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>


#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "grpcpp/security/server_credentials.h"

namespace kiln::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::optional<std::string> text = ReadFileToString(path);
  if (!text) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read it"));
  return *std::move(text);
}

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioDeleter>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<std::unique_ptr<X509, X509Deleter>> FirstCertificate(const std::string& pem,
                                                                     const char* flag,
                                                                     const std::string& path) {
  auto bio = MemoryBio(pem);
  std::unique_ptr<X509, X509Deleter> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM certificate (", OpenSslError(), ")"));
  }
  return cert;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key (--tls_client_ca adds client certificates)");
  }
  absl::StatusOr<std::string> cert_pem = ReadPem(files.cert, "--tls_cert");
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadPem(files.key, "--tls_key");
  if (!key_pem.ok()) return key_pem.status();

  absl::StatusOr<std::unique_ptr<X509, X509Deleter>> cert =
      FirstCertificate(*cert_pem, "--tls_cert", files.cert);
  if (!cert.ok()) return cert.status();
  {
    auto bio = MemoryBio(*key_pem);
    std::unique_ptr<EVP_PKEY, KeyDeleter> key(
        PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    if (key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_key ", files.key, ": not an unencrypted PEM private key (", OpenSslError(), ")"));
    }
    if (X509_check_private_key(cert->get(), key.get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("--tls_key ", files.key,
                                                     " is not the key of --tls_cert ", files.cert));
    }
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert->get())) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert ", files.cert, " has expired"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert->get())) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert ", files.cert, " is not valid yet"));
  }

  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadPem(files.client_ca, "--tls_client_ca");
    if (!ca_pem.ok()) return ca_pem.status();
    absl::StatusOr<std::unique_ptr<X509, X509Deleter>> ca =
        FirstCertificate(*ca_pem, "--tls_client_ca", files.client_ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca_pem;
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace kiln::server
