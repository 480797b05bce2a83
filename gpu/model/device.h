// Compute devices and element types the engine can run on, and what the linked LibTorch offers.
//
// Torch-free header. Thread-safety: all functions may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvwb::gpu {

enum class Device
{
    Cpu,
    Cuda
};
enum class ComputeType
{
    F32,
    BF16,
    F16
};

const char *deviceName(Device d) noexcept;           // "cpu" | "cuda"
const char *computeTypeName(ComputeType t) noexcept; // "f32" | "bf16" | "f16"
std::optional<Device> parseDevice(std::string_view s) noexcept;
std::optional<ComputeType> parseComputeType(std::string_view s) noexcept;
int computeTypeBytes(ComputeType t) noexcept;

// True when the linked LibTorch was built with CUDA and a GPU is visible.
bool cudaAvailable();
// Error(Device) with the reason when the pair cannot be used (no CUDA build, no GPU, f16 on CPU).
void checkDeviceSupport(Device d, ComputeType t);
// "cpu (2 threads)" or "cuda:0 NVIDIA H200 (139 GiB)".
std::string describeDevice(Device d);
std::string torchVersion();

} // namespace kvwb::gpu
