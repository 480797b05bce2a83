// Compute devices and element types the engine can run on, and what the linked LibTorch offers.
//
// Torch-free header. Thread-safety: all functions may be called from any thread.
#pragma once

#include "core/jobs/job_enums.h"

#include <optional>
#include <string>
#include <string_view>

namespace kvwb::gpu {

// Devices and element types are core's (core/jobs/job_enums.h), so the window and the command line
// pass the same enums the engine runs with.
using core::ComputeType;
using core::computeTypeBytes;
using core::computeTypeName;
using core::Device;
using core::deviceName;
using core::parseComputeType;
using core::parseDevice;

// True when the linked LibTorch was built with CUDA and a GPU is visible.
bool cudaAvailable();
// Error(Device) with the reason when the pair cannot be used (no CUDA build, no GPU, f16 on CPU).
void checkDeviceSupport(Device d, ComputeType t);
// "cpu (2 threads)" or "cuda:0 NVIDIA H200 (139 GiB)".
std::string describeDevice(Device d);
std::string torchVersion();

} // namespace kvwb::gpu
