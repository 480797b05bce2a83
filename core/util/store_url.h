// The shared store's URL (kvwb replay --store, a project's replay.store): "memory",
// "redis://HOST:PORT[/DB]" (DB 0..15) or "redis-cluster://HOST:PORT[,HOST:PORT...]". Parsing only;
// core/cache/shared_store.h opens it. Pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvwb::core {

struct StoreUrl
{
    bool cluster = false;
    int db = 0;
    std::vector<std::pair<std::string, int>> seeds; // host, port
};

// A redis or redis-cluster URL (not "memory"). Error(InvalidArgument) naming the URL and what is
// wrong (scheme, a user or password, database, host:port).
StoreUrl parseStoreUrl(const std::string &url);
// The same checks, "memory" accepted.
void checkStoreUrl(const std::string &url);

} // namespace kvwb::core
