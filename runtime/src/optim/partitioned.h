// partitioned.h — optimizers that run one step as disjoint slices of the parameters, one per CPU
// core lane (internal to the runtime; the lanes are a CPU detail the public Optimizer does not show).
//
// beginPartitionedStep() once, then stepPart(k, parts) for every k < parts, concurrently: the same
// result as Optimizer::step(grads, lr, multiplier).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/optim.h"

namespace trainscope::runtime {

class PartitionedStep {
 public:
  virtual ~PartitionedStep() = default;
  virtual bool partitionable() const = 0;  // every tensor contiguous and on the CPU
  virtual void beginPartitionedStep() = 0;
  virtual void stepPart(const std::vector<at::Tensor>& grads, double lr, double multiplier, int part, int parts) = 0;
};

// The optimizer's partitioned step, when it has one that applies to its tensors (else null).
PartitionedStep* partitioned(Optimizer& o);

// Part `part` of `parts` of the tensors laid end to end: elements [k·n/parts, (k+1)·n/parts) of
// the n in all. Calls fn(i, start, count) for each tensor i it touches, start counted within
// tensor i. (How stepPart and the core lanes' gradient sum split their work.)
void forEachSliceOfPart(const std::vector<at::Tensor>& tensors, int part, int parts,
                        const std::function<void(size_t i, int64_t start, int64_t count)>& fn);

}  // namespace trainscope::runtime
