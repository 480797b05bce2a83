#include "gpu/model/device.h"

#include "core/util/error.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstring>
#include <thread>

namespace kvwb::gpu {

bool cudaAvailable()
{
    try {
        return torch::cuda::is_available();
    } catch (const c10::Error &) {
        return false;
    }
}

void checkDeviceSupport(Device d, FloatType t)
{
    if (d == Device::Cuda && !cudaAvailable()) {
        throw core::Error(core::ErrorCode::Device,
                          "CUDA requested but not usable: the linked LibTorch " + torchVersion() +
                              (torch::cuda::device_count() == 0
                                   ? " sees no CUDA device (or was built without CUDA)"
                                   : " cannot initialise CUDA") +
                              "; run it on the CPU instead");
    }
    if (d == Device::Cpu && t == FloatType::F16) {
        throw core::Error(core::ErrorCode::Device, "f16 is only supported on CUDA (CPU half matmuls are "
                                                   "emulated and slow); use bf16 or f32 on the CPU");
    }
}

std::string describeDevice(Device d)
{
    if (d == Device::Cuda && cudaAvailable())
        return fmt::format("cuda ({} device(s))", torch::cuda::device_count());
    const std::string blas = blasCore();
    return fmt::format("cpu ({} threads of {} cores{})", at::get_num_threads(),
                       std::thread::hardware_concurrency(),
                       blas.empty() ? std::string() : ", OpenBLAS " + blas);
}

std::string torchVersion()
{
    return TORCH_VERSION;
}

std::string blasCore()
{
    using CoreName = char *(*)();
    static const auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char *core = name ? name() : nullptr;
    return core ? std::string(core) : std::string();
}

std::string blasCoreOverride()
{
#if defined(__x86_64__) && defined(__GNUC__)
    const std::string core = blasCore();
    // OpenBLAS's generic x86-64 families, older than AVX2
    static const char *const generic[] = {"Prescott",    "Core2", "Penryn", "Dunnington", "Nehalem",
                                          "Sandybridge", "Atom",  "Katmai", "Northwood",  "Banias"};
    bool isGeneric = false;
    for (const char *g : generic)
        isGeneric = isGeneric || strcasecmp(core.c_str(), g) == 0;
    if (!isGeneric)
        return {};
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512cd");
    if (avx512)
        return __builtin_cpu_supports("avx512bf16") ? "COOPERLAKE" : "SKYLAKEX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "HASWELL";
#endif
    return {};
}

} // namespace kvwb::gpu
