// rows.cpp — the bus-bandwidth rule of a collective (see rows.h).
#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

double Collective::algbw() const {
  const double s = cut ? 0.0 : seconds();  // a cut call's duration is not its transfer's
  return s > 0 ? double(bytes) / s : 0.0;
}

double Collective::busbw() const {
  const double n = double(group_size);
  double f = 1.0;
  if (n > 0 && op == "all_reduce") f = 2.0 * (n - 1) / n;
  else if (n > 0 && (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all")) f = (n - 1) / n;
  return algbw() * f;
}

}  // namespace trainscope::rundb
