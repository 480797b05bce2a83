// What the decoder (model.cpp) and the sentence encoder (encoder.cpp) share: torch dtypes of kvwb's
// compute and weight types, and the scope that sets a job's threads and inference mode.
#pragma once

#include "core/model/dtype.h"
#include "core/util/error.h"
#include "gpu/model/device.h"
#include "gpu/src/model/cpu_kernels_p.h"

#include <malloc.h>

#include <algorithm>
#include <string>
#include <thread>

namespace kvwb::gpu::detail {

using core::Error;
using core::ErrorCode;

inline torch::Dtype torchType(FloatType t)
{
    switch (t) {
    case FloatType::F32:
        return torch::kFloat32;
    case FloatType::BF16:
        return torch::kBFloat16;
    case FloatType::F16:
        return torch::kFloat16;
    }
    return torch::kFloat32;
}

inline torch::Dtype torchType(core::DType t)
{
    switch (t) {
    case core::DType::F32:
        return torch::kFloat32;
    case core::DType::F16:
        return torch::kFloat16;
    case core::DType::BF16:
        return torch::kBFloat16;
    case core::DType::F64:
        return torch::kFloat64;
    default:
        throw Error(ErrorCode::Shape,
                    std::string("weights of dtype ") + core::dtypeName(t) + " are not supported");
    }
}

// A tensor made in inference mode (the weights, RoPE tables) as one autograd may save for the
// backward pass: autograd refuses inference tensors; a plain view of the same memory (no copy) it
// takes. Other tensors come back as they are.
inline torch::Tensor savable(const torch::Tensor &t)
{
    if (!t.defined() || !t.is_inference())
        return t;
    c10::InferenceMode off(false);
    return torch::from_blob(
        t.data_ptr(), t.sizes(), t.strides(), [keep = t](void *) {}, t.options());
}

// glibc returns every freed block over 128 KiB (or its adaptive threshold) to the kernel, so each
// prefill activation ([512, 3072] f32 is 6 MiB) came back as fresh pages the kernel zeroes: a
// 512-token prefill of a 135M model took ~200k page faults, ~20% of its time. Keep blocks up to 32
// MiB (the most mallopt takes) in the heap and trim it only past 256 MiB free. Process-wide, once.
inline void keepFreedActivations()
{
#ifdef __GLIBC__
    static const bool once = [] {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20);
        return true;
    }();
    (void)once;
#endif
}

// Sets the job's thread counts and inference mode on whichever thread runs it, until it ends.
// OpenBLAS keeps its own pool (one thread per core by default), which at::set_num_threads does not
// touch: a "1 thread" job ran its matmuls on two threads that yield-spin against each other (12%
// of a 135M decode profile in sched_yield). Where the CPU kernels run the products (team), the
// job's threads are the row team's and torch's own ops (elementwise, softmax) run on this thread
// alone, and the BLAS (f32 shares of the team's products) at one thread: with torch's OpenMP
// threads, OpenBLAS's pool and the team all awake on two cores, each took the core another needed
// between every two products (2-thread prefill at 1.05-1.15x of one thread).
struct JobScope
{
    // inference = false: autograd records (gpu/src/model/model_grad_p.h), so no inference mode
    JobScope(int threads, bool team, bool inference = true) : guard(inference)
    {
        keepFreedActivations();
        const int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
        teamBefore = setTeamThreads(n);
        if (team) {
            ompBefore = setOmpThreads(1);   // this thread only: torch's parallel_for reads it
            blasBefore = setBlasThreads(1); // each share's sgemm on its team thread alone
        } else {
            if (at::get_num_threads() != n)
                at::set_num_threads(n);
            setBlasThreads(n);
        }
    }
    ~JobScope() // the reverse of the constructor (an OpenMP OpenBLAS also sets this thread's count)
    {
        if (blasBefore > 0)
            setBlasThreads(blasBefore);
        if (ompBefore > 0)
            setOmpThreads(ompBefore);
        setTeamThreads(teamBefore);
    }
    JobScope(const JobScope &) = delete;
    JobScope &operator=(const JobScope &) = delete;
    int teamBefore = 0, ompBefore = 0, blasBefore = 0;
    c10::InferenceMode guard;
};

} // namespace kvwb::gpu::detail
