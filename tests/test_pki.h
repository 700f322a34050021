// Test helpers: certificates and token files made for one test run with
// the openssl command.
#ifndef KILN_TESTS_TEST_PKI_H_
#define KILN_TESTS_TEST_PKI_H_

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/process_util.h"

namespace kiln::testing {

// Two CAs; a server certificate for 127.0.0.1 and localhost signed by the
// first; client certificates signed by each.
class Pki {
 public:
  Pki() {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("kiln_pki_", getpid(), "_", std::rand());
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat(
        "set -e; cd ", d, ";",
        "openssl req -x509 ", key, " -keyout ca.key -out ca.pem -days 2 -subj /CN=kiln-test-ca;",
        "openssl req -x509 ", key, " -keyout other_ca.key -out other_ca.pem -days 2 "
        "-subj /CN=other-ca;",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext;",
        "openssl req ", key, " -keyout server.key -out server.csr -subj /CN=kiln-server;",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile server.ext;",
        "openssl req ", key, " -keyout client.key -out client.csr -subj /CN=trainer;",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 2;",
        "openssl req ", key, " -keyout rogue.key -out rogue.csr -subj /CN=rogue;",
        "openssl x509 -req -in rogue.csr -CA other_ca.pem -CAkey other_ca.key "
        "-CAcreateserial -out rogue.pem -days 2;");
    ProcessResult ran = RunCommand(script);
    ok_ = ran.exit_code == 0;
    error_ = ran.output;
  }
  ~Pki() { std::filesystem::remove_all(dir_); }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
  std::string error_;
};

inline std::string WriteTokens(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
  chmod(path.c_str(), 0600);
  return path;
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TEST_PKI_H_
