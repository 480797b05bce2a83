#include "core/util/store_url.h"

#include "core/util/error.h"

#include <charconv>

namespace kvwb::core {

StoreUrl parseStoreUrl(const std::string &url)
{
    const auto bad = [&](const std::string &why) {
        return Error(
            ErrorCode::InvalidArgument,
            "store '" + url + "': " + why +
                " (expected memory, redis://HOST:PORT[/DB] or redis-cluster://HOST:PORT[,HOST:PORT...])");
    };
    StoreUrl out;
    const std::string scheme = "redis://", clusterScheme = "redis-cluster://";
    out.cluster = url.rfind(clusterScheme, 0) == 0;
    if (!out.cluster && url.rfind(scheme, 0) != 0)
        throw bad("unknown scheme");
    std::string rest = url.substr(out.cluster ? clusterScheme.size() : scheme.size());
    if (rest.find('@') != std::string::npos)
        throw bad("a user or password in the URL is not supported (kvwb sends no AUTH; it would be ignored)");
    if (const auto slash = rest.find('/'); slash != std::string::npos) {
        const std::string dbText = rest.substr(slash + 1);
        rest.resize(slash);
        int &db = out.db;
        const auto [p, ec] = std::from_chars(dbText.data(), dbText.data() + dbText.size(), db);
        if (dbText.empty() || ec != std::errc() || p != dbText.data() + dbText.size() || db < 0 || db > 15)
            throw bad("database '" + dbText + "' is not 0..15");
        if (out.cluster && db != 0)
            throw bad("a Redis Cluster has database 0 only");
    }
    size_t at = 0;
    while (true) {
        const size_t comma = rest.find(',', at);
        const std::string hostPort =
            rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        const auto colon = hostPort.rfind(':');
        if (colon == std::string::npos || colon == 0)
            throw bad("no HOST:PORT");
        const std::string portText = hostPort.substr(colon + 1);
        int port = 0;
        const auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
        if (portText.empty() || ec != std::errc() || p != portText.data() + portText.size() || port < 1 ||
            port > 65535)
            throw bad("port '" + portText + "' is not 1..65535");
        out.seeds.emplace_back(hostPort.substr(0, colon), port);
        if (comma == std::string::npos)
            break;
        if (!out.cluster)
            throw bad("several servers are a cluster: redis-cluster://HOST:PORT,HOST:PORT");
        at = comma + 1;
    }
    return out;
}

void checkStoreUrl(const std::string &url)
{
    if (url != "memory")
        parseStoreUrl(url);
}

} // namespace kvwb::core
