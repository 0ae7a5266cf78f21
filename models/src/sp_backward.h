// sp_backward.h — sequence parallelism's column-parallel GEMM backward as this runtime runs it
// (internal to models/; docs/memory-model.md, "Sequence parallelism's gathered backward").
#pragma once

#include "trainscope/models/layer_ops.h"

namespace trainscope::models {

// Under tp > 1 with SP, a column-parallel linear (qkv, fc1, SwiGLU's gate+up) keeps only its input
// shard and gathers it again in backward (runtime/src/model/tensor_parallel.cpp, GatherSeqLinear).
// Its backward works in the (s, b) row order the collectives slice along, so at its end this rank
// holds: the incoming gradient dY and its (s, b)-ordered copy (2·r·N·e, r = b·s rows, N its output
// width on the rank), the re-gathered input and the full dX before its reduce-scatter (2·r·h·e),
// the input shard's (s, b) copy, dX's shard and that shard back in (b, s) order (3·(r/t)·h·e), and
// dW (N·h·e); beside it the residual stream's gradient (r/t)·h·e; less what the layer's later ops
// kept, freed by then. The worst such GEMM of the layer (`L`, without checkpointing); 0 without SP.
double spColumnBackwardBytes(const LayerOps& L, const Plan& p, double h);

}  // namespace trainscope::models
