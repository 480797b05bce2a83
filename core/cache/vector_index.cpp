#include "core/cache/vector_index.h"

#include "core/util/error.h"

#include <fmt/format.h>
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <cstdint>
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
    size_t m, efConstruction, efSearch, exactLimit;
    std::unique_ptr<hnswlib::InnerProductSpace> space;      // declared first: the graph points at it
    std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph; // once more than exactLimit are live
    std::vector<float> data;                                // [slots * dim]
    std::vector<uint8_t> live;                              // [slots]
    size_t liveCount = 0;

    const float *row(size_t label) const { return data.data() + label * size_t(dim); }

    void reserveSlots(size_t slots)
    {
        if (slots <= live.size())
            return;
        guarded(name, "resize", [&] {
            data.resize(slots * size_t(dim));
            live.resize(slots, 0);
        });
    }

    void graphAdd(size_t label)
    {
        const size_t capacity = graph->max_elements_;
        if (label >= capacity)
            guarded(name, "resizeIndex", [&] { graph->resizeIndex(std::max(capacity * 2, label + 1)); });
        guarded(name, "addPoint", [&] { graph->addPoint(row(label), label); });
    }

    void buildGraph()
    {
        graph = guarded(name, "create", [&] {
            return std::make_unique<hnswlib::HierarchicalNSW<float>>(
                space.get(), std::max<size_t>(live.size(), 1), m, efConstruction);
        });
        graph->setEf(efSearch);
        for (size_t label = 0; label < live.size(); ++label)
            if (live[label])
                graphAdd(label);
    }
};

VectorIndex::VectorIndex(int dim, size_t initialCapacity, size_t m, size_t efConstruction, size_t efSearch,
                         const char *name, size_t exactLimit)
    : m(std::make_unique<Impl>())
{
    if (dim < 1)
        throw Error(ErrorCode::InvalidArgument, fmt::format("{}: dimension {} (must be >= 1)", name, dim));
    this->m->name = name;
    this->m->dim = dim;
    this->m->m = m;
    this->m->efConstruction = efConstruction;
    this->m->efSearch = efSearch;
    this->m->exactLimit = exactLimit;
    this->m->space = std::make_unique<hnswlib::InnerProductSpace>(size_t(dim));
    this->m->reserveSlots(std::max<size_t>(initialCapacity, 1));
}

VectorIndex::~VectorIndex() = default;

int VectorIndex::dim() const
{
    return m->dim;
}

size_t VectorIndex::capacity() const
{
    return m->live.size();
}

size_t VectorIndex::size() const
{
    return m->liveCount;
}

bool VectorIndex::exact() const
{
    return !m->graph;
}

void VectorIndex::add(const float *v, size_t label)
{
    if (label >= m->live.size()) // labels are dense slots: a new one is at most the count
        m->reserveSlots(std::max(m->live.size() * 2, label + 1));
    std::copy(v, v + m->dim, m->data.begin() + ptrdiff_t(label * size_t(m->dim)));
    if (!m->live[label]) {
        m->live[label] = 1;
        ++m->liveCount;
    }
    if (m->graph)
        m->graphAdd(label); // a deleted label's point is updated in place and undeleted
    else if (m->liveCount > m->exactLimit)
        m->buildGraph();
}

void VectorIndex::markDeleted(size_t label)
{
    if (label >= m->live.size() || !m->live[label])
        throw Error(ErrorCode::Internal, fmt::format("{}: label {} is not in the index", m->name, label));
    m->live[label] = 0;
    --m->liveCount;
    if (m->graph)
        guarded(m->name, "markDelete", [&] { m->graph->markDelete(label); });
}

std::vector<std::pair<float, size_t>> VectorIndex::search(const float *q, size_t k) const
{
    std::vector<std::pair<float, size_t>> ranked;
    if (k == 0 || m->liveCount == 0)
        return ranked;
    if (m->graph) {
        auto result = guarded(m->name, "search", [&] { return m->graph->searchKnn(q, k); });
        while (!result.empty()) {
            ranked.emplace_back(result.top().first, size_t(result.top().second));
            result.pop();
        }
    } else {
        const auto distance = m->space->get_dist_func();
        void *param = m->space->get_dist_func_param();
        ranked.reserve(m->liveCount);
        for (size_t label = 0; label < m->live.size(); ++label)
            if (m->live[label])
                ranked.emplace_back(distance(q, m->row(label), param), label);
        k = std::min(k, ranked.size());
        std::partial_sort(ranked.begin(), ranked.begin() + ptrdiff_t(k), ranked.end());
        ranked.resize(k);
    }
    std::sort(ranked.begin(), ranked.end());
    return ranked;
}

} // namespace kvwb::core
