// kiln: the command-line tool.
//
//   kiln check FILE.hlo
//   kiln run FILE.hlo [--server=ADDR] [--device=cpu:0] [--input=a.npy ...]
//            [--random_inputs=SEED] [--output_dir=DIR] [--repeat=N]
//            [--profile [--dry_run]]
//   kiln devices [--server=ADDR]
//   kiln stats --server=ADDR
//   kiln health --server=ADDR
//
// Without --server, programs run on a service embedded in this process.
// Exit status 0 on success, 1 with a one-line message for invalid input.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/npy.h"
#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"
#include "client/client.h"
#include "client/grpc_transport.h"
#include "base/flags.h"
#include "base/logging.h"
#include "embedded/embedded.h"

namespace kiln {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  kiln check FILE.hlo\n"
    "  kiln run FILE.hlo [--server=ADDR] [--device=cpu:0] [--input=a.npy ...]\n"
    "           [--random_inputs=SEED] [--output_dir=DIR] [--repeat=N] [--profile [--dry_run]]\n"
    "  kiln devices [--server=ADDR]\n"
    "  kiln stats --server=ADDR\n"
    "  kiln health --server=ADDR   (exit 0 when the server is serving: a readiness probe)\n"
    "TLS and the bearer token come from KILN_TLS_CA, KILN_TLS_CERT, KILN_TLS_KEY,\n"
    "KILN_TLS_SERVER_NAME, KILN_TLS=1 and KILN_TOKEN or KILN_TOKEN_FILE.\n"
    "  (--connect_timeout=SECONDS bounds reaching a server; default 10)\n"
    "Without --server, modules run on a service in this process with cpu:0 and, when\n"
    "--device names another kind (tpu:3), the devices of that kind up to it.\n";

struct Args {
  std::string command;
  std::string file;
  std::string device;  // default: the client's default device
  std::string server;
  int64_t connect_timeout_seconds = 10;
  std::vector<std::string> inputs;
  std::optional<uint64_t> random_seed;
  std::string output_dir;
  int64_t repeat = 1;
  bool profile = false;  // print the simulated cost (tpu devices)
  bool dry_run = false;  // price without running (with --profile)
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](absl::string_view flag) -> std::optional<std::string> {
      std::string prefix = absl::StrCat("--", flag, "=");
      if (absl::StartsWith(a, prefix)) return a.substr(prefix.size());
      return std::nullopt;
    };
    if (auto v = value("input")) {
      args.inputs.push_back(*v);
    } else if (auto v = value("server")) {
      args.server = *v;
    } else if (auto v = value("connect_timeout")) {
      if (!absl::SimpleAtoi(*v, &args.connect_timeout_seconds) ||
          args.connect_timeout_seconds < 1) {
        return absl::InvalidArgumentError("--connect_timeout needs a positive number of seconds");
      }
    } else if (auto v = value("device")) {
      args.device = *v;
    } else if (auto v = value("output_dir")) {
      args.output_dir = *v;
    } else if (auto v = value("random_inputs")) {
      uint64_t seed;
      if (!absl::SimpleAtoi(*v, &seed)) {
        return absl::InvalidArgumentError("--random_inputs needs an integer seed");
      }
      args.random_seed = seed;
    } else if (auto v = value("repeat")) {
      if (!absl::SimpleAtoi(*v, &args.repeat) || args.repeat < 1 ||
          args.repeat > 1000000) {
        return absl::InvalidArgumentError("--repeat needs an integer from 1 to 1000000");
      }
    } else if (a == "--profile") {
      args.profile = true;
    } else if (a == "--dry_run") {
      args.dry_run = true;
    } else if (absl::StartsWith(a, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) return absl::InvalidArgumentError(kUsage);
  args.command = positional[0];
  const bool needs_file = args.command == "check" || args.command == "run";
  if (positional.size() != (needs_file ? 2u : 1u)) return absl::InvalidArgumentError(kUsage);
  if (needs_file) args.file = positional[1];
  return args;
}

absl::StatusOr<std::unique_ptr<ir::Module>> LoadModule(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseModule(ss.str());
  if (!module.ok()) return WithContext(module.status(), path);
  absl::Status verified = ir::Verify(**module);
  if (!verified.ok()) return WithContext(verified, absl::StrCat(path, ": invalid module"));
  return module;
}

ir::Literal RandomLiteral(const ir::Shape& shape, std::mt19937_64& rng) {
  if (shape.IsTuple()) {
    std::vector<ir::Literal> elements;
    for (const ir::Shape& s : shape.tuple_shapes()) elements.push_back(RandomLiteral(s, rng));
    return ir::Literal::Tuple(std::move(elements));
  }
  ir::Literal lit(shape);
  if (!shape.IsArray()) return lit;
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < shape.ElementCount(); ++i) {
    if (ir::IsFloatType(shape.type())) lit.SetFromDouble(i, real(rng));
    else if (shape.type() == ir::ElementType::kPred) lit.SetFromDouble(i, small(rng) % 2);
    else lit.SetFromDouble(i, small(rng));
  }
  return lit;
}

