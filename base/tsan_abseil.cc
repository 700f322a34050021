// ThreadSanitizer builds only (empty otherwise). Debian's Abseil is built
// without -fsanitize=thread, so ThreadSanitizer cannot see the ordering that
// absl::Mutex, CondVar and Notification establish: every access they guard
// would be reported as a race. These definitions take the place of the
// library's entry points (a program's own definitions come before a shared
// library's), call the library's, and tell ThreadSanitizer what each one
// ordered: taking a lock acquires the mutex's address, giving it up releases
// it. What this cannot show is Abseil's own design of evaluating a waiter's
// Condition on the thread that unlocks (deploy/tsan.supp).
#if defined(__SANITIZE_THREAD__)
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

// The library's definition of `name` (mangled, after "absl::<inline ns>::";
// `konst` for const member functions), as a function taking `this` first.
template <typename F>
F Library(const char* name, bool konst = false) {
  const std::string ns = KILN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string symbol = std::string(konst ? "_ZNK4absl" : "_ZN4absl") +
                             std::to_string(ns.size()) + ns + name;
  void* f = dlsym(RTLD_NEXT, symbol.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_abseil: %s not found in Abseil\n", symbol.c_str());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto lib = Library<void (*)(Mutex*)>("5Mutex4LockEv");
  lib(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const auto lib = Library<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  lib(this);
}

bool Mutex::TryLock() {
  static const auto lib = Library<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = lib(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static const auto lib = Library<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  lib(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static const auto lib = Library<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  lib(this);
}

void Mutex::Await(const Condition& cond) {
  static const auto lib =
      Library<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  lib(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto lib = Library<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = lib(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto lib = Library<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = lib(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto lib =
      Library<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  lib(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto lib = Library<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = lib(this, cond, timeout);
  __tsan_acquire(this);  // held either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto lib = Library<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = lib(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static const auto lib = Library<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  lib(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto lib = Library<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = lib(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto lib = Library<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = lib(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static const auto lib = Library<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(this);
  lib(this);
}

void Notification::WaitForNotification() const {
  static const auto lib = Library<void (*)(const Notification*)>(
      "12Notification19WaitForNotificationEv", /*konst=*/true);
  lib(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static const auto lib = Library<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", /*konst=*/true);
  const bool notified = lib(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
#endif  // __SANITIZE_THREAD__
