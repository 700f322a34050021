#include "runtime/host/cancel.h"

namespace kiln::host {
namespace {

thread_local const runtime::CancelCheck* g_check = nullptr;

}  // namespace

CancelScope::CancelScope(const runtime::CancelCheck* check) : previous_(g_check) {
  g_check = check;
}

CancelScope::~CancelScope() { g_check = previous_; }

bool Cancelled() { return g_check != nullptr && *g_check && (*g_check)(); }

}  // namespace kiln::host
