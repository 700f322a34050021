#include "base/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"

namespace kiln {
namespace {

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h" || a == "--helpfull" || a == "--helpshort" || a == "-help") {
      return true;
    }
  }
  return false;
}

}  // namespace

void ParseFlags(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  if (AsksForHelp(argc, argv)) {
    std::printf("%s\n\nFlags:\n", usage);
    std::vector<absl::CommandLineFlag*> flags;
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      // Abseil's own flags (--flagfile, --fromenv, ...) are not this program's.
      if (absl::StrContains(flag->Filename(), "absl/")) continue;
      flags.push_back(flag);
    }
    std::sort(flags.begin(), flags.end(),
              [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
    for (const absl::CommandLineFlag* flag : flags) {
      std::string def = flag->DefaultValue();
      if (def.empty()) def = "\"\"";
      std::printf("  --%s  %s (default: %s)\n", std::string(flag->Name()).c_str(),
                  flag->Help().c_str(), def.c_str());
    }
    std::fflush(stdout);
    std::exit(0);
  }
  absl::ParseCommandLine(argc, argv);
}

void HandleHelp(int argc, char** argv, const char* usage) {
  if (!AsksForHelp(argc, argv)) return;
  std::printf("%s\n", usage);
  std::fflush(stdout);
  std::exit(0);
}

}  // namespace kiln
