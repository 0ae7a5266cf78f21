// lane_grads.h — the core lanes' gradients summed into the main ones (internal to the runtime).
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace trainscope::runtime {

class CoreLanes;

// main[i] = Σ_k lane k's gradient (lane_leaves[k][i]), in lane order; the lanes' gradients are
// released so that the next step's backward allocates fresh ones instead of accumulating into zeroed
// buffers. The lanes share the work (lane k takes the k-th W-th of all gradient elements, in
// parameter order), and the pass that writes the sum also yields the clipping norm's Σ g², returned
// (nullopt when the tensors were not all contiguous fp32 and the plain path ran).
std::optional<double> sumLaneGradients(CoreLanes& lanes, std::vector<std::vector<at::Tensor>>& lane_leaves,
                                       std::vector<at::Tensor>& main);

}  // namespace trainscope::runtime
