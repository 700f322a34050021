#include "runtime/host/artifact.h"

#include <cblas.h>

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/proto_convert.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/clone.h"
#include "oneapi/dnnl/dnnl.h"

namespace kiln::host {
namespace {

constexpr char kMagic[] = "kiln-host-artifact 1\n";

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown processor";
}

}  // namespace

std::string EncodeArtifact(const ir::Module& optimized, const TuningRecord& tuning) {
  const std::string module = ir::ModuleToProto(optimized).SerializeAsString();
  return absl::StrCat(kMagic, module.size(), "\n", module, tuning.Serialize());
}

absl::StatusOr<DecodedArtifact> DecodeArtifact(const std::string& bytes) {
  const std::string magic = kMagic;
  if (bytes.compare(0, magic.size(), magic) != 0) {
    return absl::InvalidArgumentError("not a host program artifact of this version");
  }
  const size_t newline = bytes.find('\n', magic.size());
  size_t module_size = 0;
  if (newline == std::string::npos ||
      !absl::SimpleAtoi(bytes.substr(magic.size(), newline - magic.size()), &module_size) ||
      module_size > bytes.size() - newline - 1) {
    return absl::InvalidArgumentError("a host program artifact with a bad module length");
  }
  v1::ModuleProto proto;
  if (!proto.ParseFromString(bytes.substr(newline + 1, module_size))) {
    return absl::InvalidArgumentError("a host program artifact whose module does not parse");
  }
  DecodedArtifact out;
  ASSIGN_OR_RETURN(out.module, ir::ModuleFromProto(proto));
  RETURN_IF_ERROR(WithContext(ir::Verify(*out.module), "the artifact's module"));
  ASSIGN_OR_RETURN(out.tuning, TuningRecord::Parse(bytes.substr(newline + 1 + module_size)));
  return out;
}

std::string HostArtifactDependencies() {
  // The same for the life of the process (and asked at every compile the
  // persistent cache sees): read /proc/cpuinfo once.
  static const std::string dependencies = [] {
    const dnnl_version_t* v = dnnl_version();
    return absl::StrCat("onednn ", v->major, ".", v->minor, ".", v->patch, " (", v->hash,
                        ") isa ", static_cast<int>(dnnl_get_effective_cpu_isa()), "; openblas ",
                        openblas_get_config(), " ", openblas_get_corename(), "; cpu ",
                        CpuModel());
  }();
  return dependencies;
}

absl::StatusOr<runtime::Compiler::Compiled> CompileOptimized(
    const ir::Module& module, passes::Pipeline& pipeline,
    const std::function<absl::StatusOr<std::shared_ptr<runtime::Executable>>(
        const ir::Module& optimized)>& build) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> optimized, passes::CloneModule(module));
  RETURN_IF_ERROR(WithContext(pipeline.Run(optimized.get()).status(), "optimizing the module"));
  if (absl::Status st = ir::Verify(*optimized); !st.ok()) {
    return absl::InternalError(absl::StrCat("the optimized module is invalid: ", st.message()));
  }
  TuningRecord tuning;
  std::shared_ptr<runtime::Executable> executable;
  {
    TuningScope scope(&tuning);
    ASSIGN_OR_RETURN(executable, build(*optimized));
  }
  return runtime::Compiler::Compiled{std::move(executable), EncodeArtifact(*optimized, tuning)};
}

}  // namespace kiln::host
