// mark_non_differentiable_views.cpp -- native shim for torch 2.13.0 (ndvstack's own code).
//
// Reproduces the patched upstream behaviour of
// torch/csrc/autograd/custom_function.cpp (a loop added at the end of
// _wrap_outputs, after _process_backward_mode_ad and forward AD): an output
// of a custom autograd Function (Python torch.autograd.Function or C++
// torch::autograd::Function<T>) that was passed to
// ctx.mark_non_differentiable() and is a view is returned as an out-of-place
// detached alias (var.detach(): same storage and version counter as its base,
// requires_grad=False, grad_fn=None, no forward-mode tangent at any level, not
// a view), whether or not it required grad; a view returned in more than one
// place gets one alias. The one exception is an input marked dirty and
// returned as-is: it is the input itself (or, if it required grad, already a
// detached alias of it). Stock 2.13.0 skips views (`else if
// (!var.is_view()) var.detach_();`), so they keep requiring grad.
//
// How: this file defines torch::autograd::_wrap_outputs with the exact 2.13.0
// signature. Loaded ahead of libtorch_cpu.so (LD_PRELOAD, or ctypes.CDLL with
// RTLD_GLOBAL before `import torch`), it wins the symbol lookup of every
// caller (libtorch_python.so, C++ extensions, libtorch_cpu.so itself all call
// it through the PLT). It calls the original (found with dlsym(RTLD_NEXT)) and
// then, once every output's history is set, replaces each marked view.
// Unmarked views are never touched, so an unmarked view returned under no_grad
// keeps requiring grad as today.
#include <atomic>

#include "ndv_shim_support.h"
#include "wrap_outputs.h"

namespace {
std::atomic<long> g_calls{0};

ndv::wrap_outputs_fn original() {
  static auto fn = reinterpret_cast<ndv::wrap_outputs_fn>(ndv::original(ndv::kWrapOutputs));
  return fn;
}
} // namespace

namespace torch::autograd {
optional_variable_list _wrap_outputs(
    const variable_list& input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    const at::ArrayRef<std::optional<Variable>> raw_outputs,
    const c10::intrusive_ptr<Node>& cdata,
    const _jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const _view_as_self_fn_t& view_as_self_fn,
    bool pure_view) {
  ++g_calls;
  auto outputs = original()(
      input_vars,
      non_differentiable,
      dirty_inputs,
      raw_outputs,
      cdata,
      jvp_user_function,
      to_save_if_setup_context,
      view_as_self_fn,
      pure_view);
  // Same loop as the upstream fix (end of _wrap_outputs, after forward AD):
  // every output's history and forward grad are set by now, so the result no
  // longer depends on the order in which a marked view and its base were
  // returned.
  for (const auto i : c10::irange(outputs.size())) {
    auto& out = outputs[i];
    if (!out.has_value() || !out->is_view()) {
      continue;
    }
    auto* out_tensor_impl = raw_outputs[i]->unsafeGetTensorImpl();
    if (non_differentiable.count(out_tensor_impl) == 0 ||
        dirty_inputs.count(out_tensor_impl) > 0) {
      continue;
    }
    // A view returned more than once gets one alias, as it was one tensor.
    size_t first = 0;
    while (first < i &&
           !(raw_outputs[first].has_value() &&
             raw_outputs[first]->unsafeGetTensorImpl() == out_tensor_impl)) {
      ++first;
    }
    if (first < i) {
      out = outputs[first];
    } else {
      out = out->detach();
    }
  }
  return outputs;
}
} // namespace torch::autograd

// Times _wrap_outputs went through the shim: proof that torch calls this copy.
extern "C" long ndv_shim_calls() {
  return g_calls.load();
}
