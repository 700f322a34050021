#include "runtime/memory.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/buffer.h"

namespace kiln::runtime {
namespace {

constexpr size_t kListedBuffers = 5;

thread_local std::shared_ptr<MemoryAccount> g_account;

}  // namespace

namespace {

absl::Mutex g_releasers_mu(absl::kConstInit);
std::vector<std::function<void()>>* g_releasers ABSL_GUARDED_BY(g_releasers_mu) = nullptr;

}  // namespace

void RegisterMemoryReleaser(std::function<void()> release) {
  absl::MutexLock lock(&g_releasers_mu);
  if (g_releasers == nullptr) g_releasers = new std::vector<std::function<void()>>();
  g_releasers->push_back(std::move(release));
}

void ReleaseCachedMemory() {
  std::vector<std::function<void()>> releasers;
  {
    absl::MutexLock lock(&g_releasers_mu);
    if (g_releasers != nullptr) releasers = *g_releasers;
  }
  for (const auto& release : releasers) release();
}

MemoryAccount::MemoryAccount(std::string name, int64_t limit_bytes, std::string limit_name,
                             std::shared_ptr<MemoryAccount> parent)
    : name_(std::move(name)),
      limit_(limit_bytes),
      limit_name_(std::move(limit_name)),
      parent_(std::move(parent)) {}

absl::Status MemoryAccount::Charge(int64_t bytes, absl::FunctionRef<std::string()> what) {
  int64_t used = in_use_.load();
  do {
    if (bytes < 0 || bytes > limit_ - used) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name_, " is over its memory quota allocating ", bytes, " bytes for ", what(), ": it holds ",
          used, " of its ", limit_, " bytes (", limit_name_, ")"));
    }
  } while (!in_use_.compare_exchange_weak(used, used + bytes));
  if (parent_ != nullptr) {
    if (absl::Status st = parent_->Charge(bytes, what); !st.ok()) {
      in_use_ -= bytes;
      return st;
    }
  }
  int64_t peak = peak_.load();
  while (used + bytes > peak && !peak_.compare_exchange_weak(peak, used + bytes)) {
  }
  return absl::OkStatus();
}

void MemoryAccount::Uncharge(int64_t bytes) {
  in_use_ -= bytes;
  if (parent_ != nullptr) parent_->Uncharge(bytes);
}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    Reset();
    account_ = std::move(other.account_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::Status MemoryCharge::Grow(int64_t bytes, const std::string& what) {
  if (account_ == nullptr || bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(account_->Charge(bytes, what));
  bytes_ += bytes;
  return absl::OkStatus();
}

void MemoryCharge::Reset() {
  if (account_ != nullptr && bytes_ != 0) account_->Uncharge(bytes_);
  bytes_ = 0;
}

AccountScope::AccountScope(std::shared_ptr<MemoryAccount> account)
    : previous_(std::move(g_account)) {
  g_account = std::move(account);
}

AccountScope::~AccountScope() { g_account = std::move(previous_); }

std::shared_ptr<MemoryAccount> AccountScope::Current() { return g_account; }

absl::Status MemoryTracker::Reserve(const Buffer* owner, int64_t bytes) {
  std::shared_ptr<MemoryAccount> account = AccountScope::Current();
  if (account != nullptr) {
    RETURN_IF_ERROR(account->Charge(bytes, [owner] { return owner->shape().ToString(); }));
  }
  absl::MutexLock lock(&mu_);
  if (bytes < 0 || bytes > capacity_ - in_use_) {
    if (account != nullptr) account->Uncharge(bytes);
    // A buffer being destroyed waits in Release for this lock, so every
    // listed owner is still alive here. With an account, only its own
    // buffers are listed.
    std::vector<std::pair<int64_t, const Buffer*>> largest;
    for (const auto& [buffer, charge] : live_) {
      if (account == nullptr || charge.account == account) largest.push_back({charge.bytes, buffer});
    }
    const size_t shown = std::min(kListedBuffers, largest.size());
    std::partial_sort(largest.begin(), largest.begin() + shown, largest.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    const std::string listed =
        account != nullptr ? absl::StrCat("; ", account->name(), "'s largest: ") : "; largest: ";
    std::vector<std::string> names;
    for (size_t i = 0; i < shown; ++i) {
      names.push_back(absl::StrCat(largest[i].second->shape().ToString(), " (",
                                   largest[i].first, " bytes)"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of device memory allocating ", bytes, " bytes for ", owner->shape().ToString(),
        ": ", in_use_, " of ", capacity_, " bytes in use by ", live_.size(), " buffers",
        names.empty() ? "" : absl::StrCat(listed, absl::StrJoin(names, ", "))));
  }
  in_use_ += bytes;
  live_[owner] = {bytes, std::move(account)};
  peak_ = std::max(peak_, in_use_);
  return absl::OkStatus();
}

void MemoryTracker::Release(const Buffer* owner, int64_t bytes) {
  std::shared_ptr<MemoryAccount> account;
  {
    absl::MutexLock lock(&mu_);
    in_use_ -= bytes;
    auto it = live_.find(owner);
    if (it != live_.end()) {
      account = std::move(it->second.account);
      live_.erase(it);
    }
  }
  if (account != nullptr) account->Uncharge(bytes);
}

MemoryStats MemoryTracker::Stats() const {
  absl::MutexLock lock(&mu_);
  return {capacity_, in_use_, peak_, static_cast<int64_t>(live_.size())};
}

}  // namespace kiln::runtime
