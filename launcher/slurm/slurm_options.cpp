#include "launcher/slurm/slurm_options.h"

#include "launcher/devices.h"
#include "launcher/errors.h"
#include "launcher/seconds.h"

namespace launch {

namespace {

std::string from(const slurm::SlurmLayout& l, const std::string& field) {
  auto it = l.origin.find(field);
  return it == l.origin.end() ? "default" : "from " + it->second;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

SlurmDerived apply_slurm(const Options& given, const slurm::SlurmLayout& l, int visible_gpus) {
  SlurmDerived d;
  d.options = given;
  Options& o = d.options;
  auto note = [&](const std::string& s) { d.notes.push_back(s); };
  const std::string step = l.job_id + (l.step_id.empty() ? "" : "." + l.step_id);
  note("Slurm job step " + step + " (from SLURM_JOB_ID=" + l.job_id +
       (l.step_id.empty() ? "" : ", SLURM_STEP_ID=" + l.step_id) + ")");

  // --- nodes
  d.hosts = l.hosts;
  if (!given.nnodes_given) {
    if (l.nnodes > 1 && l.task_per_worker)
      throw UsageError("this Slurm step runs " + std::to_string(l.tasks_per_node) + " tasks on each of " +
                       std::to_string(l.nnodes) + " nodes: one task per worker works on one node only; "
                       "start one launcher per node (srun --ntasks-per-node=1 launch ...)");
    o.nnodes = l.nnodes;
    note("nnodes = " + std::to_string(l.nnodes) + " (" + from(l, "nnodes") + ")");
  }
  if (o.nnodes > 1) {
    if (given.rank == -1) {
      o.rank = l.node_rank;
      note("node rank = " + std::to_string(l.node_rank) + " (" + from(l, "node_rank") + ")");
    }
    if (!given.master) {
      if (l.master_host.empty())
        throw UsageError("a multi-node Slurm step without SLURM_STEP_NODELIST/SLURM_JOB_NODELIST: give --master IP:PORT");
      o.master = l.master_host + ":" + std::to_string(l.master_port);
      note("master = " + *o.master + " (first host " + from(l, "hosts") +
           "; port from SLURM_JOB_ID and SLURM_STEP_ID)");
    }
  } else if (!given.nnodes_given) {
    note("node rank = " + std::to_string(l.node_rank) + " (" + from(l, "node_rank") + ")");
  }
  if (!given.job_id_given) {
    o.job_id = "slurm-" + step;
    note("job id = " + o.job_id + " (from SLURM_JOB_ID and SLURM_STEP_ID)");
  }
  // --- grace: Slurm SIGKILLs KillWait seconds after its SIGTERM; our SIGKILL must come first.
  if (!given.grace_given) {
    note("grace = " + seconds_text(o.grace_s) + " s (below Slurm's default KillWait of " +
         std::to_string(int(kSlurmDefaultKillWait)) + " s; --grace to change)");
  } else if (given.grace_s >= kSlurmDefaultKillWait) {
    note("warning: --grace " + seconds_text(given.grace_s) + " is not below Slurm's default "
         "KillWait of 30 s: Slurm may SIGKILL the workers before they are done");
  }

  const bool devices_given = given.devices.has_value();

  // --- one launcher per node: it starts one worker per device, as outside Slurm
  if (!l.task_per_worker) {
    if (!devices_given) {
      auto it = l.origin.find("devices");
      if (it != l.origin.end() && it->second.rfind("SLURM_STEP_GPUS=", 0) == 0 &&
          visible_gpus == 0) {
        // Slurm allocated GPUs but did not set CUDA_VISIBLE_DEVICES: its ids are the visible ones.
        o.devices = parse_devices(*l.devices, it->second.substr(0, it->second.find('=')));
        note("devices = " + *l.devices + " (from " + it->second + ")");
      } else if (visible_gpus > 0) {
        note("devices = the " + std::to_string(visible_gpus) + " visible GPU(s) (" +
             from(l, "devices") + ")");
      } else {
        note("devices = 1 CPU process (no GPU in the step)");
      }
    }
    return d;
  }

  // --- one task per worker: Slurm's task ids are the ranks
  if (given.nproc_per_node && *given.nproc_per_node != 1)
    throw UsageError("--nproc_per_node " + std::to_string(*given.nproc_per_node) + ": this step runs " +
                     std::to_string(l.tasks_per_node) + " Slurm tasks per node (" + from(l, "tasks_per_node") +
                     "), one worker each; drop --nproc_per_node, or start one task per node (srun "
                     "--ntasks-per-node=1)");
  if (given.max_restart > 0)
    throw UsageError("--max_restart with one Slurm task per worker: the tasks' launchers cannot restart "
                     "together yet; start one launcher per node (srun --ntasks-per-node=1 launch ...)");
  SlurmTaskForm t;
  t.ranks.world_size = l.world_size;
  t.ranks.local_size = l.tasks_per_node;
  t.ranks.first_rank = l.global_rank;
  t.ranks.first_local_rank = l.local_rank;
  t.store_port = l.master_port;
  t.step = step;
  d.task = t;
  o.nproc_per_node = 1;
  note("one worker per Slurm task (" + std::to_string(l.world_size) + " tasks on " +
       std::to_string(l.nnodes) + " node)");
  note("rank = " + std::to_string(l.global_rank) + " (" + from(l, "global_rank") + ")");
  note("local rank = " + std::to_string(l.local_rank) + " (" + from(l, "local_rank") + ")");
  note("world size = " + std::to_string(l.world_size) + " (" + from(l, "world_size") + ")");
  note("local size = " + std::to_string(l.tasks_per_node) + " (" + from(l, "tasks_per_node") + ")");
  note("store = " + given.host + ":" + std::to_string(t.store_port) + ", served by task 0 (port from "
       "SLURM_JOB_ID and SLURM_STEP_ID)");

  if (devices_given && given.devices->cpu) {
    note("device = cpu (--devices cpu)");
  } else if (devices_given) {
    if (given.devices->gpus.size() != 1)
      throw UsageError("one Slurm task per worker: give one device per task (e.g. --gpus 0), not '" +
                       describe(*given.devices) + "'");
  } else if (visible_gpus == 0) {
    o.devices = DeviceList::cpu_processes("Slurm");
    note("device = cpu (no GPU visible to this task)");
  } else if (visible_gpus == 1) {
    o.devices = DeviceList::gpu_ids({0}, "Slurm");
    note("device = gpu 0, the task's only visible GPU (" + from(l, "devices") + ")");
  } else if (visible_gpus >= l.tasks_per_node) {
    o.devices = DeviceList::gpu_ids({l.local_rank}, "Slurm");
    note("device = gpu " + std::to_string(l.local_rank) + ", the local rank's among " + std::to_string(visible_gpus) +
         " visible GPUs (" + from(l, "devices") + ")");
  } else {
    throw UsageError(std::to_string(l.tasks_per_node) + " Slurm tasks on this node share " +
                     std::to_string(visible_gpus) + " visible GPUs (" + from(l, "devices") +
                     "): ask for one GPU per task (srun --gpus-per-task=1) or give --gpus");
  }
  return d;
}

}  // namespace launch
