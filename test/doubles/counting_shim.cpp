// A test double of a native shim (not a fix): interposes both overloads of torch 2.15.0's
// torch::autograd::_wrap_outputs like the real shim does, changes nothing, and counts its
// calls so tests can see that torch calls it.
#include <atomic>

#include "ndv_shim_support.h"
#include "wrap_outputs.h"

namespace {
std::atomic<long> g_calls{0};
} // namespace

namespace torch::autograd {
optional_variable_list _wrap_outputs(
    const variable_list& input_vars, const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    const at::ArrayRef<std::optional<Variable>> raw_outputs, const c10::intrusive_ptr<Node>& cdata,
    const _jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const _view_as_self_fn_t& view_as_self_fn, bool pure_view, c10::intrusive_ptr<Node>& attached_node) {
  ++g_calls;
  static auto original =
      reinterpret_cast<ndv::wrap_outputs_vector_fn>(ndv::original(ndv::kWrapOutputsVector));
  return original(input_vars, non_differentiable, dirty_inputs, raw_outputs, cdata, jvp_user_function,
                  to_save_if_setup_context, view_as_self_fn, pure_view, attached_node);
}

optional_variable_list _wrap_outputs(
    at::ArrayRef<const Variable*> input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    const at::ArrayRef<std::optional<Variable>> raw_outputs, const c10::intrusive_ptr<Node>& cdata,
    const _jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const _view_as_self_fn_t& view_as_self_fn, bool pure_view, c10::intrusive_ptr<Node>& attached_node) {
  ++g_calls;
  static auto original =
      reinterpret_cast<ndv::wrap_outputs_arrayref_fn>(ndv::original(ndv::kWrapOutputsArrayRef));
  return original(input_vars, non_differentiable, dirty_inputs, raw_outputs, cdata, jvp_user_function,
                  to_save_if_setup_context, view_as_self_fn, pure_view, attached_node);
}
} // namespace torch::autograd

extern "C" long ndv_shim_calls() {
  return g_calls.load();
}
