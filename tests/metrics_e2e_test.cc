// End to end: kiln-server's Prometheus endpoint (--metrics_listen), scraped
// and parsed with prometheus_client's parser (tests/prometheus_scrape.py)
// while a client works.
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"
#include "tests/test_pki.h"

namespace kiln {
namespace {

using client::Client;
using testing::Pki;
using testing::ProcessResult;
using testing::RunCommand;
using testing::WriteTokens;

std::string Scrape(const std::string& url, const std::string& extra = "") {
  return absl::StrCat("/usr/bin/python3 ", KILN_SOURCE_DIR, "/tests/prometheus_scrape.py ", url,
                      " ", extra);
}

// The value of `key` in the scraper's JSON object; -1 when it is absent.
double Value(const std::string& json, const std::string& key) {
  const std::string quoted = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return -1;
  const size_t start = at + quoted.size();
  const size_t end = json.find_first_of(",}", start);
  double v = -1;
  if (!absl::SimpleAtod(json.substr(start, end - start), &v)) return -1;
  return v;
}

std::string MetricsUrl(testing::ServerProcess& server) {
  const std::string line = server.NextLine();
  EXPECT_EQ(line.rfind("metrics on ", 0), 0u) << line;
  return line.rfind("metrics on ", 0) == 0 ? line.substr(11) : std::string();
}

// Runs `executions` of a small program; returns its argument, which stays
// on the device while the caller holds it.
std::shared_ptr<client::DeviceBuffer> Work(Client& c, int executions) {
  auto m = ir::ParseModule(
      "ENTRY e {\n x = f32[4] parameter(0)\n ROOT y = f32[4] add(x, x)\n}");
  EXPECT_TRUE(m.ok()) << m.status();
  auto exe = c.Compile(**m, "cpu:0");
  EXPECT_TRUE(exe.ok()) << exe.status();
  auto x = c.TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {4}, {1, 2, 3, 4}), "cpu:0");
  EXPECT_TRUE(x.ok()) << x.status();
  if (!exe.ok() || !x.ok()) return nullptr;
  for (int i = 0; i < executions; ++i) {
    auto r = c.Execute(**exe, {*x});
    EXPECT_TRUE(r.ok()) << r.status();
  }
  return *x;
}

