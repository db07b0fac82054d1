// `launch --dry-run`: what was derived (Slurm's values, the layout), then every rank's command and
// variables. Values that only the meeting of the launchers decides (other nodes' endpoints, node
// 0's master port, the ranks of a node that takes its rank in arrival order) are shown as such;
// everything the options already determine is shown as the real run will export it. Starts and
// creates nothing.
#pragma once

#include "launcher/plan.h"

namespace launch {

int dry_run(const Plan& plan);

}  // namespace launch
