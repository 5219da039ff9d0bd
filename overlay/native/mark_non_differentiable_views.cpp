// mark_non_differentiable_views.cpp -- native shim for torch 2.13.0 (ndvstack's own code).
//
// Reproduces the patched upstream behaviour of
// torch/csrc/autograd/custom_function.cpp (a loop added at the end of
// _wrap_outputs, after _process_backward_mode_ad and forward AD): an output
// of a custom autograd Function (Python torch.autograd.Function or C++
// torch::autograd::Function<T>) that was passed to
// ctx.mark_non_differentiable() and is a view is returned as an out-of-place
// detached alias (var.detach(): same storage and version counter as its base,
// requires_grad=False, grad_fn=None, no forward-mode tangent). Stock 2.13.0
// skips views (`else if (!var.is_view()) var.detach_();`), so they keep
// requiring grad.
//
// How: this file defines torch::autograd::_wrap_outputs with the exact 2.13.0
// signature. Loaded ahead of libtorch_cpu.so (LD_PRELOAD, or ctypes.CDLL with
// RTLD_GLOBAL before `import torch`), it wins the symbol lookup of every
// caller (libtorch_python.so, C++ extensions, libtorch_cpu.so itself all call
// it through the PLT). It calls the original (found with dlsym(RTLD_NEXT)) and
// then, once every output's history is set, replaces each marked view that
// still requires grad (or carries a forward-mode tangent through its base).
// Unmarked views are never touched, so an unmarked view returned under no_grad
// keeps requiring grad as today.
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

#include "ndv_shim_support.h"

namespace {
using torch::autograd::_jvp_fn_t;
using torch::autograd::_view_as_self_fn_t;
using torch::autograd::Node;
using torch::autograd::optional_variable_list;
using torch::autograd::Variable;
using torch::autograd::variable_list;
using ImplSet = std::unordered_set<at::TensorImpl*>;

using wrap_outputs_fn = optional_variable_list (*)(
    const variable_list&,
    const ImplSet&,
    const ImplSet&,
    at::ArrayRef<std::optional<Variable>>,
    const c10::intrusive_ptr<Node>&,
    const _jvp_fn_t&,
    const ImplSet&,
    const _view_as_self_fn_t&,
    bool);

// Itanium-mangled name of torch::autograd::_wrap_outputs in torch 2.13.0.
const char* const kWrapOutputs =
    "_ZN5torch8autograd13_wrap_outputsERKSt6vectorIN2at6TensorESaIS3_EERKSt13"
    "unordered_setIPN3c1010TensorImplESt4hashISB_ESt8equal_toISB_ESaISB_EESJ_"
    "NS9_8ArrayRefISt8optionalIS3_EEERKNS9_13intrusive_ptrINS0_4NodeENS9_6deta"
    "il34intrusive_target_default_null_typeISP_EEEERKSt8functionIFS5_S5_S5_EES"
    "J_RKSW_IFS3_S3_EEb";

std::atomic<long> g_calls{0};

wrap_outputs_fn original() {
  static wrap_outputs_fn fn = [] {
    return reinterpret_cast<wrap_outputs_fn>(ndv::original(kWrapOutputs));
  }();
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
  // every output's history and forward grad are set by now, so whether a
  // marked view requires grad no longer depends on the order in which it
  // and its base were returned.
  for (const auto i : c10::irange(outputs.size())) {
    auto& out = outputs[i];
    if (out.has_value() && out->is_view() &&
        non_differentiable.count(raw_outputs[i]->unsafeGetTensorImpl()) > 0 &&
        (out->requires_grad() || out->_fw_grad(/*level=*/0).defined())) {
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