TEST(MetricsE2E, ThePrometheusEndpointParsesAndItsCountersMove) {
  testing::ServerProcess server({"--metrics_listen=127.0.0.1:0"});
  ASSERT_FALSE(server.address().empty());
  const std::string url = MetricsUrl(server);
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;

  ProcessResult before = RunCommand(Scrape(url));
  ASSERT_EQ(before.exit_code, 0) << before.output;
  auto c = Client::Connect(server.address());
  ASSERT_TRUE(c.ok()) << c.status();
  auto kept = Work(**c, 5);
  ASSERT_NE(kept, nullptr);
  ProcessResult after = RunCommand(Scrape(url));
  ASSERT_EQ(after.exit_code, 0) << after.output;

  EXPECT_EQ(Value(before.output, "kiln_sessions"), 0) << before.output;
  EXPECT_EQ(Value(after.output, "kiln_sessions"), 1) << after.output;
  EXPECT_EQ(Value(after.output, "kiln_executions_total") -
                std::max(0.0, Value(before.output, "kiln_executions_total")),
            5);
  EXPECT_EQ(Value(after.output, "kiln_execute_seconds_count"), 5);
  EXPECT_EQ(Value(after.output, "kiln_execute_seconds_bucket{le=+Inf}"), 5);
  EXPECT_GT(Value(after.output, "kiln_execute_seconds_sum"), 0);
  EXPECT_EQ(Value(after.output, "kiln_compile_cache_misses_total"), 1);
  EXPECT_EQ(Value(after.output, "kiln_compile_seconds_count"), 1);
  EXPECT_EQ(Value(after.output, "kiln_transfer_bytes_total{direction=to_device}"), 16);
  EXPECT_GE(Value(after.output, "kiln_device_memory_used_bytes{device=cpu:0}"), 16);
  EXPECT_GT(Value(after.output, "kiln_device_memory_capacity_bytes{device=cpu:0}"), 0);
  EXPECT_GT(Value(after.output, "process_resident_memory_bytes"), 1e6);

  ProcessResult missing = RunCommand(Scrape(url.substr(0, url.size() - 8) + "/other"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("HTTP 404"), std::string::npos) << missing.output;
}

TEST(MetricsE2E, ScrapesNeedTheBearerTokenAndExposureNeedsInsecure) {
  Pki pki;
  ASSERT_TRUE(pki.ok()) << pki.error();
  const std::string tokens = WriteTokens(pki.Path("tokens"), "scraper aaaaaaaaaaaaaaaaaaaa\n");
  testing::ServerProcess server({"--metrics_listen=127.0.0.1:0", "--auth_tokens_file=" + tokens,
                                 "--tls_cert=" + pki.Path("server.pem"),
                                 "--tls_key=" + pki.Path("server.key")});
  ASSERT_FALSE(server.address().empty());
  const std::string url = MetricsUrl(server);
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;

  ProcessResult ok = RunCommand(Scrape(url, "--token aaaaaaaaaaaaaaaaaaaa"));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(Value(ok.output, "kiln_sessions"), 0) << ok.output;
  ProcessResult no_token = RunCommand(Scrape(url));
  EXPECT_NE(no_token.output.find("HTTP 401"), std::string::npos) << no_token.output;
  ProcessResult wrong = RunCommand(Scrape(url, "--token bbbbbbbbbbbbbbbbbbbb"));
  EXPECT_NE(wrong.output.find("HTTP 401"), std::string::npos) << wrong.output;
  ProcessResult other_path = RunCommand(Scrape(url.substr(0, url.size() - 8) + "/x"));
  EXPECT_NE(other_path.output.find("HTTP 401"), std::string::npos) << other_path.output;
  // The refused scrapes are counted.
  ProcessResult again = RunCommand(Scrape(url, "--token aaaaaaaaaaaaaaaaaaaa"));
  EXPECT_GE(Value(again.output, "kiln_auth_failures_total"), 3) << again.output;

  // Plain HTTP on an address other machines reach needs --insecure, even
  // when the gRPC port is secured.
  const std::string bin = std::string(KILN_BIN_DIR) + "/kiln-server";
  const std::string secured = " --listen=127.0.0.1:0 --tls_cert=" + pki.Path("server.pem") +
                              " --tls_key=" + pki.Path("server.key") +
                              " --auth_tokens_file=" + tokens;
  ProcessResult refused = RunCommand(bin + secured + " --metrics_listen=0.0.0.0:0");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--metrics_listen=0.0.0.0:0 is reachable"), std::string::npos)
      << refused.output;
  testing::ServerProcess exposed({"--tls_cert=" + pki.Path("server.pem"),
                                  "--tls_key=" + pki.Path("server.key"),
                                  "--auth_tokens_file=" + tokens, "--insecure",
                                  "--metrics_listen=0.0.0.0:0"});
  ASSERT_FALSE(exposed.address().empty());
  const std::string exposed_url = MetricsUrl(exposed);
  const std::string port = exposed_url.substr(exposed_url.rfind(':') + 1);
  ProcessResult scraped = RunCommand(Scrape("http://127.0.0.1:" + port, "--token aaaaaaaaaaaaaaaaaaaa"));
  EXPECT_EQ(scraped.exit_code, 0) << scraped.output;
  ProcessResult anonymous = RunCommand(Scrape("http://127.0.0.1:" + port));
  EXPECT_NE(anonymous.output.find("HTTP 401"), std::string::npos) << anonymous.output;
}

TEST(MetricsE2E, TraceFileOpensAsChromeTraceEventsAndLogsCanBeJson) {
  Pki pki;  // a private temporary directory
  ASSERT_TRUE(pki.ok()) << pki.error();
  const std::string trace = pki.Path("trace.json");
  {
    testing::ServerProcess server({"--trace_file=" + trace});
    ASSERT_FALSE(server.address().empty());
    auto c = Client::Connect(server.address());
    ASSERT_TRUE(c.ok()) << c.status();
    auto kept = Work(**c, 3);
    ASSERT_NE(kept, nullptr);
    ASSERT_TRUE((*c)->TransferFromDevice(*kept).ok());
    c->reset();
    EXPECT_EQ(server.Stop(), 0);
  }
  // Every event is a complete event with a time, a duration and a thread;
  // the program's compile, its three executions and both transfers are
  // there.
  ProcessResult checked = RunCommand(absl::StrCat(
      "/usr/bin/python3 -c '\n"
      "import collections, json, sys\n"
      "events = json.load(open(sys.argv[1]))\n"
      "names = collections.Counter(e[\"name\"] for e in events if e[\"ph\"] == \"X\")\n"
      "assert all(isinstance(e[\"ts\"], int) and e[\"dur\"] >= 0 and e[\"tid\"] > 0\n"
      "           for e in events if e[\"ph\"] == \"X\"), events\n"
      "print(sorted(names.items()))\n' ",
      trace));
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("('compile', 1)"), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find("('execute', 3)"), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find("('transfer to device', 1)"), std::string::npos) << checked.output;
  EXPECT_NE(checked.output.find("('transfer from device', 1)"), std::string::npos)
      << checked.output;

  // JSON logs: every line an object with time, level and message.
  // The server is stopped once it says it listens (a signal before its
  // handler is installed would kill it without its last line).
  ProcessResult logs = RunCommand(absl::StrCat(
      "cd ", pki.Path(""), " && (", KILN_BIN_DIR,
      "/kiln-server --listen=127.0.0.1:0 --log_format=json --log_level=info "
      "> out.txt 2> err.txt & pid=$!; for i in $(seq 100); do grep -q listening out.txt && "
      "break; sleep 0.1; done; kill -TERM $pid; wait $pid) && "
      "/usr/bin/python3 -c 'import json, sys\n"
      "lines = [json.loads(l) for l in sys.stdin]\n"
      "assert lines and all(set(l) >= {\"time\", \"level\", \"message\"} for l in lines), lines\n"
      "print(len(lines), lines[-1][\"message\"])' < err.txt"));
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_NE(logs.output.find("kiln-server stopped"), std::string::npos) << logs.output;
  ProcessResult bad = RunCommand(std::string(KILN_BIN_DIR) + "/kiln-server --log_format=xml");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

}  // namespace
}  // namespace kiln
