// Whole files and descriptors read and written in full, retrying calls a
// signal interrupted.
#ifndef KILN_BASE_FILE_IO_H_
#define KILN_BASE_FILE_IO_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

// The contents of the file at `path`; nullopt when it cannot be opened or
// read.
std::optional<std::string> ReadFileToString(const std::string& path);

// Up to `size` bytes from `fd`: all of them, or fewer where the file ends
// first; nullopt on a read error.
std::optional<std::string> ReadUpTo(int fd, size_t size);

// Writes all of `data` to `fd`; false on an error (errno says which).
bool WriteAll(int fd, absl::string_view data);

}  // namespace kiln

#endif  // KILN_BASE_FILE_IO_H_
