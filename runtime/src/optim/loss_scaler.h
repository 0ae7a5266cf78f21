// loss_scaler.h — fp16 dynamic loss scaling (internal to the runtime).
#pragma once

#include <cstdint>

namespace trainscope::runtime {

// fp16 dynamic loss scaling (as torch.cuda.amp.GradScaler): halve on overflow and skip the step;
// double after `interval` clean steps.
struct LossScaler {
  double scale = 1.0;
  int64_t interval = 2000;
  int64_t clean_steps = 0;
  void update(bool overflow) {
    if (overflow) {
      scale *= 0.5;
      clean_steps = 0;
    } else if (++clean_steps >= interval) {
      scale *= 2.0;
      clean_steps = 0;
    }
  }
};

}  // namespace trainscope::runtime
