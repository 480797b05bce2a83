// The small multi-tenant workload the replay and fleet CLI tests share: 3 tenants x 3 rounds x 4
// questions about 5 items behind one long shared system prompt, model "a", 4 tokens per answer.
// Repeats within a tenant are exact hits; the same text from another tenant must miss.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace kvwb::test {

struct TenantWorkload
{
    std::string jsonl;                       // one request per line, ids 0..35, t_ms = 10 x id
    std::map<int64_t, std::string> tenantOf; // request id -> tenant
    int exactRepeats = 0;                    // requests whose (tenant, prompt) came before
};

TenantWorkload threeTenantWorkload();

} // namespace kvwb::test
