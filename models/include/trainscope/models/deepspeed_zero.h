// trainscope/models/deepspeed_zero.h — DeepSpeed's ZeRO knobs that the memory and time models price
// (framework_memory.h: its buffers; time_model.h: its reduce buckets, prefetch and overlap), from a
// user's DeepSpeed config (`predict --deepspeed-config`) or DeepSpeed's defaults. Defaults from
// deepspeed 0.19.8 runtime/zero/config.py (DeepSpeedZeroConfig), in elements, not bytes.
#pragma once

namespace trainscope::models {

struct DeepSpeedZero {
  double reduce_bucket_size = 5e8;            // DeepSpeedZeroConfig.reduce_bucket_size
  double allgather_bucket_size = 5e8;         // .allgather_bucket_size (ZeRO-1/2 gather in place: no buffer)
  double prefetch_bucket_size = 5e7;          // .stage3_prefetch_bucket_size
  double max_live_parameters = 1e9;           // .stage3_max_live_parameters
  double param_persistence_threshold = 1e5;   // .stage3_param_persistence_threshold
  bool contiguous_gradients = true;           // .contiguous_gradients
  int overlap_comm = -1;                      // .overlap_comm: -1 the default (true for stage 3 only)
  // Read from a user's config: the time model prices its buckets, prefetch and overlap_comm; false:
  // the deepspeed profile's (what `export --format deepspeed` writes: overlap_comm on, one layer
  // prefetched).
  bool from_config = false;
};

}  // namespace trainscope::models
