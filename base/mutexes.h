// Abseil's mutexes as Kiln runs them.
#ifndef KILN_BASE_MUTEXES_H_
#define KILN_BASE_MUTEXES_H_

namespace kiln {

// Debian builds Abseil with its deadlock detection on, which it otherwise
// keeps for builds with assertions: every lock then looks the mutex up in
// a global graph of lock order, and every mutex destroyed is taken out of
// it, under one global lock. Kiln's builds turn it off for the whole
// process, as an Abseil built for release has it (a program that embeds
// the client and wants it can turn it back on after Client::Create);
// sanitizer and fuzzer builds (deploy/sanitize.sh, deploy/fuzz.sh) keep
// it. Called by Service::Create and Client::Create; idempotent.
void ConfigureMutexes();

}  // namespace kiln

#endif  // KILN_BASE_MUTEXES_H_
