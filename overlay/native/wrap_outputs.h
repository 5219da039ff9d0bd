// torch::autograd::_wrap_outputs as torch 2.15.0 exports it (ndvstack's own code): the two
// overloads' function types and Itanium-mangled names, for shims that interpose them. Both
// take a tenth parameter, the node the outputs' history was attached to (upstream's
// `attached_node`). Read with `nm -D --defined-only` on the wheel's libtorch_cpu.so.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

namespace ndv {

// Inputs as a vector: what torch::autograd::Function<T>::apply calls (C++ Functions; inline in
// custom_function.h, so compiled into every extension that defines one, and into libtorch_cpu).
using wrap_outputs_vector_fn = torch::autograd::optional_variable_list (*)(
    const torch::autograd::variable_list& input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    at::ArrayRef<std::optional<torch::autograd::Variable>> raw_outputs,
    const c10::intrusive_ptr<torch::autograd::Node>& cdata,
    const torch::autograd::_jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const torch::autograd::_view_as_self_fn_t& view_as_self_fn,
    bool pure_view,
    c10::intrusive_ptr<torch::autograd::Node>& attached_node);
inline constexpr const char* kWrapOutputsVector =
    "_ZN5torch8autograd13_wrap_outputsERKSt6vectorIN2at6TensorESaIS3_EERKSt13"
    "unordered_setIPN3c1010TensorImplESt4hashISB_ESt8equal_toISB_ESaISB_EESJ_"
    "NS9_8ArrayRefISt8optionalIS3_EEERKNS9_13intrusive_ptrINS0_4NodeENS9_6deta"
    "il34intrusive_target_default_null_typeISP_EEEERKSt8functionIFS5_S5_S5_EES"
    "J_RKSW_IFS3_S3_EEbRST_";

// Inputs as pointers: what Python Functions reach, the only _wrap_outputs
// that 2.15.0's libtorch_python.so imports.
using wrap_outputs_arrayref_fn = torch::autograd::optional_variable_list (*)(
    at::ArrayRef<const torch::autograd::Variable*> input_vars,
    const std::unordered_set<at::TensorImpl*>& non_differentiable,
    const std::unordered_set<at::TensorImpl*>& dirty_inputs,
    at::ArrayRef<std::optional<torch::autograd::Variable>> raw_outputs,
    const c10::intrusive_ptr<torch::autograd::Node>& cdata,
    const torch::autograd::_jvp_fn_t& jvp_user_function,
    const std::unordered_set<at::TensorImpl*>& to_save_if_setup_context,
    const torch::autograd::_view_as_self_fn_t& view_as_self_fn,
    bool pure_view,
    c10::intrusive_ptr<torch::autograd::Node>& attached_node);
inline constexpr const char* kWrapOutputsArrayRef =
    "_ZN5torch8autograd13_wrap_outputsEN3c108ArrayRefIPKN2at6TensorEEERKSt13"
    "unordered_setIPNS1_10TensorImplESt4hashISA_ESt8equal_toISA_ESaISA_EESI_NS"
    "2_ISt8optionalIS4_EEERKNS1_13intrusive_ptrINS0_4NodeENS1_6detail34intrusi"
    "ve_target_default_null_typeISN_EEEERKSt8functionIFSt6vectorIS4_SaIS4_EES"
    "X_SX_EESI_RKSU_IFS4_S4_EEbRSR_";

} // namespace ndv
