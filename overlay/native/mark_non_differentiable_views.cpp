// mark_non_differentiable_views.cpp -- native shim for torch 2.15.0 (ndvstack's own code).
//
// Reproduces the patched upstream behaviour of torch/csrc/autograd/custom_function.cpp
// (the [autograd] patch: a loop at the end of _wrap_outputs_impl, after forward AD): an
// output of a custom autograd Function (Python torch.autograd.Function or C++
// torch::autograd::Function<T>) that was passed to ctx.mark_non_differentiable(), is a
// view, is not one of the Function's inputs returned as-is, and is differentiable (requires
// grad, or has a level-0 forward grad while forward AD is active) is returned as
// var.detach(): same storage and version counter as its base, requires_grad=False,
// grad_fn=None, not a view. A view returned in several places gets one alias. Every other
// output is as stock: a marked view that does not require grad stays that view, and a
// marked input returned as-is is what set_history made of it. Stock 2.15.0 skips views
// (`else if (!var.is_view()) var.detach_();`), so they keep requiring grad.
//
// How: 2.15.0's libtorch_cpu.so exports _wrap_outputs twice, both forwarding to a static
// _wrap_outputs_impl template: inputs as `const variable_list&` (C++ Functions, from the
// inline Function<T>::apply in custom_function.h) and as `ArrayRef<const Variable*>`
// (Python Functions: the only one libtorch_python.so imports). This file defines both with
// the exact 2.15.0 signatures. Loaded with RTLD_GLOBAL before libtorch's callers bind them,
// it wins their symbol lookup; each calls its original (dlsym(RTLD_NEXT)) and then, every
// output's history and forward grad being set, applies the patch's loop.
#include <atomic>
#include <unordered_map>

#include <c10/core/AutogradState.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/irange.h>
#include <torch/csrc/autograd/forward_grad.h>

#include "ndv_shim_support.h"
#include "wrap_outputs.h"

namespace {
using torch::autograd::optional_variable_list;
using torch::autograd::Variable;

std::atomic<long> g_vector_calls{0};
std::atomic<long> g_arrayref_calls{0};

// As custom_function.cpp's (static there).
bool is_forward_ad_active() {
  return torch::autograd::ForwardADLevel::has_any_level() &&
      c10::AutogradState::get_tls_state().get_fw_grad_mode();
}

const Variable& input_at(const torch::autograd::variable_list& inputs, size_t i) {
  return inputs[i];
}

const Variable& input_at(at::ArrayRef<const Variable*> inputs, size_t i) {
  return *inputs[i];
}

// _wrap_outputs_impl's inputs_mapping: the defined inputs, by TensorImpl.
template <typename InputVarsType>
std::unordered_map<at::TensorImpl*, size_t> inputs_mapping_of(const InputVarsType& input_vars) {
  std::unordered_map<at::TensorImpl*, size_t> inputs_mapping;
  inputs_mapping.reserve(input_vars.size());
  for (const auto i : c10::irange(input_vars.size())) {
    const auto& input_var = input_at(input_vars, i);
    if (input_var.defined()) {
      inputs_mapping.emplace(input_var.unsafeGetTensorImpl(), i);
    }
  }
  return inputs_mapping;
}

// The [autograd] patch's _detach_non_differentiable_views(), exactly.
void detach_non_differentiable_views(
    const std::unordered_map<at::TensorImpl*, size_t>& inputs_mapping,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const at::ArrayRef<std::optional<Variable>> raw_outputs,
    optional_variable_list& outputs) {
  if (c10::impl::TorchDispatchModeTLS::get_mode(
          c10::impl::TorchDispatchModeKey::FUNCTIONAL)
          .has_value() ||
      c10::impl::TorchDispatchModeTLS::get_mode(
          c10::impl::TorchDispatchModeKey::FAKE)
          .has_value()) {
    return;
  }
  for (const auto i : c10::irange(outputs.size())) {
    auto& out = outputs[i];
    if (!out.has_value() || !out->is_view()) {
      continue;
    }
    auto* out_tensor_impl = raw_outputs[i]->unsafeGetTensorImpl();
    if (!non_differentiable.contains(out_tensor_impl) ||
        inputs_mapping.contains(out_tensor_impl)) {
      continue;
    }
    if (!out->requires_grad() &&
        !(is_forward_ad_active() && out->_fw_grad(/*level=*/0).defined())) {
      continue;
    }
    size_t first = 0;
    while (!(raw_outputs[first].has_value() &&
             raw_outputs[first]->unsafeGetTensorImpl() == out_tensor_impl)) {
      ++first;
    }
    if (first < i) {
      out = outputs[first];
    } else {
      out = out->detach();
    }
  }
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
    bool pure_view,
    c10::intrusive_ptr<Node>& attached_node) {
  ++g_vector_calls;
  static auto original = reinterpret_cast<ndv::wrap_outputs_vector_fn>(
      ndv::original(ndv::kWrapOutputsVector));
  auto outputs = original(
      input_vars, non_differentiable, dirty_inputs, raw_outputs, cdata,
      jvp_user_function, to_save_if_setup_context, view_as_self_fn, pure_view,
      attached_node);
  if (!non_differentiable.empty()) {
    detach_non_differentiable_views(inputs_mapping_of(input_vars), non_differentiable, raw_outputs, outputs);
  }
  return outputs;
}

optional_variable_list _wrap_outputs(
    at::ArrayRef<const Variable*> input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    const at::ArrayRef<std::optional<Variable>> raw_outputs,
    const c10::intrusive_ptr<Node>& cdata,
    const _jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const _view_as_self_fn_t& view_as_self_fn,
    bool pure_view,
    c10::intrusive_ptr<Node>& attached_node) {
  ++g_arrayref_calls;
  static auto original = reinterpret_cast<ndv::wrap_outputs_arrayref_fn>(
      ndv::original(ndv::kWrapOutputsArrayRef));
  auto outputs = original(
      input_vars, non_differentiable, dirty_inputs, raw_outputs, cdata,
      jvp_user_function, to_save_if_setup_context, view_as_self_fn, pure_view,
      attached_node);
  if (!non_differentiable.empty()) {
    detach_non_differentiable_views(inputs_mapping_of(input_vars), non_differentiable, raw_outputs, outputs);
  }
  return outputs;
}
} // namespace torch::autograd

// Times _wrap_outputs went through the shim, both overloads together and each: proof that
// torch calls this copy on each path.
extern "C" long ndv_shim_calls() {
  return g_vector_calls.load() + g_arrayref_calls.load();
}
extern "C" long ndv_shim_calls_vector() {
  return g_vector_calls.load();
}
extern "C" long ndv_shim_calls_arrayref() {
  return g_arrayref_calls.load();
}
