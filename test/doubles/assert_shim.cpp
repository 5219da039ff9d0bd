// A test double of a native shim (not a fix), with no torch headers so that it compiles in
// a second: interposes at::globalContext(), changes nothing, and holds an assert, whose
// message names its source file (__FILE__) the way the real shims' checks do: a wheel is
// reproducible only if that name does not depend on where the clone is.
#include <cassert>

#include "ndv_shim_support.h"

namespace at {
class Context;

Context& globalContext() {
  using fn = Context& (*)();
  static auto original = reinterpret_cast<fn>(ndv::original("_ZN2at13globalContextEv"));
  assert(original != nullptr);
  return original();
}
} // namespace at