std::string Summary(const ir::Literal& lit) {
  const int64_t n = lit.element_count();
  std::string s = absl::StrCat(lit.shape().ToString(), " [");
  for (int64_t i = 0; i < n && i < 6; ++i) {
    absl::StrAppend(&s, i ? ", " : "", ir::FormatElement(lit, i));
  }
  absl::StrAppend(&s, n > 6 ? ", ...]" : "]");
  if (n > 1 && lit.shape().type() != ir::ElementType::kPred) {
    double lo = lit.GetAsDouble(0), hi = lo, sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = lit.GetAsDouble(i);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    absl::StrAppend(&s, " min=", lo, " max=", hi, " mean=", sum / n);
  }
  return s;
}

absl::Status Check(const Args& args) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, LoadModule(args.file));
  std::cout << ir::PrintModule(*module);
  std::cout << "fingerprint: " << ir::Fingerprint(*module) << "\n";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<client::Client>> OpenClient(const Args& args) {
  if (args.server.empty()) {
    // The embedded service has a CPU and, when --device names another kind,
    // enough devices of that kind to include it: the default device stays
    // the CPU.
    embedded::Options embedded;
    const std::vector<std::string> device = absl::StrSplit(args.device, ':');
    int ordinal = 0;
    const bool named = !device[0].empty() && device[0] != "cpu";
    if (named && device.size() == 1) {
      embedded.devices = absl::StrCat("cpu:1,", device[0], ":1");
    } else if (named && device.size() == 2 && absl::SimpleAtoi(device[1], &ordinal) &&
               ordinal >= 0 && ordinal < 1024) {
      embedded.devices = absl::StrCat("cpu:1,", device[0], ":", ordinal + 1);
    }
    return embedded::Connect(embedded);
  }
  client::ConnectOptions options;
  options.client_name = "kiln-cli";
  options.connect_timeout = absl::Seconds(args.connect_timeout_seconds);
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client,
                   client::Client::Connect(args.server, options));
  if (!client->security_warning().empty()) {
    std::fprintf(stderr, "kiln: server warns: %s\n", client->security_warning().c_str());
  }
  return client;
}

void PrintProfile(const std::string& device, const v1::ExecutionProfileProto& p,
                  const char* what) {
  const double total = p.simulated_seconds();
  std::printf("profile: %s on %s %.6f ms\n", what, device.c_str(), total * 1e3);
  auto part = [&](const char* name, double seconds) {
    std::printf("  %-13s %.6f ms (%5.1f%%)\n", name, seconds * 1e3,
                total > 0 ? 100 * seconds / total : 0.0);
  };
  part("matrix unit", p.matrix_seconds());
  part("vector", p.vector_seconds());
  part("hbm", p.hbm_seconds());
  part("interconnect", p.interconnect_seconds());
  part("infeed", p.infeed_seconds());
  std::printf("  matrix-unit utilization %.2f%%, %lld flops, %lld HBM bytes moved, "
              "padding waste %.1f%%\n",
              100 * p.matrix_utilization(), static_cast<long long>(p.matrix_flops()),
              static_cast<long long>(p.hbm_bytes()), 100 * p.padding_waste());
}

