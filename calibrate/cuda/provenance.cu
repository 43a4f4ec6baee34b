// Provenance lines: library versions, host, date, clocks, and the device-name table.
#include "provenance.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <fstream>
#include <sstream>

#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef HETSIM_CALIBRATE_NCCL
#include <nccl.h>
#endif

#include "check.h"
#ifdef HETSIM_CALIBRATE_CUDNN
#include "cudnn_sdpa.h"
#endif

namespace hetsim::calibrate::cuda {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// "12080" (CUDA's encoding: 1000*major + 10*minor) -> "12.8"
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The kernel driver's version from /proc (Linux); the CUDA driver API version otherwise.
std::string driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (in && std::getline(in, line)) {
    std::istringstream words(line);
    std::string word, previous;
    while (words >> word) {
      if (previous == "Kernel" && word == "Module") {
        // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ..."
        std::string version;
        if (words >> version) return version;
      }
      previous = word;
    }
  }
  int v = 0;
  CHECK_CUDA(cudaDriverGetVersion(&v));
  return "cuda-driver-api-" + cuda_version_string(v);
}
}  // namespace

std::string device_type_from_name(const std::string& device_name) {
  const std::string n = lower(device_name);
  // Order matters: the more specific pattern first. Names are those the driver reports.
  struct Pattern {
    const char* first;
    const char* second;
    const char* profile;
  };
  static const Pattern table[] = {
      {"h200", "nvl", "h200-nvl-141gb"},
      {"h200", "", "h200-sxm-141gb"},
      {"h100", "pcie", "h100-pcie-80gb"},
      {"h100", "nvl", "h100-nvl-94gb"},
      {"h100", "hbm3", "h100-sxm5-80gb"},
      {"h100", "sxm", "h100-sxm5-80gb"},
      {"a100", "sxm4-80gb", "a100-sxm4-80gb"},
      {"a100", "sxm4-40gb", "a100-sxm4-40gb"},
      {"a100", "pcie", "a100-pcie-80gb"},
      {"a100", "80gb", "a100-sxm4-80gb"},
      {"a100", "", ""},
      {"b200", "", "b200"},
      {"l40s", "", "l40s"},
      {"l40", "", ""},
      {"rtx 4090", "", "rtx-4090"},
      {"rtx 3090", "", "rtx-3090"},
      {"nvidia a40", "", "a40"},
      {"nvidia a10", "", "a10"},
      {" l4", "", "l4"},
      {" t4", "", "t4"},
  };
  for (const Pattern& p : table) {
    if (!contains(n, p.first) || !contains(n, p.second)) continue;
    if (p.profile[0] == '\0') break;  // a family without a safe guess: use the name itself
    // A PCIe A100 with 40 GB is its own profile.
    if (std::string(p.profile) == "a100-pcie-80gb" && contains(n, "40gb")) return "a100-pcie-40gb";
    return p.profile;
  }
  std::string fallback = n;
  if (fallback.rfind("nvidia ", 0) == 0) fallback = fallback.substr(7);
  std::replace(fallback.begin(), fallback.end(), ' ', '-');
  return fallback;
}

std::vector<std::pair<std::string, std::string>> library_provenance() {
  int nccl = 0;  // 0: built without NCCL (no collectives measured), written as ""
#ifdef HETSIM_CALIBRATE_NCCL
  CHECK_NCCL(ncclGetVersion(&nccl));
#endif
  std::ostringstream nccl_s;  // 2.x encoding since 2.9: major*10000 + minor*100 + patch
  if (nccl != 0) nccl_s << nccl / 10000 << '.' << (nccl / 100) % 100 << '.' << nccl % 100;
  return {
      {"nccl_version", nccl_s.str()},
#ifdef HETSIM_CALIBRATE_CUDNN
      {"cudnn_version", cudnn_version_string()},
#else
      {"cudnn_version", ""},  // built without cuDNN: attention is unfused
#endif
  };
}

std::vector<std::pair<std::string, std::string>> collect_provenance(int device) {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  int runtime = 0;
  CHECK_CUDA(cudaRuntimeGetVersion(&runtime));
  int sm_khz = 0, mem_khz = 0, gpus = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  CHECK_CUDA(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  CHECK_CUDA(cudaGetDeviceCount(&gpus));

  const std::size_t cublas = cublasLtGetVersion();  // major*10000 + minor*100 + patch
  std::ostringstream cublas_s;
  cublas_s << cublas / 10000 << '.' << (cublas / 100) % 100 << '.' << cublas % 100;

  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);

  std::ostringstream clocks;
  clocks << "sm " << sm_khz / 1000 << " MHz (peak), memory " << mem_khz / 1000 << " MHz (peak); cc "
         << prop.major << '.' << prop.minor << ", " << prop.multiProcessorCount << " SMs";

  std::vector<std::pair<std::string, std::string>> lines = {
      {"backend", "cuda"},
      {"device_name", prop.name},
      {"device_type", device_type_from_name(prop.name)},
      {"driver", driver_version()},
      {"cuda_version", cuda_version_string(runtime)},
      {"cublas_version", cublas_s.str()},
      {"blas", ""},
      {"mpi", ""},
      {"host", host},
      {"date", date},
      {"clocks", clocks.str()},
      {"attention_impl",
       "cudnn fused SDPA (backend graph API) where supported, else unfused cuBLASLt QK^T/PV + "
       "hetsim softmax; per point in the name column"},
      {"gpus_in_node", std::to_string(gpus)},
  };
  for (const auto& line : library_provenance()) lines.push_back(line);
  return lines;
}

}  // namespace hetsim::calibrate::cuda
