#include "worker/train/param_sharding.h"

#include <algorithm>
#include <stdexcept>

namespace worker {

namespace {

std::logic_error broken(const std::string& what) {
  return std::logic_error("ZeRO's rule: " + what + " (worker/train/param_sharding.h)");
}

}  // namespace

Sharding ParamSharding::decide(int zero, int world, bool working_copy) {
  if (zero != 1) return Sharding::None;
  // Master weights apart from the working ones exist only where the layers compute with a working
  // copy (the GPU in bf16/fp16); elsewhere the fp32 weights are what the layers compute with.
  return world > 1 && working_copy ? Sharding::MasterWeights : Sharding::OptimizerState;
}

ParamSharding::ParamSharding(int zero, size_t bucket, Model& model, Ops& ops, Comm& comm)
    : mode_(decide(zero, comm.size(), ops.keeps_working_copy())), model_(model), ops_(ops), comm_(comm),
      layout_(make_shard_layout(model.num_params(), bucket, comm.rank(), comm.size())) {
  if (model.config().whole_params != whole_params(mode_))
    throw broken(std::string("the model was built ") + (model.config().whole_params ? "with" : "without") +
                 " whole fp32 parameters, against the sharding decided for this run");
}

std::vector<ParamView> ParamSharding::optimizer_ranges() const {
  return zero() ? layout_.owned : std::vector<ParamView>{};
}

size_t ParamSharding::master_bytes() const {
  return (shards_master() ? layout_.owned_total : model_.num_params()) * sizeof(float);
}

// --- A step and the gradient buffer

void ParamSharding::bind_backend() {
  if (bound_) throw broken("the backend is bound once");
  if (shards_master()) ops_.shard_master_weights(layout_.owned, model_.vector_params());
  bound_ = true;
}

void ParamSharding::expect_bound(const char* what) const {
  if (!bound_) throw broken(std::string(what) + " before bind_backend()");
}

void ParamSharding::zero_grads() {
  ops_.zero(model_.grads(), model_.num_params() * sizeof(float));
  grads_ = Grads::Gradients;
}

void ParamSharding::update(Optimizer& optimizer, float lr) {
  expect_bound("an optimizer step");
  if (grads_ != Grads::Gradients) throw broken("an optimizer step without this step's gradients");
  if (!zero()) {
    optimizer.step(lr);
    ops_.params_updated();
    grads_ = Grads::Free;
    return;
  }
  // Each rank updates its block of every bucket; the bucket's all-gather starts as soon as that
  // update is enqueued, overlapping the updates of the buckets after it. Sharded master weights
  // put the updated block into the gradient buffer first (that block of gradients is spent).
  float* whole = shards_master() ? model_.grads() : model_.params();
  optimizer.step(lr, [this, whole](size_t k) {
    const Bucket& b = layout_.buckets[k];
    if (shards_master() && layout_.owned[k].count > 0) ops_.export_master(whole, layout_.owned[k]);
    comm_.allgather(whole + b.begin, b.size());
  });
  comm_.wait();
  grads_ = shards_master() ? Grads::WholeWeights : Grads::Free;
  take_whole_weights();
}


void ParamSharding::weights_loaded() {
  expect_bound("loading the weights");
  if (shards_master()) grads_ = Grads::WholeWeights;  // set_state() put them in the gradient buffer
}

// --- The whole weights and state

float* ParamSharding::whole_weights() {
  if (!shards_master()) return model_.params();
  expect_bound("reading the whole weights");
  if (grads_ != Grads::WholeWeights)
    throw broken("the gradient buffer holds the whole weights only after a step, a load or a gather; it holds " +
                 std::string(grads_ == Grads::Gradients ? "this step's gradients" : "no weights") + " now");
  return model_.grads();
}

void ParamSharding::take_whole_weights() {
  if (shards_master())
    ops_.import_master(whole_weights());
  else
    ops_.params_updated();
}

void ParamSharding::allgather_buckets(float* whole) {
  for (const Bucket& b : layout_.buckets) comm_.allgather(whole + b.begin, b.size());
  comm_.wait();
}

void ParamSharding::gather_master() {
  expect_bound("gathering the weights");
  if (grads_ == Grads::Gradients) throw broken("the weights gathered into a gradient buffer that holds gradients");
  ops_.export_master(model_.grads());
  allgather_buckets(model_.grads());
  grads_ = Grads::WholeWeights;
}

ModelState ParamSharding::model_state() {
  if (shards_master()) gather_master();
  return model_.get_state();
}

// What rank 0 writes; every rank takes part in the gather.
ModelState ParamSharding::lead_model_state() {
  if (shards_master()) gather_master();
  return comm_.rank() == 0 ? model_.get_state() : ModelState{};
}

// Checkpoints hold the whole buffer's state whatever --zero was, so a run resumes with or without
// it, on any number of ranks. Under ZeRO every rank puts its blocks in place in the gradient
// buffer (free between steps: the next one zeroes it) and the buffer is all-gathered bucket by
// bucket -- no device memory beyond what training uses.
std::map<std::string, std::vector<float>> ParamSharding::whole_optimizer_state(const Optimizer& optimizer) {
  const bool lead = comm_.rank() == 0;
  if (!zero() || comm_.size() == 1) return lead ? optimizer.state() : std::map<std::string, std::vector<float>>{};
  if (grads_ == Grads::Gradients) throw broken("the gradient buffer taken as scratch while it holds gradients");
  grads_ = Grads::Scratch;
  std::map<std::string, std::vector<float>> whole;
  float* scratch = model_.grads();
  const size_t np = model_.num_params();
  for (const auto& [name, kept] : optimizer.state()) {
    size_t o = 0;
    for (const ParamView& r : layout_.owned) {
      ops_.upload(scratch + r.offset, kept.data() + o, r.count * sizeof(float));
      o += r.count;
    }
    allgather_buckets(scratch);
    if (lead) {
      std::vector<float>& v = whole[name];
      v.resize(np);
      ops_.download(v.data(), scratch, np * sizeof(float));
    }
  }
  return whole;
}

// An inf or NaN on any rank survives the all-reduce, so every rank reaches the same verdict.
// Under ZeRO each rank holds the full sums of its own blocks only (elsewhere its own or partial
// sums, which are non-finite only if some full sum is): the verdicts are combined.
bool ParamSharding::grads_finite_everywhere() {
  if (grads_ != Grads::Gradients) throw broken("the gradients' verdict asked for without gradients");
  const uint8_t mine = ops_.grads_finite() ? 1 : 0;
  if (!zero() || comm_.size() == 1) return mine != 0;
  std::vector<uint8_t> all(static_cast<size_t>(comm_.size()));
  comm_.allgather_host(&mine, all.data(), 1);
  return std::all_of(all.begin(), all.end(), [](uint8_t v) { return v != 0; });
}

}  // namespace worker
