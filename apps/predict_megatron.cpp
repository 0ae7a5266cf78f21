// predict_megatron.cpp — see predict_megatron.h.
#include "predict_megatron.h"

#include <string>

#include "trainscope/common/error.h"

namespace trainscope::apps {

namespace tn = trainscope::tuner;

tn::MegatronOverlap megatronOverlapOf(const PredictFlags& f, const tn::Plan& p, tn::Framework framework) {
  const struct {
    bool set;
    const char* flag;
  } flags[] = {{f.overlap_grad_reduce, "--overlap-grad-reduce"},
               {f.overlap_param_gather, "--overlap-param-gather"},
               {f.tp_comm_overlap, "--tp-comm-overlap"},
               {f.no_overlap_p2p_comm, "--no-overlap-p2p-comm"},
               {f.fp8_param_gather, "--fp8-param-gather"}};
  for (const auto& g : flags)
    if (g.set && framework != tn::Framework::Megatron)
      throw UserError(g.flag, "is Megatron-LM's flag", "add --framework megatron, or drop it");
  tn::MegatronOverlap o;
  if (framework != tn::Framework::Megatron) return o;
  // Megatron-LM's own checks (megatron/training/arguments.py, validate_args).
  if (f.tp_comm_overlap && (p.tp <= 1 || !p.sequence_parallel))
    throw UserError("--tp-comm-overlap", "overlaps TP communication with GEMMs only under sequence parallelism "
                                         "(Megatron-LM asserts --sequence-parallel) and with --tp above 1",
                    "add --sequence-parallel and --tp 2 or more, or drop --tp-comm-overlap");
  if (f.overlap_param_gather && !runconfig::shardsOptimizer(p.zero))
    throw UserError("--overlap-param-gather", "needs the distributed optimizer (Megatron-LM asserts it)",
                    "add --use-distributed-optimizer (over 2 or more data-parallel ranks), or drop the flag");
  if (f.overlap_param_gather && !f.overlap_grad_reduce)
    throw UserError("--overlap-param-gather", "needs --overlap-grad-reduce (Megatron-LM asserts it)",
                    "add --overlap-grad-reduce");
  if (f.no_overlap_p2p_comm && p.interleaved() && p.pp <= 2)
    throw UserError("--no-overlap-p2p-comm", "with the interleaved schedule needs --pp 3 or more (Megatron-LM "
                                             "asserts it: two stages would send and receive twice between one pair "
                                             "of ranks per batch)",
                    "drop --no-overlap-p2p-comm, or use --pp 3 or more");
  if (f.fp8_param_gather && p.precision != runconfig::Precision::FP8)
    throw UserError("--fp8-param-gather", "keeps FP8 parameters, so it needs --precision fp8",
                    "add --precision fp8, or drop the flag");
  if (f.fp8_param_gather && !runconfig::shardsOptimizer(p.zero))
    throw UserError("--fp8-param-gather", "needs the distributed optimizer (Megatron-LM asserts it)",
                    "add --use-distributed-optimizer (over 2 or more data-parallel ranks), or drop the flag");
  o.grad_reduce = f.overlap_grad_reduce;
  o.param_gather = f.overlap_param_gather;
  o.tp_comm = f.tp_comm_overlap;
  o.p2p = !f.no_overlap_p2p_comm;
  return o;
}

}  // namespace trainscope::apps
