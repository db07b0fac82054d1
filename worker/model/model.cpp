// The model: the schema's layers over the memory plan's buffers, carved from the backend, and
// the state a checkpoint holds. The passes are resnet.cpp's.
#include "worker/model/model.h"

#include <future>
#include <stdexcept>

#include "worker/model/init.h"
#include "worker/model/memory_plan.h"
#include "worker/model/resnet.h"

namespace worker {

struct Model::Impl {
  ModelConfig cfg;
  Ops& ops;
  Schema schema;
  MemoryPlan plan;
  std::vector<void*> memory;  // the plan's buffers, carved
  float* params = nullptr;
  float* grads = nullptr;
  float* buffers = nullptr;
  std::unique_ptr<ResNet> net;
  int64_t batches_tracked = 0;
  // The initial state of `drawn_seed`, drawn on another thread during the construction.
  std::future<ModelState> drawn;
  uint64_t drawn_seed = 0;

  Impl(const ModelConfig& c, Ops& o, std::optional<uint64_t> init_seed) : cfg(c), ops(o), schema(make_schema(c)) {
    check_tensor_sizes(schema, ops.max_tensor_elements());
    if (init_seed) {
      drawn_seed = *init_seed;
      drawn = std::async(std::launch::async, [this] { return initial_state(schema, drawn_seed); });
    }
    plan = plan_memory(schema, ops.compute_dtype(), cfg.recompute, cfg.whole_params);
    auto at = [&](const Place& p) { return p.placed() ? static_cast<float*>(memory[size_t(p.buffer)]) : nullptr; };
    for (const Buffer& b : plan.buffers) {
      memory.push_back(ops.alloc(b.bytes));
      // The parameter buffers come first: the backend binds them (and may carve its working
      // copy of the weights) before the activations are carved, and plans its convolutions.
      if (memory.size() == size_t(plan.stats.buffer) + 1) {
        params = at(plan.params);
        grads = at(plan.grads);
        buffers = at(plan.stats);
        ops.bind_params(params, grads, schema.nparams);
        std::vector<const ConvLayer*> convs{&schema.conv1};
        for (const BlockLayers& k : schema.blocks)
          for (const ConvLayer* l : {&k.c1, &k.c2, &k.c3, &k.cd})
            if (l->w.count) convs.push_back(l);
        std::vector<ConvDesc> shapes;
        for (const ConvLayer* l : convs) shapes.push_back(l->d);
        ops.plan_convs(shapes);
        for (const ConvLayer* l : convs) ops.register_conv(l->d, l->w);
      }
    }
    net = std::make_unique<ResNet>(schema, plan, memory, ops);
  }
};

Model::Model(const ModelConfig& cfg, Ops& ops, std::optional<uint64_t> init_seed)
    : impl_(std::make_unique<Impl>(cfg, ops, init_seed)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const std::vector<StateEntry>& Model::state_entries() const { return impl_->schema.entries; }
size_t Model::num_params() const { return impl_->schema.nparams; }
size_t Model::num_buffers() const { return impl_->schema.nbuffers; }
float* Model::params() { return impl_->params; }
float* Model::grads() { return impl_->grads; }
float* Model::buffers() { return impl_->buffers; }
Act& Model::input() { return impl_->net->input(); }
int32_t* Model::labels() { return impl_->net->labels(); }
int64_t Model::num_batches_tracked() const { return impl_->batches_tracked; }

void Model::init(uint64_t seed) {
  Impl& m = *impl_;
  if (m.drawn.valid() && m.drawn_seed == seed) {
    set_state(m.drawn.get());
    return;
  }
  set_state(initial_state(m.schema, seed));
}

void Model::forward_backward(float grad_scale) {
  impl_->net->forward(true, grad_scale, impl_->cfg.label_smoothing);
  ++impl_->batches_tracked;
  impl_->net->backward(on_grads_ready);
}

void Model::count_replayed_forward() { ++impl_->batches_tracked; }

void Model::forward_eval() { impl_->net->forward(false, 1.0f, impl_->cfg.label_smoothing); }

void Model::set_label_smoothing(float e) { impl_->cfg.label_smoothing = e; }

float Model::last_loss() {
  float v = 0;
  impl_->ops.synchronize();
  impl_->ops.download(&v, impl_->net->loss(), sizeof(float));
  return v;
}

std::vector<float> Model::last_logits() {
  std::vector<float> v(size_t(impl_->cfg.batch) * size_t(impl_->cfg.num_classes));
  impl_->ops.synchronize();
  impl_->ops.download(v.data(), impl_->net->logits(), v.size() * sizeof(float));
  return v;
}

ModelState Model::get_state() {
  Impl& m = *impl_;
  ModelState s;
  s.params.resize(m.schema.nparams);
  s.buffers.resize(m.schema.nbuffers);
  m.ops.synchronize();
  m.ops.download(s.params.data(), m.params ? m.params : m.grads, m.schema.nparams * sizeof(float));
  m.ops.download(s.buffers.data(), m.buffers, m.schema.nbuffers * sizeof(float));
  s.num_batches_tracked = m.batches_tracked;
  return s;
}

void Model::set_state(const ModelState& s) {
  Impl& m = *impl_;
  const size_t np = m.schema.nparams, nb = m.schema.nbuffers;
  if (s.params.size() != np || s.buffers.size() != nb)
    throw std::invalid_argument("model: state has " + std::to_string(s.params.size()) + " parameters and " +
                                std::to_string(s.buffers.size()) + " buffer values, the model " + std::to_string(np) +
                                " and " + std::to_string(nb));
  m.ops.upload(m.params ? m.params : m.grads, s.params.data(), np * sizeof(float));
  m.ops.upload(m.buffers, s.buffers.data(), nb * sizeof(float));
  m.batches_tracked = s.num_batches_tracked;
  if (m.params) m.ops.params_updated();
}

std::vector<ParamView> Model::vector_params() const { return worker::vector_params(impl_->schema); }

std::vector<std::pair<std::string, size_t>> Model::memory_breakdown() const {
  std::vector<std::pair<std::string, size_t>> rows;
  for (MemUse u : kMemUses) rows.emplace_back(mem_use_name(u), impl_->plan.bytes(u));
  return rows;
}

}  // namespace worker