absl::Status Run(const Args& args) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, LoadModule(args.file));
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client, OpenClient(args));
  std::string device = args.device.empty() ? client->default_device().name : args.device;
  if (device.find(':') == std::string::npos) device += ":0";  // "tpu" means tpu:0
  if (args.dry_run) {
    if (!args.profile) return absl::InvalidArgumentError("--dry_run goes with --profile");
    ASSIGN_OR_RETURN(v1::ExecutionProfileProto estimate, client->Estimate(*module, device));
    PrintProfile(device, estimate, "predicted time (not run)");
    return absl::OkStatus();
  }
  const std::vector<ir::Shape> params = module->entry()->ParameterShapes();
  std::vector<ir::Literal> inputs;
  if (args.random_seed.has_value()) {
    if (!args.inputs.empty()) {
      return absl::InvalidArgumentError("--input and --random_inputs exclude each other");
    }
    std::mt19937_64 rng(*args.random_seed);
    for (const ir::Shape& s : params) inputs.push_back(RandomLiteral(s, rng));
  } else {
    if (args.inputs.size() != params.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the module takes ", params.size(), " inputs, got ", args.inputs.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      ASSIGN_OR_RETURN(ir::Literal raw, client::ReadNpyFile(args.inputs[i]));
      absl::StatusOr<ir::Literal> adapted = client::AdaptToParameter(raw, params[i]);
      if (!adapted.ok()) {
        return WithContext(adapted.status(),
                           absl::StrCat("input ", i, " (", args.inputs[i], ")"));
      }
      inputs.push_back(*std::move(adapted));
    }
  }
  ASSIGN_OR_RETURN(auto executable, client->Compile(*module, device));
  std::vector<std::shared_ptr<client::DeviceBuffer>> buffers;
  for (const ir::Literal& in : inputs) {
    ASSIGN_OR_RETURN(auto b, client->TransferToDevice(in, device));
    buffers.push_back(std::move(b));
  }
  client::ExecuteOptions options;
  // Nothing feeds a program run from the CLI: an infeed fails at once.
  options.infeed_timeout = absl::Milliseconds(1);
  client::ExecuteResult result;
  for (int64_t r = 0; r < args.repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(result, client->Execute(*executable, buffers, options));
    auto end = std::chrono::steady_clock::now();
    if (args.repeat > 1) {
      std::printf("run %lld: %.3f ms\n", static_cast<long long>(r + 1),
                  std::chrono::duration<double, std::milli>(end - start).count());
    }
  }
  if (!args.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.output_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", args.output_dir, ": ", ec.message()));
    }
  }
  if (args.profile && !result.profile.has_value()) {
    std::printf("profile: %s has no cost model (tpu devices do)\n", device.c_str());
  } else if (args.profile) {
    PrintProfile(device, *result.profile, "simulated time");
  }
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    ASSIGN_OR_RETURN(ir::Literal value, client->TransferFromDevice(*result.outputs[i]));
    std::printf("out_%zu: %s\n", i, Summary(value).c_str());
    if (!args.output_dir.empty()) {
      RETURN_IF_ERROR(client::WriteNpyFile(
          absl::StrCat(args.output_dir, "/out_", i, ".npy"), value));
    }
  }
  return absl::OkStatus();
}

absl::Status Devices(const Args& args) {
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client, OpenClient(args));
  for (const client::DeviceDescription& d : client->devices()) {
    std::printf("%-8s kind=%s ordinal=%d memory=%lld bytes%s\n", d.name.c_str(), d.kind.c_str(),
                d.ordinal, static_cast<long long>(d.memory_capacity_bytes),
                d.name == client->default_device().name ? " (default)" : "");
  }
  return absl::OkStatus();
}

absl::Status Health(const Args& args) {
  if (args.server.empty()) return absl::InvalidArgumentError("health needs --server=ADDR");
  client::GrpcOptions options;
  options.connect_timeout = absl::Seconds(args.connect_timeout_seconds);
  ASSIGN_OR_RETURN(std::string status, client::CheckHealth(args.server, options));
  std::printf("%s\n", status.c_str());
  if (status != "SERVING") return absl::UnavailableError(absl::StrCat("the server is ", status));
  return absl::OkStatus();
}

absl::Status Stats(const Args& args) {
  if (args.server.empty()) return absl::InvalidArgumentError("stats needs --server=ADDR");
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client, OpenClient(args));
  ASSIGN_OR_RETURN(v1::MetricsResponse m, client->Metrics());
  for (const auto& c : m.counters()) {
    std::printf("%-40s %lld\n", c.name().c_str(), static_cast<long long>(c.value()));
  }
  for (const auto& t : m.timers()) {
    std::printf("%-40s n=%lld mean=%.1fus p50=%.1fus p90=%.1fus p99=%.1fus max=%.1fus\n",
                t.name().c_str(), static_cast<long long>(t.count()), t.mean_micros(),
                t.p50_micros(), t.p90_micros(), t.p99_micros(), t.max_micros());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  HandleHelp(argc, argv, kUsage);
  // The embedded service logs only warnings unless KILN_LOG_LEVEL says more.
  if (std::getenv("KILN_LOG_LEVEL") == nullptr) logging::SetLevel("warn").IgnoreError();
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  absl::Status status;
  if (!args.ok()) {
    status = args.status();
  } else if (args->command == "check") {
    status = Check(*args);
  } else if (args->command == "run") {
    status = Run(*args);
  } else if (args->command == "devices") {
    status = Devices(*args);
  } else if (args->command == "stats") {
    status = Stats(*args);
  } else if (args->command == "health") {
    status = Health(*args);
  } else {
    status = absl::InvalidArgumentError(
        absl::StrCat("unknown command '", args->command, "'\n", kUsage));
  }
  if (!status.ok()) {
    std::string msg(status.message());
    // One line: the first line of the message.
    if (!absl::StrContains(msg, "usage:")) {
      std::replace(msg.begin(), msg.end(), '\n', ' ');
    }
    std::fprintf(stderr, "kiln: %s\n", msg.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
