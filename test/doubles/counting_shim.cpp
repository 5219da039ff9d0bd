// A test double of a native shim (not a fix): interposes torch::autograd::_wrap_outputs
// like the real shims do, changes nothing, and counts its calls so tests can see that
// torch calls it.
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

#include "ndv_shim_support.h"

namespace {
using ImplSet = std::unordered_set<at::TensorImpl*>;
using torch::autograd::Variable;
using wrap_outputs_fn = torch::autograd::optional_variable_list (*)(
    const torch::autograd::variable_list&, const ImplSet&, const ImplSet&,
    at::ArrayRef<std::optional<Variable>>, const c10::intrusive_ptr<torch::autograd::Node>&,
    const torch::autograd::_jvp_fn_t&, const ImplSet&,
    const torch::autograd::_view_as_self_fn_t&, bool);

const char* const kWrapOutputs =
    "_ZN5torch8autograd13_wrap_outputsERKSt6vectorIN2at6TensorESaIS3_EERKSt13"
    "unordered_setIPN3c1010TensorImplESt4hashISB_ESt8equal_toISB_ESaISB_EESJ_"
    "NS9_8ArrayRefISt8optionalIS3_EEERKNS9_13intrusive_ptrINS0_4NodeENS9_6deta"
    "il34intrusive_target_default_null_typeISP_EEEERKSt8functionIFS5_S5_S5_EES"
    "J_RKSW_IFS3_S3_EEb";

std::atomic<long> g_calls{0};
} // namespace

namespace torch::autograd {
optional_variable_list _wrap_outputs(
    const variable_list& input_vars, const ImplSet& non_differentiable,
    const ImplSet& dirty_inputs, const at::ArrayRef<std::optional<Variable>> raw_outputs,
    const c10::intrusive_ptr<Node>& cdata, const _jvp_fn_t& jvp_user_function,
    const ImplSet& to_save_if_setup_context, const _view_as_self_fn_t& view_as_self_fn,
    bool pure_view) {
  ++g_calls;
  static auto original = reinterpret_cast<wrap_outputs_fn>(ndv::original(kWrapOutputs));
  return original(input_vars, non_differentiable, dirty_inputs, raw_outputs, cdata,
                  jvp_user_function, to_save_if_setup_context, view_as_self_fn, pure_view);
}
} // namespace torch::autograd

extern "C" long ndv_shim_calls() {
  return g_calls.load();
}
