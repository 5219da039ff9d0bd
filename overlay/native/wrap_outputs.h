// torch::autograd::_wrap_outputs as torch 2.13.0 exports it (ndvstack's own code): the
// function type and the Itanium-mangled name, for shims that interpose it.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

namespace ndv {

using wrap_outputs_fn = torch::autograd::optional_variable_list (*)(
    const torch::autograd::variable_list& input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    at::ArrayRef<std::optional<torch::autograd::Variable>> raw_outputs,
    const c10::intrusive_ptr<torch::autograd::Node>& cdata,
    const torch::autograd::_jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const torch::autograd::_view_as_self_fn_t& view_as_self_fn,
    bool pure_view);

inline constexpr const char* kWrapOutputs =
    "_ZN5torch8autograd13_wrap_outputsERKSt6vectorIN2at6TensorESaIS3_EERKSt13"
    "unordered_setIPN3c1010TensorImplESt4hashISB_ESt8equal_toISB_ESaISB_EESJ_"
    "NS9_8ArrayRefISt8optionalIS3_EEERKNS9_13intrusive_ptrINS0_4NodeENS9_6deta"
    "il34intrusive_target_default_null_typeISP_EEEERKSt8functionIFS5_S5_S5_EES"
    "J_RKSW_IFS3_S3_EEb";

} // namespace ndv
