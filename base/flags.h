// Command-line handling shared by every Kiln binary: `--help` prints the
// usage and each flag with its default, and exits 0.
#ifndef KILN_BASE_FLAGS_H_
#define KILN_BASE_FLAGS_H_

namespace kiln {

// Parses absl flags; on --help, -h, --helpfull or --helpshort prints `usage`
// and the program's own flags (name, meaning, default) to stdout and exits
// 0. Unknown flags exit 1 with absl's message, as before.
void ParseFlags(int argc, char** argv, const char* usage);

// For binaries that take positional arguments only: on --help or -h prints
// `usage` and exits 0.
void HandleHelp(int argc, char** argv, const char* usage);

}  // namespace kiln

#endif  // KILN_BASE_FLAGS_H_
