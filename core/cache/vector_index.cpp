#include "core/cache/vector_index.h"

#include "core/util/error.h"

#include <fmt/format.h>
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <exception>
#include <new>

namespace kvwb::core {

namespace {

// hnswlib speaks std::runtime_error; the rest of the program speaks Error.
template <typename F> auto guarded(const char *index, const char *what, F &&f) -> decltype(f())
{
    try {
        return f();
    } catch (const Error &) {
        throw;
    } catch (const std::bad_alloc &) {
        throw Error(ErrorCode::Internal, fmt::format("{}: out of memory during {}", index, what));
    } catch (const std::exception &e) {
        throw Error(ErrorCode::Internal, fmt::format("{}: {} failed: {}", index, what, e.what()));
    }
}

} // namespace

struct VectorIndex::Impl
{
    const char *name;
    int dim;
    std::unique_ptr<hnswlib::InnerProductSpace> space; // declared first: the graph points at it
    std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph;
};

VectorIndex::VectorIndex(int dim, size_t initialCapacity, size_t m, size_t efConstruction, size_t efSearch,
                         const char *name)
    : m(std::make_unique<Impl>())
{
    this->m->name = name;
    this->m->dim = dim;
    this->m->space = std::make_unique<hnswlib::InnerProductSpace>(size_t(dim));
    this->m->graph = guarded(name, "create", [&] {
        return std::make_unique<hnswlib::HierarchicalNSW<float>>(
            this->m->space.get(), std::max<size_t>(initialCapacity, 1), m, efConstruction);
    });
    this->m->graph->setEf(efSearch);
}

VectorIndex::~VectorIndex() = default;

int VectorIndex::dim() const
{
    return m->dim;
}

size_t VectorIndex::capacity() const
{
    return m->graph->max_elements_;
}

void VectorIndex::add(const float *v, size_t label)
{
    const size_t capacity = m->graph->max_elements_;
    if (label >= capacity) // labels are dense slots: a new one is at most the count
        guarded(m->name, "resizeIndex", [&] { m->graph->resizeIndex(std::max(capacity * 2, label + 1)); });
    guarded(m->name, "addPoint", [&] { m->graph->addPoint(v, label); });
}

void VectorIndex::markDeleted(size_t label)
{
    guarded(m->name, "markDelete", [&] { m->graph->markDelete(label); });
}

std::vector<std::pair<float, size_t>> VectorIndex::search(const float *q, size_t k) const
{
    std::vector<std::pair<float, size_t>> ranked;
    if (k == 0 || m->graph->cur_element_count == 0)
        return ranked;
    auto result = guarded(m->name, "search", [&] { return m->graph->searchKnn(q, k); });
    while (!result.empty()) {
        ranked.emplace_back(result.top().first, size_t(result.top().second));
        result.pop();
    }
    std::sort(ranked.begin(), ranked.end());
    return ranked;
}

} // namespace kvwb::core
