// Compute devices and element types the engine can run on, and what the linked LibTorch offers.
//
// Torch-free header. Thread-safety: all functions may be called from any thread.
#pragma once

#include "core/model/device.h"
#include "core/model/dtype.h"

#include <optional>
#include <string>
#include <string_view>

namespace kvwb::gpu {

// Devices and element types are core's (core/model/device.h, core/model/dtype.h), so the window and the
// command line pass the same enums the engine runs with.
using core::Device;
using core::deviceName;
using core::FloatType;
using core::floatTypeBytes;
using core::floatTypeName;
using core::parseDevice;
using core::parseFloatType;

// True when the linked LibTorch was built with CUDA and a GPU is visible.
bool cudaAvailable();
// Error(Device) with the reason when the pair cannot be used (no CUDA build, no GPU, f16 on CPU).
void checkDeviceSupport(Device d, FloatType t);
// "cpu (2 threads)" or "cuda:0 NVIDIA H200 (139 GiB)".
std::string describeDevice(Device d);
std::string torchVersion();

// The kernel family of the linked BLAS when it is OpenBLAS ("Cooperlake", "Haswell", ...; looked up
// at run time), else empty.
std::string blasCore();
// The OPENBLAS_CORETYPE this CPU should run when OpenBLAS chose generic kernels for it, else empty.
// OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than itself (Emerald Rapids, say) and falls
// back to its SSE3 "Prescott" kernels there: f32 prefill ran at a third of llama.cpp's speed. Its
// AVX-512 (SkylakeX, Cooperlake with BF16) or AVX2 (Haswell) kernels are what such a CPU runs. Only
// takes effect in a process started with the variable set (OpenBLAS reads it when it is loaded).
std::string blasCoreOverride();

} // namespace kvwb::gpu
