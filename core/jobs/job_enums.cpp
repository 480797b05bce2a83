#include "core/jobs/job_enums.h"

namespace kvwb::core {

const char *deviceName(Device d) noexcept
{
    return d == Device::Cuda ? "cuda" : "cpu";
}

const char *computeTypeName(ComputeType t) noexcept
{
    switch (t) {
    case ComputeType::F32:
        return "f32";
    case ComputeType::BF16:
        return "bf16";
    case ComputeType::F16:
        return "f16";
    }
    return "?";
}

std::optional<Device> parseDevice(std::string_view s) noexcept
{
    if (s == "cpu")
        return Device::Cpu;
    if (s == "cuda" || s == "gpu")
        return Device::Cuda;
    return std::nullopt;
}

std::optional<ComputeType> parseComputeType(std::string_view s) noexcept
{
    if (s == "f32" || s == "float32")
        return ComputeType::F32;
    if (s == "bf16" || s == "bfloat16")
        return ComputeType::BF16;
    if (s == "f16" || s == "float16")
        return ComputeType::F16;
    return std::nullopt;
}

int computeTypeBytes(ComputeType t) noexcept
{
    return t == ComputeType::F32 ? 4 : 2;
}

const char *gateSignalName(GateSignal s) noexcept
{
    switch (s) {
    case GateSignal::KvCos:
        return "kv_cos";
    case GateSignal::TailKl:
        return "tail_kl";
    case GateSignal::Nll:
        return "nll";
    case GateSignal::AttnCos:
        return "attn_cos";
    }
    return "?";
}

std::optional<GateSignal> parseGateSignal(std::string_view name) noexcept
{
    for (GateSignal s : kGateSignals)
        if (name == gateSignalName(s))
            return s;
    return std::nullopt;
}

double defaultGateThreshold(GateSignal s) noexcept
{
    switch (s) {
    case GateSignal::KvCos:
    case GateSignal::AttnCos:
        return 0.9;
    case GateSignal::TailKl:
        return 0.1;
    case GateSignal::Nll:
        return 3.0;
    }
    return 0.1;
}

bool gateHigherIsBetter(GateSignal s) noexcept
{
    return s == GateSignal::KvCos || s == GateSignal::AttnCos;
}

const char *layerSelectionName(LayerSelection s) noexcept
{
    switch (s) {
    case LayerSelection::Proportional:
        return "proportional";
    case LayerSelection::TopK:
        return "topk";
    case LayerSelection::All:
        return "all";
    }
    return "?";
}

std::optional<LayerSelection> parseLayerSelection(std::string_view name) noexcept
{
    for (LayerSelection s : {LayerSelection::Proportional, LayerSelection::TopK, LayerSelection::All})
        if (name == layerSelectionName(s))
            return s;
    return std::nullopt;
}

const char *converterFamilyName(ConverterFamily f) noexcept
{
    switch (f) {
    case ConverterFamily::Ridge:
        return "ridge";
    case ConverterFamily::LowRank:
        return "low_rank";
    case ConverterFamily::Mlp:
        return "mlp";
    }
    return "?";
}

std::optional<ConverterFamily> parseConverterFamily(std::string_view name) noexcept
{
    if (name == "ridge")
        return ConverterFamily::Ridge;
    if (name == "low_rank" || name == "low-rank")
        return ConverterFamily::LowRank;
    if (name == "mlp")
        return ConverterFamily::Mlp;
    return std::nullopt;
}

} // namespace kvwb::core
