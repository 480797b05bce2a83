#include "gpu/model/device.h"

#include "core/util/error.h"

#include <torch/torch.h>

#include <fmt/format.h>
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

void checkDeviceSupport(Device d, ComputeType t)
{
    if (d == Device::Cuda && !cudaAvailable()) {
        throw core::Error(core::ErrorCode::Device,
                          "CUDA requested but not usable: the linked LibTorch " + torchVersion() +
                              (torch::cuda::device_count() == 0
                                   ? " sees no CUDA device (or was built without CUDA)"
                                   : " cannot initialise CUDA") +
                              "; run it on the CPU instead");
    }
    if (d == Device::Cpu && t == ComputeType::F16) {
        throw core::Error(core::ErrorCode::Device, "f16 is only supported on CUDA (CPU half matmuls are "
                                                   "emulated and slow); use bf16 or f32 on the CPU");
    }
}

std::string describeDevice(Device d)
{
    if (d == Device::Cuda && cudaAvailable())
        return fmt::format("cuda ({} device(s))", torch::cuda::device_count());
    return fmt::format("cpu ({} threads of {} cores)", at::get_num_threads(),
                       std::thread::hardware_concurrency());
}

std::string torchVersion()
{
    return TORCH_VERSION;
}

} // namespace kvwb::gpu
