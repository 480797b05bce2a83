#include "core/tokenize/spm_library.h"

#include "core/util/error.h"
#include "core/util/install_layout.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

// AddressSanitizer builds: GCC says __SANITIZE_ADDRESS__, clang (before 16) only __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define KVWB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVWB_ASAN 1
#endif
#endif
#ifndef KVWB_ASAN
#define KVWB_ASAN 0
#endif

namespace kvwb::core {

namespace {

SpmApi loadApi()
{
    std::vector<std::filesystem::path> candidates;
    if (const char *env = std::getenv("KVWB_SPM_LIBRARY"))
        candidates.emplace_back(env);
    // Beside the executable (build/ holds kvwb, kvwb-engine and the library; installed, the engine
    // in lib/kvwb/ has it beside), or in ../lib/kvwb/ (installed bin/kvwb): these come before the
    // build tree's path compiled in, so an installed kvwb never loads a build tree's copy.
    const auto dir = executableDir();
    if (!dir.empty()) {
        candidates.push_back(dir / "libkvwb_spm.so");
        candidates.push_back(dir.parent_path() / "lib" / "kvwb" / "libkvwb_spm.so");
    }
#ifdef KVWB_SPM_BUILD_PATH
    candidates.emplace_back(KVWB_SPM_BUILD_PATH); // test executables in build/tests/
#endif
    std::string tried;
    for (const auto &path : candidates) {
        if (!std::filesystem::exists(path)) {
            tried += " " + path.string() + " (missing)";
            continue;
        }
        // LOCAL: nothing else binds to sentencepiece's protobuf; DEEPBIND: sentencepiece binds
        // to its own protobuf, not LibTorch's.
#if KVWB_ASAN
        // ASan refuses RTLD_DEEPBIND: sanitizer builds bind normally (fine without LibTorch loaded)
        void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
        void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
        if (!h) {
            tried += " " + path.string() + " (" + dlerror() + ")";
            continue;
        }
        SpmApi api;
        bool ok = true;
        auto bind = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
            ok = ok && fn != nullptr;
        };
#define KVWB_SPM_API_BIND(member, symbol) bind(api.member, #symbol);
        KVWB_SPM_API_FUNCTIONS(KVWB_SPM_API_BIND)
#undef KVWB_SPM_API_BIND
        if (ok)
            return api; // kept loaded for the life of the process
        dlclose(h);
        tried += " " + path.string() + " (missing symbols)";
    }
    throw Error(ErrorCode::Unsupported,
                "SentencePiece support library libkvwb_spm.so not found; tried:" + tried);
}

void appendTo(void *ctx, const void *data, size_t n)
{
    static_cast<std::string *>(ctx)->append(static_cast<const char *>(data), n);
}

} // namespace

const SpmApi &spmApi()
{
    static const SpmApi api = loadApi();
    return api;
}

void trainSentencePiece(const std::string &flags)
{
    std::string err;
    if (spmApi().train(flags.c_str(), appendTo, &err) != 0)
        throw Error(ErrorCode::Tokenizer, "SentencePiece training failed: " + err);
}

} // namespace kvwb::core
