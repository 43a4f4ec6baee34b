// Provenance of a calibration run: the `# key=value` lines (the HDF5 root attributes of
// calibrate/README.md) and the GPU profile name guessed from the driver's device name.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hetsim::calibrate::cuda {

// "NVIDIA H200" -> "h200-sxm-141gb", "NVIDIA A100-SXM4-80GB" -> "a100-sxm4-80gb", ...; a name
// not in the table becomes its lowercase form with "nvidia " dropped and spaces as '-'.
std::string device_type_from_name(const std::string& device_name);

// backend, device_name, device_type, driver, cuda_version, cublas_version, nccl_version,
// cudnn_version, host, date, clocks, attention_impl, gpus_in_node.
std::vector<std::pair<std::string, std::string>> collect_provenance(int device);

// nccl_version and cudnn_version of the libraries this build loaded ("" for one built without):
// needs no GPU, so the dry run records them too.
std::vector<std::pair<std::string, std::string>> library_provenance();

}  // namespace hetsim::calibrate::cuda
