// Where a model runs: the CPU or a CUDA GPU. One spelling for flags, JSON, projects and reports.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

namespace kvwb::core {

enum class Device
{
    Cpu,
    Cuda
};
// "cpu" | "cuda"; "gpu" is read as cuda.
inline constexpr EnumName<Device> kDeviceNames[] = {
    {Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}, {Device::Cuda, "gpu"}};
KVWB_ENUM_NAMES(Device, kDeviceNames, deviceName, parseDevice)

} // namespace kvwb::core
