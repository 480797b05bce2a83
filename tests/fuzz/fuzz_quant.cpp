// The quantised weight kernels (core/model/quant_kernels.h) on arbitrary blocks: byte 0 picks the
// type, byte 1 the rows (1-4), the rest are the blocks (as many whole rows as fit). Blocks whose
// scales checkScales refuses are skipped, as the engine refuses them at load. Every path this CPU
// runs must give core::dequantize's floats bit for bit, and dot products within 4e-6 of
// sum |x^| max |w| of the portable path's, for one token (dotRows) and, where the path has it,
// for a prompt of two tokens (promptRows: the same activation twice); anything else aborts (a
// finding).
#include "core/model/quant.h"
#include "core/model/quant_kernels.h"
#include "tests/fuzz/fuzz_input.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace kvwb::core;
namespace q = kvwb::core::quant;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                   DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
    if (size < 2)
        return 0;
    const DType t = kTypes[data[0] % 8];
    const int64_t rows = 1 + data[1] % 4;
    const int bb = dtypeBlockBytes(t), be = dtypeBlockElements(t);
    const int64_t blocksPerRow = int64_t(size - 2) / bb / rows;
    if (blocksPerRow == 0)
        return 0;
    const int64_t k = blocksPerRow * be;
    const std::vector<std::byte> w(reinterpret_cast<const std::byte *>(data + 2),
                                   reinterpret_cast<const std::byte *>(data + 2) + rows * blocksPerRow * bb);
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        checkScales(t, w, "fuzz");
        std::vector<float> ref(size_t(rows * k));
        dequantize(t, w, rows * k, ref.data(), "fuzz");
        std::vector<float> x(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i)
            x[size_t(i)] = float((i * 7919) % 257) / 64.0f - 2.0f;
        q::QuantizedActivation xa;
        q::quantizeActivation(x.data(), k, xa);
        std::vector<float> portable(static_cast<size_t>(rows));
        q::dotRows(t, w.data(), 0, rows, xa, portable.data(), q::Isa::Portable);
        for (q::Isa isa : {q::Isa::Portable, q::Isa::Avx2, q::Isa::Avx512}) {
            if (!q::isaSupported(isa))
                continue;
            std::vector<float> rowsOut(size_t(rows * k));
            q::dequantRows(t, w.data(), k, 0, rows, rowsOut.data(), isa);
            if (std::memcmp(rowsOut.data(), ref.data(), rowsOut.size() * 4) != 0)
                std::abort();
            std::vector<float> y(static_cast<size_t>(rows));
            q::dotRows(t, w.data(), 0, rows, xa, y.data(), isa);
            std::vector<float> prompt;
            if (q::hasPromptRows(t, k, isa)) {
                std::vector<float> twice(x);
                twice.insert(twice.end(), x.begin(), x.end());
                q::PromptActivations xs;
                q::quantizePrompt(twice.data(), 2, k, q::promptBlock(t), xs);
                prompt.resize(size_t(2 * rows));
                q::promptRows(t, w.data(), 0, rows, xs, prompt.data(), rows, isa);
            }
            for (int64_t r = 0; r < rows; ++r) {
                double scale = 0, wmax = 0;
                for (int64_t i = 0; i < k; ++i) {
                    scale += std::fabs(q::dequantizedActivation(xa, t, i));
                    wmax = std::max(wmax, double(std::fabs(ref[size_t(r * k + i)])));
                }
                if (!std::isfinite(wmax))
                    continue; // finite f16 scales can still overflow f32 products: nothing to compare
                const double tol = 4e-6 * scale * wmax + 1e-30;
                if (!(std::fabs(double(y[size_t(r)]) - double(portable[size_t(r)])) <= tol))
                    std::abort();
                for (size_t i = 0; i < prompt.size() / size_t(rows); ++i)
                    if (!(std::fabs(double(prompt[i * size_t(rows) + size_t(r)]) -
                                    double(portable[size_t(r)])) <= 2 * tol))
                        std::abort();
            }
        }
    });
}
