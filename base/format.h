// Numbers as people read them: the shortest text that reads back to the
// same value ("10", "0.1", "1e-07", "inf", "nan").
#ifndef KILN_BASE_FORMAT_H_
#define KILN_BASE_FORMAT_H_

#include <string>

namespace kiln {

// The shortest decimal that parses (strtod / strtof) to exactly `v`.
std::string FormatShortest(double v);
std::string FormatShortest(float v);

}  // namespace kiln

#endif  // KILN_BASE_FORMAT_H_
