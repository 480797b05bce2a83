// Precompiled header for gpu/ only: torch is never included from a public header.
#pragma once
#include <torch/torch.h>
