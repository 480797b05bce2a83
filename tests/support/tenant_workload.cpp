#include "tests/support/tenant_workload.h"

#include <fmt/format.h>

namespace kvwb::test {

TenantWorkload threeTenantWorkload()
{
    TenantWorkload w;
    const std::string system = "You are a helpful assistant of the workbench. Answer briefly and precisely, "
                               "please, in one sentence only. ";
    std::map<std::pair<std::string, std::string>, bool> seen;
    int id = 0;
    for (int round = 0; round < 3; ++round)
        for (int t = 0; t < 3; ++t)
            for (int k = 0; k < 4; ++k) {
                const std::string tenant = "t" + std::to_string(t);
                const int question = (k + round) % 5;
                const std::string prompt = system + "Q: what is item " + std::to_string(question) + "?";
                w.exactRepeats += seen[{tenant, prompt}] ? 1 : 0;
                seen[{tenant, prompt}] = true;
                w.tenantOf[id] = tenant;
                w.jsonl +=
                    fmt::format(
                        R"({{"id":{},"t_ms":{},"tenant":"{}","user":"u{}","model":"a","intent":"n{}","max_tokens":4,"prompt":"{}"}})",
                        id, id * 10, tenant, id, question, prompt) +
                    "\n";
                ++id;
            }
    return w;
}

} // namespace kvwb::test
