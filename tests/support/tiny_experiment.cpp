#include "tests/support/tiny_experiment.h"

namespace kvwb::test {

core::ModelInfo tinyModelInfo(char role, int numLayers)
{
    core::ModelInfo m;
    m.role = *core::parseRole(std::string(1, role)); // test helpers name roles by letter
    core::ModelConfig &c = m.config;
    c.architecture = "LlamaForCausalLM";
    c.modelType = "llama";
    c.numLayers = numLayers;
    c.numHeads = 2;
    c.numKvHeads = 1;
    c.headDim = 4;
    c.hiddenSize = 8;
    c.vocabSize = 100;
    c.ropeTheta = 10000.0;
    c.ropeScaling.type = "default";
    c.ropeScaling.factor = 1.0;
    m.weightsSha256 = std::string(64, role);
    m.tokenizerSha256 = std::string(64, '1');
    m.sourcePath = std::string("/models/") + role;
    return m;
}

std::filesystem::path makeTinyExperiment(const QTemporaryDir &dir, int numLayers)
{
    const std::filesystem::path path = std::filesystem::path(dir.path().toStdString()) / "exp.h5";
    core::ExperimentOptions o;
    o.syncToDisk = false;
    core::Provenance p;
    p.device = "cpu";
    core::ExperimentWriter::create(path, o, p, tinyModelInfo('a', numLayers), tinyModelInfo('b', numLayers))
        .close();
    return path;
}

} // namespace kvwb::test
