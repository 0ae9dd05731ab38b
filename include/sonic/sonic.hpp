// sonic: batched, exact, CUDA-Graph-capturable sampling of tokens from LLM logits.
#pragma once

#include "error.hpp"
#include "sampler.hpp"
#include "types.hpp"
