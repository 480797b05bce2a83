// The choices a job is set up with, one enum each, shared by the command line, the window's panels
// and the engine (gpu/ uses these same types): where a model runs and in which element type, how a
// converter picks its source layers and which form its maps take, and which signal the cross-model quality
// gate measures. Each has one spelling for flags, JSON, projects and reports (…Name) and its inverse (parse…,
// nullopt for anything else).
//
// Plain values and pure functions; thread-safe.
#pragma once

#include <optional>
#include <string_view>

namespace kvwb::core {

enum class Device
{
    Cpu,
    Cuda
};
const char *deviceName(Device d) noexcept; // "cpu" | "cuda"
std::optional<Device> parseDevice(std::string_view s) noexcept;

enum class ComputeType
{
    F32,
    BF16,
    F16
};
const char *computeTypeName(ComputeType t) noexcept; // "f32" | "bf16" | "f16"
// Also accepts "float32", "bfloat16", "float16".
std::optional<ComputeType> parseComputeType(std::string_view s) noexcept;
int computeTypeBytes(ComputeType t) noexcept; // bytes per element: 4 or 2

// Which signal the cross-model quality gate measures before converted KV is used.
enum class GateSignal
{
    KvCos,  // cosine of converted vs B's own KV on the prompt's tail (higher is better)
    TailKl, // KL of B's next-token distribution from the converted cache vs B's own (lower is better)
    Nll,    // B's negative log-likelihood of the prompt's tail under the converted cache (lower is better)
    AttnCos // cosine of B's attention output on the tail over converted vs own KV (higher is better)
};
// Every signal, in the order flags, menus and the per-signal gate curves list them.
inline constexpr GateSignal kGateSignals[] = {GateSignal::TailKl, GateSignal::KvCos, GateSignal::AttnCos,
                                              GateSignal::Nll};
const char *gateSignalName(GateSignal s) noexcept; // "kv_cos" | "tail_kl" | "nll" | "attn_cos"
std::optional<GateSignal> parseGateSignal(std::string_view name) noexcept;
double defaultGateThreshold(GateSignal s) noexcept; // kv_cos 0.9, tail_kl 0.1, nll 3.0, attn_cos 0.9
// Whether the gate passes at signal >= threshold (the cosines) rather than <= threshold (KL, NLL).
bool gateHigherIsBetter(GateSignal s) noexcept;

// How a converter picks the A layers that feed each B layer.
enum class LayerSelection
{
    Proportional, // depth-proportional, k nearest (k = 1: the layer at the same relative depth)
    TopK,         // top k by single-layer validation R^2
    All           // every captured A layer
};
const char *layerSelectionName(LayerSelection s) noexcept; // "proportional" | "topk" | "all"
std::optional<LayerSelection> parseLayerSelection(std::string_view name) noexcept;

// The form of each map of a converter (core/store/converter_store.h KvMap). Head-matched fitting
// (each B kv head from the same A head only) is a mode of every family, not a family of its own.
enum class ConverterFamily
{
    Ridge,   // y = x W + b, closed-form ridge
    LowRank, // y = (x D) U + b, reduced-rank regression: rank r bounds the mapper's size
    Mlp      // y = x W + b + gelu(x W1 + b1) W2: ridge skip path plus a trained nonlinear branch
};
const char *converterFamilyName(ConverterFamily f) noexcept; // "ridge" | "low_rank" | "mlp"
// Also accepts "low-rank" (the command line's spelling).
std::optional<ConverterFamily> parseConverterFamily(std::string_view name) noexcept;

} // namespace kvwb::core
