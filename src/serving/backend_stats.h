// serving/backend_stats.h — summing the statistics of several backends.
// Owns the one way counters and histograms of BackendStats add up, for
// backends that front several others (the controller over its workers, the
// servables' router over their models). Never samples a backend itself.
#pragma once

#include "serving/backend.h"

namespace cairn::serving {

// Adds `from` into `into`: every counter, and each histogram bucket by bucket
// (an empty histogram adds nothing; one whose bounds differ is left out).
void add_stats(BackendStats& into, const BackendStats& from);

}  // namespace cairn::serving
