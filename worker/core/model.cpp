// ResNet v1.5 (torchvision's resnet18/34/50/101/152) on top of the Ops interface.
//
// Layout: parameters are laid out in torchvision's state_dict() order in one flat buffer, so
// backward produces final gradients from the end of the buffer towards its start. Every
// activation that backward needs is allocated once, for the configured batch; gradients of
// activations mostly live in activations that backward has finished with (see backward_block),
// plus one scratch tensor.
// Memory (ResNet-50, batch 256, bf16: 11.5 GB of activations and 1.2 GB of gradient scratch
// before the changes below; now 10.7 GB and 0.4 GB):
//   - a downsample branch's batch-norm output is only read by the block's last batch norm (as
//     its residual), never by backward (no ReLU): it is written into the block's output
//     buffer, which that batch norm then overwrites element by element (y may alias residual);
//   - batch-norm backward writes dx over its input x (the conv output, dead once read) and the
//     residual gradient over its output y (dead once its ReLU mask is read): every backend
//     reads element i of x and y before writing element i of dx and dresidual.
// Recomputation (ModelConfig::recompute, issue 15) changes which activations are kept:
//   - Bn: the batch-norm + ReLU outputs that only feed a convolution (bn1, and each block's inner
//     ones) share one buffer R; backward recomputes each from its convolution's output right
//     before the convolution's backward needs it (allocate_shared_bn_outputs);
//   - Block: the stem's output and the block outputs are kept, in one region in block order;
//     everything inside the stem and a block lives in one arena that backward refills segment by
//     segment (allocate_block_mode); gradients go to dead block outputs (plan_block_gradients).
// A recomputed batch norm writes its batch statistics to a sink: running statistics are
// updated by the forward alone, and backward uses the forward's saved statistics.
#include "worker/core/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <utility>

#include "worker/core/synthetic.h"

namespace worker {

// --- Layers: plain structs of configuration, parameter views and their outputs

namespace {

struct ConvL {
  ConvDesc d;
  ParamView w;  // (C_out, kH, kW, C_in)
  Act out;
  int unit = -1;  // index in Impl::units (gradient-readiness tracking)
};

struct BnL {
  BnDesc d;
  ParamView gamma, beta;  // (C), (C)
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_invstd = nullptr;
  Act out;
  int unit = -1;
};

struct Block {
  bool bottleneck = false;
  ConvL c1, c2, c3;
  BnL b1, b2, b3;
  bool has_ds = false;
  ConvL cd;
  BnL bd;
  const Act* in = nullptr;
  Act* out = nullptr;  // the last BN's output
  // Downsampling blocks: where backward puts the input's gradient. The last conv's output and
  // the block's output are one allocation, both dead by then; null: the scratch S.
  void* din_data = nullptr;
  size_t region_bytes = 0;
};

// A contiguous range of the flat parameter buffer owned by one layer.
struct Unit {
  size_t begin = 0, end = 0;
};

// Initial weights from a counter-based generator: value k of state entry i is a pure function
// of (seed, i, k), so the draw runs on every core of the host and does not depend on how many
// there are (25.6 M values for ResNet-50 took 1.4 s from one sequential generator). The
// distributions are written here: the standard library's are not specified bit-exactly.
constexpr uint64_t kStreamInit = 17;

double uniform_at(uint64_t seed, size_t entry, size_t k) {  // [0, 1)
  return double(synth::hash4(seed, entry, k, kStreamInit) >> 11) * (1.0 / 9007199254740992.0);
}

// Values 2p and 2p + 1 of a normal draw: Box-Muller on one 64-bit hash gives both.
std::pair<double, double> normal_pair_at(uint64_t seed, size_t entry, size_t p) {
  const uint64_t h = synth::hash4(seed, entry, p, kStreamInit);
  const double u1 = (double(h >> 32) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  const double u2 = double(uint32_t(h)) * (1.0 / 4294967296.0);       // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

// fill(k) for k in [0, n), split over the host's cores.
template <typename F>
void parallel_fill(size_t n, F fill) {
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 32);
  const size_t chunk = std::max<size_t>(size_t(1) << 16, (n + threads - 1) / threads);
  std::vector<std::thread> pool;
  for (size_t b = chunk; b < n; b += chunk)
    pool.emplace_back([=] { for (size_t k = b; k < std::min(n, b + chunk); ++k) fill(k); });
  for (size_t k = 0; k < std::min(n, chunk); ++k) fill(k);
  for (auto& t : pool) t.join();
}

int conv_out(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

}  // namespace

// --- Impl

struct Model::Impl {
  ModelConfig cfg;
  Ops& ops;
  std::vector<StateEntry> entries;
  std::vector<Unit> units;
  size_t nparams = 0, nbuffers = 0;
  float* params = nullptr;
  float* grads = nullptr;
  float* buffers = nullptr;
  int64_t batches_tracked = 0;

  Act input;
  int32_t* labels = nullptr;
  ConvL conv1;
  BnL bn1;
  PoolDesc pool_d;
  Act pool_out;
  std::vector<Block> blocks;
  Act avg_out;  // (n, 1, 1, C)
  ParamView fc_w, fc_b;
  int fc_in = 0;
  int fc_unit = -1;
  float* logits = nullptr;
  float* dlogits = nullptr;
  float* loss = nullptr;

  Act grad_s;  // data: activation-gradient scratch S (see backward_block)
  char* o_region = nullptr;      // Block mode: the block outputs, in block order
  char* o_region_end = nullptr;
  char* arena = nullptr;         // Block mode: the recomputed segment
  // Recomputed batch norms' statistics go here (4 x the widest BN): running mean, running
  // variance, mean, invstd -- never read.
  float* bn_sink = nullptr;
  int bn_sink_c = 0;
  void* stem_dx = nullptr;  // where maxpool's backward writes (a dead activation, or S)
  Act d_avg;

  // Bytes the model carved, by what they hold (Model::memory_breakdown).
  size_t mem_params = 0, mem_grads = 0, mem_stats = 0, mem_acts = 0, mem_scratch = 0, mem_io = 0;
  size_t mem_recompute = 0;  // the shared buffer (Bn) or arena (Block) recomputed into

  std::vector<char> unit_done;
  size_t ready_begin = 0;

  Impl(const ModelConfig& c, Ops& o) : cfg(c), ops(o) {}

  // The ImageNet stem ends in a max-pool; without one (Stem::Cifar) bn1's output is the stem's
  // output (pool_out, kept: block 0 reads it), and block 0's input gradient is bn1's.
  bool pooled() const { return cfg.stem == Stem::ImageNet; }

  // --- Construction: entries first (sizes), then memory, then views.

  size_t add_param(const std::string& name, std::vector<int64_t> shape, bool conv_weight) {
    StateEntry e;
    e.name = name;
    e.shape = std::move(shape);
    e.kind = StateKind::Param;
    e.count = 1;
    for (int64_t s : e.shape) e.count *= size_t(s);
    e.offset = nparams;
    e.conv_weight = conv_weight;
    nparams += e.count;
    entries.push_back(e);
    return e.offset;
  }

  // Every activation is some convolution's input or output: the largest one against the
  // backend's limit, with the largest batch that fits.
  void check_tensor_sizes() const {
    int64_t per_sample = 0;
    std::string where;
    std::vector<const ConvL*> convs{&conv1};
    for (const Block& b : blocks)
      for (const ConvL* l : {&b.c1, &b.c2, &b.c3, &b.cd})
        if (l->d.cin) convs.push_back(l);  // c3 of a basic block and a missing downsample: unset
    for (const ConvL* l : convs) {
      const ConvDesc& c = l->d;
      const int64_t in = int64_t(c.h) * c.w * c.cin, out = int64_t(c.ho) * c.wo * c.cout;
      if (std::max(in, out) > per_sample) {
        per_sample = std::max(in, out);
        where = l == &conv1 ? "conv1's output" : "a convolution's " + std::string(out >= in ? "output" : "input");
      }
    }
    const int64_t limit = ops.max_tensor_elements();
    if (per_sample * cfg.batch <= limit) return;
    throw ModelTooLarge("batch " + std::to_string(cfg.batch) + " at " + std::to_string(cfg.image_size) + "x" +
                        std::to_string(cfg.image_size) + " px needs " + std::to_string(per_sample * cfg.batch) +
                        " elements in one tensor (" + where + ", " + std::to_string(per_sample) +
                        " per image), more than this backend takes in one tensor (" + std::to_string(limit) +
                        "): use a batch of at most " + std::to_string(limit / per_sample) +
                        " per micro-batch (--accum-steps adds micro-batches to a step)");
  }

  void add_conv(ConvL& l, const std::string& name, int n, int h, int w, int cin, int cout, int k,
                int stride, int pad) {
    l.d.n = n;
    l.d.h = h;
    l.d.w = w;
    l.d.cin = cin;
    l.d.cout = cout;
    l.d.kh = l.d.kw = k;
    l.d.stride = stride;
    l.d.pad = pad;
    l.d.ho = conv_out(h, k, stride, pad);
    l.d.wo = conv_out(w, k, stride, pad);
    l.w.offset = add_param(name + ".weight", {cout, cin, k, k}, true);
    l.w.count = size_t(cout) * cin * k * k;
    l.unit = int(units.size());
    units.push_back({l.w.offset, l.w.offset + l.w.count});
    l.out = Act{nullptr, ops.compute_dtype(), n, l.d.ho, l.d.wo, cout};
  }

  // Running statistics offsets are remembered in the entries; pointers are set after alloc.
  void add_bn(BnL& l, const std::string& name, int n, int h, int w, int c) {
    l.d.n = n;
    l.d.h = h;
    l.d.w = w;
    l.d.c = c;
    l.gamma = {add_param(name + ".weight", {c}, false), size_t(c)};
    l.beta = {add_param(name + ".bias", {c}, false), size_t(c)};
    l.unit = int(units.size());
    units.push_back({l.gamma.offset, l.beta.offset + l.beta.count});
    for (StateKind k : {StateKind::RunningMean, StateKind::RunningVar}) {
      StateEntry e;
      e.name = name + (k == StateKind::RunningMean ? ".running_mean" : ".running_var");
      e.shape = {c};
      e.kind = k;
      e.offset = nbuffers;
      e.count = size_t(c);
      nbuffers += size_t(c);
      entries.push_back(e);
    }
    StateEntry t;
    t.name = name + ".num_batches_tracked";
    t.shape = {};
    t.kind = StateKind::NumBatchesTracked;
    t.count = 1;
    entries.push_back(t);
    l.out = Act{nullptr, ops.compute_dtype(), n, h, w, c};
  }

  void build() {
    const int d = cfg.depth;
    std::vector<int> counts;
    bool bottleneck = false;
    switch (d) {
      case 18: counts = {2, 2, 2, 2}; break;
      case 34: counts = {3, 4, 6, 3}; break;
      case 50: counts = {3, 4, 6, 3}; bottleneck = true; break;
      case 101: counts = {3, 4, 23, 3}; bottleneck = true; break;
      case 152: counts = {3, 8, 36, 3}; bottleneck = true; break;
      default:
        throw std::invalid_argument("model: depth " + std::to_string(d) +
                                    " is not a ResNet depth (use 18, 34, 50, 101 or 152)");
    }
    if (cfg.width < 1) throw std::invalid_argument("model: width must be >= 1");
    if (cfg.num_classes < 1) throw std::invalid_argument("model: num_classes must be >= 1");
    if (cfg.image_size < 1) throw std::invalid_argument("model: image_size must be >= 1");
    if (cfg.batch < 1) throw std::invalid_argument("model: batch must be >= 1");
    const int n = cfg.batch, expansion = bottleneck ? 4 : 1;

    if (pooled())
      add_conv(conv1, "conv1", n, cfg.image_size, cfg.image_size, 3, cfg.width, 7, 2, 3);
    else
      add_conv(conv1, "conv1", n, cfg.image_size, cfg.image_size, 3, cfg.width, 3, 1, 1);
    add_bn(bn1, "bn1", n, conv1.d.ho, conv1.d.wo, cfg.width);
    // The stem's output: the max-pool's, or without a pool bn1's own (the same memory).
    pool_d.n = n;
    pool_d.h = conv1.d.ho;
    pool_d.w = conv1.d.wo;
    pool_d.c = cfg.width;
    pool_d.ho = pooled() ? conv_out(pool_d.h, 3, 2, 1) : pool_d.h;
    pool_d.wo = pooled() ? conv_out(pool_d.w, 3, 2, 1) : pool_d.w;
    pool_out = Act{nullptr, ops.compute_dtype(), n, pool_d.ho, pool_d.wo, cfg.width};

    int h = pool_d.ho, w = pool_d.wo, inplanes = cfg.width;
    size_t nblocks = 0;
    for (int c : counts) nblocks += size_t(c);
    blocks.resize(nblocks);  // no reallocation afterwards: blocks point at each other's outputs
    size_t bi = 0;
    for (int li = 0; li < 4; ++li) {
      const int planes = cfg.width << li;
      for (int j = 0; j < counts[size_t(li)]; ++j) {
        Block& b = blocks[bi++];
        const std::string p = "layer" + std::to_string(li + 1) + "." + std::to_string(j);
        const int stride = (li > 0 && j == 0) ? 2 : 1;
        b.bottleneck = bottleneck;
        const int ho = conv_out(h, 3, stride, 1), wo = conv_out(w, 3, stride, 1);
        if (bottleneck) {
          add_conv(b.c1, p + ".conv1", n, h, w, inplanes, planes, 1, 1, 0);
          add_bn(b.b1, p + ".bn1", n, h, w, planes);
          add_conv(b.c2, p + ".conv2", n, h, w, planes, planes, 3, stride, 1);
          add_bn(b.b2, p + ".bn2", n, ho, wo, planes);
          add_conv(b.c3, p + ".conv3", n, ho, wo, planes, planes * expansion, 1, 1, 0);
          add_bn(b.b3, p + ".bn3", n, ho, wo, planes * expansion);
        } else {
          add_conv(b.c1, p + ".conv1", n, h, w, inplanes, planes, 3, stride, 1);
          add_bn(b.b1, p + ".bn1", n, ho, wo, planes);
          add_conv(b.c2, p + ".conv2", n, ho, wo, planes, planes, 3, 1, 1);
          add_bn(b.b2, p + ".bn2", n, ho, wo, planes);
        }
        b.has_ds = stride != 1 || inplanes != planes * expansion;
        if (b.has_ds) {
          add_conv(b.cd, p + ".downsample.0", n, h, w, inplanes, planes * expansion, 1, stride, 0);
          add_bn(b.bd, p + ".downsample.1", n, ho, wo, planes * expansion);
        }
        inplanes = planes * expansion;
        h = ho;
        w = wo;
      }
    }
    fc_in = inplanes;
    fc_w = {add_param("fc.weight", {cfg.num_classes, fc_in}, false),
            size_t(cfg.num_classes) * size_t(fc_in)};
    fc_b = {add_param("fc.bias", {cfg.num_classes}, false), size_t(cfg.num_classes)};
    fc_unit = int(units.size());
    units.push_back({fc_w.offset, fc_b.offset + fc_b.count});
    unit_done.assign(units.size(), 0);

    check_tensor_sizes();
    allocate();
  }

  void* carve(size_t bytes, size_t& counter) {
    counter += bytes;
    return ops.alloc(bytes);
  }

  Act alloc_act(Act a) {
    a.data = carve(a.bytes(), mem_acts);
    return a;
  }

  void alloc_stats(BnL& l) {
    l.save_mean = static_cast<float*>(carve(size_t(l.d.c) * sizeof(float), mem_stats));
    l.save_invstd = static_cast<float*>(carve(size_t(l.d.c) * sizeof(float), mem_stats));
  }

  // In Bn mode the outputs of bn1 and of each block's inner batch norms are recomputed (their
  // memory is R, set by allocate_shared_bn_outputs); the rest are kept.
  bool shared_output(const BnL& l) const {
    if (cfg.recompute != Recompute::Bn) return false;
    if (&l == &bn1) return pooled();
    for (const Block& b : blocks)
      if (&l == &b.b1 || (b.bottleneck && &l == &b.b2)) return true;
    return false;
  }

  void alloc_bn(BnL& l) {
    if (!shared_output(l)) l.out = alloc_act(l.out);
    alloc_stats(l);
  }

  void allocate_shared_bn_outputs() {
    std::vector<BnL*> shared;
    if (pooled()) shared.push_back(&bn1);
    for (Block& b : blocks) {
      shared.push_back(&b.b1);
      if (b.bottleneck) shared.push_back(&b.b2);
    }
    size_t bytes = 0;
    for (const BnL* l : shared) bytes = std::max(bytes, l->out.bytes());
    void* r = carve(bytes, mem_recompute);
    for (BnL* l : shared) l->out.data = r;
  }

  // The sink for recomputed batch norms' statistics (Bn and Block modes).
  void allocate_bn_sink() {
    bn_sink_c = bn1.d.c;
    for (const Block& b : blocks)
      for (const BnL* l : {&b.b1, &b.b2, &b.b3, &b.bd}) bn_sink_c = std::max(bn_sink_c, l->d.c);
    bn_sink = static_cast<float*>(carve(4 * size_t(bn_sink_c) * sizeof(float), mem_stats));
  }

  void allocate() {
    if (cfg.whole_params) params = static_cast<float*>(carve(nparams * sizeof(float), mem_params));
    grads = static_cast<float*>(carve(nparams * sizeof(float), mem_grads));
    buffers = static_cast<float*>(carve(nbuffers * sizeof(float), mem_stats));
    ops.bind_params(params, grads, nparams);

    // Running statistics pointers, in entry order (which is also each BN's creation order).
    std::vector<BnL*> bns{&bn1};
    for (Block& b : blocks) {
      for (BnL* l : {&b.b1, &b.b2}) bns.push_back(l);
      if (b.bottleneck) bns.push_back(&b.b3);
      if (b.has_ds) bns.push_back(&b.bd);
    }
    size_t k = 0;
    for (const StateEntry& e : entries) {
      if (e.kind == StateKind::RunningMean) bns[k]->running_mean = buffers + e.offset;
      if (e.kind == StateKind::RunningVar) bns[k++]->running_var = buffers + e.offset;
    }

    const DType dt = ops.compute_dtype();
    const int n = cfg.batch;
    input = Act{nullptr, dt, n, cfg.image_size, cfg.image_size, 3};
    input.data = carve(input.bytes(), mem_io);
    labels = static_cast<int32_t*>(carve(size_t(n) * sizeof(int32_t), mem_io));

    if (cfg.recompute == Recompute::Block) {
      allocate_block_mode(dt);
    } else {
      allocate_kept();
      if (cfg.recompute == Recompute::Bn) allocate_shared_bn_outputs();
      plan_gradient_memory(dt);
    }
    if (cfg.recompute != Recompute::None) allocate_bn_sink();
    avg_out = alloc_act(Act{nullptr, dt, n, 1, 1, fc_in});
    d_avg = Act{nullptr, dt, n, 1, 1, fc_in};
    d_avg.data = carve(d_avg.bytes(), mem_scratch);
    const size_t nl = size_t(n) * size_t(cfg.num_classes);
    logits = static_cast<float*>(carve(nl * sizeof(float), mem_io));
    dlogits = static_cast<float*>(carve(nl * sizeof(float), mem_io));
    loss = static_cast<float*>(carve(sizeof(float), mem_io));
  }

  // Modes None and Bn: every activation has its own memory (but Bn's shared outputs).
  void allocate_kept() {
    auto conv = [&](ConvL& l) {
      l.out = alloc_act(l.out);
      ops.register_conv(l.d, l.w);
    };
    conv(conv1);
    if (pooled()) {
      alloc_bn(bn1);
      pool_out = alloc_act(pool_out);
    } else {
      pool_out = alloc_act(pool_out);
      bn1.out.data = pool_out.data;
      alloc_stats(bn1);
    }
    const Act* prev = &pool_out;
    // A downsampling block's last conv output and its output, adjacent: one region.
    auto conv_bn_pair = [&](Block& b, ConvL& lc, BnL& lb) {
      if (!b.has_ds) {
        conv(lc);
        alloc_bn(lb);
        return;
      }
      const size_t a = (lc.out.bytes() + 255) & ~size_t(255);  // keeps lb.out 256-byte aligned
      b.region_bytes = a + lb.out.bytes();
      char* p = static_cast<char*>(carve(b.region_bytes, mem_acts));
      lc.out.data = p;
      ops.register_conv(lc.d, lc.w);
      lb.out.data = p + a;
      alloc_stats(lb);
    };
    for (Block& b : blocks) {
      b.in = prev;
      conv(b.c1);
      alloc_bn(b.b1);
      if (b.bottleneck) {
        conv(b.c2);
        alloc_bn(b.b2);
        conv_bn_pair(b, b.c3, b.b3);
      } else {
        conv_bn_pair(b, b.c2, b.b2);
      }
      b.out = b.bottleneck ? &b.b3.out : &b.b2.out;
      if (b.has_ds) {
        conv(b.cd);
        alloc_stats(b.bd);
        b.bd.out.data = b.out->data;  // the residual, overwritten by the block's output
      }
      prev = b.out;
    }
  }

  // --- Block mode: what is kept, and the arena everything else is recomputed into.

  static size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }

  // The activations of one recomputed segment (the stem, or a block), laid out back to back.
  std::vector<Act*> segment(Block* b) {
    if (!b) return pooled() ? std::vector<Act*>{&conv1.out, &bn1.out} : std::vector<Act*>{&conv1.out};
    std::vector<Act*> acts{&b->c1.out, &b->b1.out, &b->c2.out};
    if (b->bottleneck) acts.insert(acts.end(), {&b->b2.out, &b->c3.out});
    if (b->has_ds) acts.push_back(&b->cd.out);
    return acts;
  }

  void allocate_block_mode(DType dt) {
    ops.register_conv(conv1.d, conv1.w);
    alloc_stats(bn1);
    pool_out = alloc_act(pool_out);
    // The block outputs, adjacent in block order (plan_block_gradients relies on it).
    size_t region = 0;
    std::vector<size_t> at;
    for (Block& b : blocks) {
      b.out = b.bottleneck ? &b.b3.out : &b.b2.out;
      at.push_back(region);
      region += aligned(b.out->bytes());
    }
    o_region = static_cast<char*>(carve(region, mem_acts));
    o_region_end = o_region + region;
    const Act* prev = &pool_out;
    for (size_t i = 0; i < blocks.size(); ++i) {
      Block& b = blocks[i];
      b.in = prev;
      b.out->data = o_region + at[i];
      for (ConvL* l : {&b.c1, &b.c2, &b.c3, &b.cd})
        if (l->w.count) ops.register_conv(l->d, l->w);
      for (BnL* l : {&b.b1, &b.b2, &b.b3, &b.bd})
        if (l->d.c) alloc_stats(*l);
      if (b.has_ds) b.bd.out.data = b.out->data;  // the residual, overwritten by the block's output
      prev = b.out;
    }
    // The arena: the largest segment; each segment's tensors from its start.
    size_t arena_bytes = 0;
    auto lay_out = [&](Block* b, char* base) {
      size_t off = 0;
      for (Act* a : segment(b)) {
        if (base) a->data = base + off;
        off += aligned(a->bytes());
      }
      return off;
    };
    arena_bytes = lay_out(nullptr, nullptr);
    for (Block& b : blocks) arena_bytes = std::max(arena_bytes, lay_out(&b, nullptr));
    plan_block_gradients(dt, arena_bytes);
    arena = static_cast<char*>(carve(arena_bytes, mem_recompute));
    lay_out(nullptr, arena);
    for (Block& b : blocks) lay_out(&b, arena);
    if (!pooled()) bn1.out.data = pool_out.data;
    else if (!stem_dx) stem_dx = arena + aligned(conv1.out.bytes()) + aligned(bn1.out.bytes());
  }

  // Block mode. At block i's backward everything in the output region from O_i on is dead (those
  // blocks are done, O_i once its ReLU mask is read), so: block i's output gradient is at
  // O_{i+1} (block i + 1's input gradient) and the gradients between its layers go there too; a
  // downsampling block's input gradient goes to O_i, spilling over into O_{i+1}, ...; without a
  // downsample it accumulates in O_i over the residual gradient. The top block's output gradient
  // is in S. The stem's bn1 gradient goes after the pool gradient in the region, else to the
  // arena after the stem's activations (the arena grows for it).
  void plan_block_gradients(DType dt, size_t& arena_bytes) {
    const size_t nb = blocks.size();
    auto room_from = [&](const Act& a) { return size_t(o_region_end - static_cast<char*>(a.data)); };
    for (size_t i = 0; i < nb; ++i) {
      Block& b = blocks[i];
      size_t need = b.out->bytes();
      for (const Act* a : segment(&b)) need = std::max(need, a == &b.cd.out ? 0 : a->bytes());
      if (i + 1 < nb && room_from(*blocks[i + 1].out) < need)
        throw std::logic_error("model: block " + std::to_string(i) + ": no room for its gradients (block recompute plan)");
      if (b.has_ds) {
        if (room_from(*b.out) < b.in->bytes())
          throw std::logic_error("model: block " + std::to_string(i) + ": no room for its input gradient (block recompute plan)");
        b.din_data = b.out->data;
      }
    }
    Block& top = blocks.back();
    size_t s_bytes = top.out->bytes();
    for (const Act* a : segment(&top)) s_bytes = std::max(s_bytes, a->bytes());
    grad_s.dtype = dt;
    grad_s.data = carve(s_bytes, mem_scratch);
    if (!pooled()) return;  // bn1's output gradient is block 0's input gradient
    // The pool's gradient sits at O_0 (size of the pool output); bn1's goes after it if it fits.
    char* after_pool = static_cast<char*>(blocks[0].out->data) + aligned(pool_out.bytes());
    if (size_t(o_region_end - after_pool) >= bn1.out.bytes()) {
      stem_dx = after_pool;
    } else {
      stem_dx = nullptr;  // at the arena's end (allocate_block_mode)
      arena_bytes = std::max(arena_bytes, aligned(conv1.out.bytes()) + aligned(bn1.out.bytes()) + bn1.out.bytes());
    }
  }

  // S holds the gradient reaching the last block's output. Each downsampling block's input
  // gradient (larger than its output) goes to the block's [last conv output | output] region
  // when it fits (every torchvision depth), else to S. maxpool's backward writes bn1's output
  // gradient into the largest dead activation that fits, else into S when S is free then.
  void plan_gradient_memory(DType dt) {
    const size_t nb = blocks.size();
    size_t s_bytes = blocks.back().out->bytes();
    for (size_t i = 0; i < nb; ++i) {
      Block& b = blocks[i];
      // The gradients between a block's layers go where its output gradient was.
      if (b.b1.out.numel() > b.out->numel() || b.b2.out.numel() > b.out->numel())
        throw std::logic_error("model: block " + std::to_string(i) + " has an inner activation larger than its output");
      if (!b.has_ds) continue;
      if (b.region_bytes >= b.in->bytes()) {
        b.din_data = b.c3.out.data ? b.c3.out.data : b.c2.out.data;  // the region's start
        continue;
      }
      s_bytes = std::max(s_bytes, b.in->bytes());
      // The block's output gradient must not be in S too (S holds it at the top, or when the
      // next block's input gradient is in S as well).
      if (i + 1 == nb || (blocks[i + 1].has_ds && !blocks[i + 1].din_data))
        throw std::logic_error("model: block " + std::to_string(i) +
                               ": no place for its input gradient (gradient memory plan)");
    }
    if (!pooled()) {  // bn1's output gradient is block 0's input gradient
      grad_s.dtype = dt;
      grad_s.data = carve(s_bytes, mem_scratch);
      return;
    }
    const size_t stem = bn1.out.bytes();
    const bool pool_grad_in_s = blocks[0].has_ds && !blocks[0].din_data;
    // Dead by then and outside every region and block output (which may hold the gradient).
    const Act* best = nullptr;
    for (const Block& b : blocks) {
      std::vector<const Act*> dead{&b.c1.out, &b.b1.out, &b.cd.out};
      if (b.bottleneck) dead.insert(dead.end(), {&b.c2.out, &b.b2.out});
      const bool shared = cfg.recompute == Recompute::Bn;  // b1, b2 are R: live during the stem's backward
      for (const Act* a : dead)
        if (a->data && !(shared && (a == &b.b1.out || a == &b.b2.out)) && a->bytes() >= stem &&
            (!best || a->bytes() > best->bytes()))
          best = a;
    }
    if (!best && !pool_grad_in_s) s_bytes = std::max(s_bytes, stem);
    grad_s.dtype = dt;
    grad_s.data = carve(s_bytes, mem_scratch);
    if (best)
      stem_dx = best->data;
    else if (!pool_grad_in_s)
      stem_dx = grad_s.data;
    else
      stem_dx = carve(stem, mem_scratch);
  }

  // Scratch tensors reshaped to the activation they hold the gradient of.
  static Act like(const Act& scratch, const Act& shape) {
    Act a = shape;
    a.data = scratch.data;
    return a;
  }

  // --- Forward

  void bn_fwd(BnL& l, const Act& x, const Act* residual, bool relu, bool train) {
    if (train) {
      ops.bn_forward_train(l.d, x, l.gamma, l.beta, l.running_mean, l.running_var, l.save_mean,
                           l.save_invstd, residual, relu, l.out);
    } else {
      ops.bn_forward_eval(l.d, x, l.gamma, l.beta, l.running_mean, l.running_var, residual, relu,
                          l.out);
    }
  }

  void forward(bool train, float grad_scale) {
    ops.conv_forward(conv1.d, input, conv1.w, conv1.out);
    bn_fwd(bn1, conv1.out, nullptr, true, train);
    if (pooled()) ops.maxpool_forward(pool_d, bn1.out, pool_out);
    for (Block& b : blocks) {
      ops.conv_forward(b.c1.d, *b.in, b.c1.w, b.c1.out);
      bn_fwd(b.b1, b.c1.out, nullptr, true, train);
      ops.conv_forward(b.c2.d, b.b1.out, b.c2.w, b.c2.out);
      const Act* residual = b.in;
      if (b.has_ds) {
        ops.conv_forward(b.cd.d, *b.in, b.cd.w, b.cd.out);
        bn_fwd(b.bd, b.cd.out, nullptr, false, train);
        residual = &b.bd.out;
      }
      if (b.bottleneck) {
        bn_fwd(b.b2, b.c2.out, nullptr, true, train);
        ops.conv_forward(b.c3.d, b.b2.out, b.c3.w, b.c3.out);
        bn_fwd(b.b3, b.c3.out, residual, true, train);
      } else {
        bn_fwd(b.b2, b.c2.out, residual, true, train);
      }
    }
    ops.avgpool_forward(*blocks.back().out, avg_out);
    ops.fc_forward(avg_out, fc_w, fc_b, cfg.num_classes, logits);
    ops.softmax_xent(cfg.batch, cfg.num_classes, logits, labels, grad_scale, cfg.label_smoothing, loss,
                     dlogits);
    if (train) ++batches_tracked;
  }

  // --- Backward

  // Marks a layer's gradients final and reports the newly final suffix of the buffer.
  void unit_ready(int u) {
    unit_done[size_t(u)] = 1;
    // The frontier is the start of the longest run of finished layers at the end of the buffer
    // (a block's downsample branch finishes before its main branch, so runs can have gaps).
    size_t frontier = ready_begin;
    for (int i = int(units.size()) - 1; i >= 0 && unit_done[size_t(i)]; --i)
      frontier = units[size_t(i)].begin;
    if (frontier < ready_begin) {
      if (on_grads_ready) on_grads_ready(frontier, ready_begin);
      ready_begin = frontier;
    }
  }

  void conv_bwd(ConvL& l, const Act& x, const Act& dy, Act* dx, bool accumulate) {
    ops.conv_backward(l.d, x, l.w, dy, dx, accumulate, l.w);
    unit_ready(l.unit);
  }

  void bn_bwd(BnL& l, const Act& x, const Act& dy, bool relu, Act& dx, Act* dres, const Act* dy2 = nullptr) {
    ops.bn_backward(l.d, x, l.out, dy, l.gamma, l.save_mean, l.save_invstd, relu, dx, dres,
                    l.gamma, l.beta, dy2);
    unit_ready(l.unit);
  }

  // A batch norm's output again, from the same input by the forward's kernel (so the same
  // bits); its statistics go to the sink, backward keeps using the forward's.
  void recompute_bn(BnL& l, const Act& x) {
    const size_t c = size_t(bn_sink_c);
    ops.bn_forward_train(l.d, x, l.gamma, l.beta, bn_sink, bn_sink + c, bn_sink + 2 * c, bn_sink + 3 * c, nullptr,
                         true, l.out);
  }

  // Block mode: the block's forward again into the arena, but for its last batch norm (whose
  // output is the kept block output) and the downsample's (whose output only fed that one).
  void recompute_block(Block& b) {
    ops.conv_forward(b.c1.d, *b.in, b.c1.w, b.c1.out);
    recompute_bn(b.b1, b.c1.out);
    ops.conv_forward(b.c2.d, b.b1.out, b.c2.w, b.c2.out);
    if (b.bottleneck) {
      recompute_bn(b.b2, b.c2.out);
      ops.conv_forward(b.c3.d, b.b2.out, b.c3.w, b.c3.out);
    }
    if (b.has_ds) ops.conv_forward(b.cd.d, *b.in, b.cd.w, b.cd.out);
  }

  // A block input's gradient: `a`, plus `b` where b.data is set (see backward_block).
  struct Grad {
    Act a, b;
    const Act* second() const { return b.data ? &b : nullptr; }
  };

  // `dout` (a in buffer G, dead once the last BN's backward has read it, like b) holds the
  // gradient of the block's output; returns the gradient of its input. Where each gradient goes:
  //   - every BN's dx over its input x, the conv output (dead once read);
  //   - the residual gradient over the block's output O (dead once its ReLU mask is read);
  //     without a downsample, O (same shape as the input) then accumulates the input gradient
  //     (or, with `split` below, holds its identity part);
  //   - with a downsample, the input gradient goes to the [last conv output | O] region (see
  //     plan_gradient_memory), once both are dead: the main branch's input gradient first,
  //     then the downsample branch's added to it;
  //   - the gradients between the block's layers to G (each fits: at most the output's size);
  //   - with `split` (no downsample, and a block before this one), the first convolution's
  //     share of the input gradient to G as well (dead by then; the input's size is the
  //     output's), returned as the second part instead of added into O: the block before adds
  //     the two in its last batch norm's backward, whose reduction reads its output gradient
  //     anyway. (An accumulating data gradient is cuDNN's slowest convolution per byte: 1x1
  //     256->64 56x56 bf16 b256 took 0.35 ms with beta 1 against 0.16 ms with beta 0 on an H200.)
  Grad backward_block(Block& b, const Grad& dout, bool split) {
    BnL& last = b.bottleneck ? b.b3 : b.b2;
    ConvL& last_conv = b.bottleneck ? b.c3 : b.c2;
    Act d_last = last_conv.out;
    Act dres = *b.out;
    Act din = *b.in;
    din.data = !b.has_ds ? dres.data : b.din_data ? b.din_data : grad_s.data;
    bn_bwd(last, last_conv.out, dout.a, true, d_last, &dres, dout.second());
    Act dd = b.cd.out;
    if (b.has_ds) bn_bwd(b.bd, b.cd.out, dres, false, dd, nullptr);
    const Act& dout_s = dout.a;
    if (b.bottleneck) {
      Act db2 = like(dout_s, b.b2.out);
      if (cfg.recompute == Recompute::Bn) recompute_bn(b.b2, b.c2.out);
      conv_bwd(b.c3, b.b2.out, d_last, &db2, false);
      Act dc2 = b.c2.out;
      bn_bwd(b.b2, b.c2.out, db2, true, dc2, nullptr);
      d_last = dc2;
    }
    Act db1 = like(dout_s, b.b1.out);
    if (cfg.recompute == Recompute::Bn) recompute_bn(b.b1, b.c1.out);
    conv_bwd(b.c2, b.b1.out, d_last, &db1, false);
    Act dc1 = b.c1.out;
    bn_bwd(b.b1, b.c1.out, db1, true, dc1, nullptr);
    if (split && !b.has_ds) {
      Act g = like(dout_s, *b.in);
      conv_bwd(b.c1, *b.in, dc1, &g, false);
      return {din, g};
    }
    conv_bwd(b.c1, *b.in, dc1, &din, !b.has_ds);
    if (b.has_ds) conv_bwd(b.cd, *b.in, dd, &din, true);
    return {din, {}};
  }

  void backward() {
    std::fill(unit_done.begin(), unit_done.end(), 0);
    ready_begin = nparams;
    ops.fc_backward(avg_out, fc_w, dlogits, cfg.num_classes, d_avg, fc_w, fc_b);
    unit_ready(fc_unit);
    Grad g{like(grad_s, *blocks.back().out), {}};
    ops.avgpool_backward(d_avg, g.a);
    for (size_t i = blocks.size(); i-- > 0;) {
      if (cfg.recompute == Recompute::Block) recompute_block(blocks[i]);
      g = backward_block(blocks[i], g, /*split=*/i > 0);
    }
    if (cfg.recompute == Recompute::Block) ops.conv_forward(conv1.d, input, conv1.w, conv1.out);
    Act dbn1 = bn1.out;
    if (pooled()) {
      if (cfg.recompute != Recompute::None) recompute_bn(bn1, conv1.out);
      dbn1.data = stem_dx;
      ops.maxpool_backward(pool_d, bn1.out, pool_out, g.a, dbn1);  // block 0 is never split
    } else {
      dbn1.data = g.a.data;  // bn1's output is block 0's input, kept
    }
    Act dc1 = conv1.out;
    bn_bwd(bn1, conv1.out, dbn1, true, dc1, nullptr);
    conv_bwd(conv1, input, dc1, nullptr, false);
  }

  std::function<void(size_t, size_t)> on_grads_ready;
};

// --- Model

Model::Model(const ModelConfig& cfg, Ops& ops) : impl_(std::make_unique<Impl>(cfg, ops)) {
  impl_->build();
}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const std::vector<StateEntry>& Model::state_entries() const { return impl_->entries; }
size_t Model::num_params() const { return impl_->nparams; }
size_t Model::num_buffers() const { return impl_->nbuffers; }
float* Model::params() { return impl_->params; }
float* Model::grads() { return impl_->grads; }
float* Model::buffers() { return impl_->buffers; }
Act& Model::input() { return impl_->input; }
int32_t* Model::labels() { return impl_->labels; }
int64_t Model::num_batches_tracked() const { return impl_->batches_tracked; }

void Model::init(uint64_t seed) {
  Impl& m = *impl_;
  ModelState s;
  s.params.assign(m.nparams, 0.0f);
  s.buffers.assign(m.nbuffers, 0.0f);
  std::vector<float> tmp;
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const StateEntry& e = m.entries[i];
    float* dst = s.params.data() + e.offset;
    if (e.kind == StateKind::RunningVar) {
      std::fill_n(s.buffers.begin() + long(e.offset), e.count, 1.0f);
    } else if (e.kind != StateKind::Param) {
      continue;
    } else if (e.conv_weight) {
      // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (C_out * kH * kW)),
      // drawn in PyTorch's OIHW order, stored OHWI.
      const int o = int(e.shape[0]), ci = int(e.shape[1]), kh = int(e.shape[2]),
                kw = int(e.shape[3]);
      const double sd = std::sqrt(2.0 / double(o * kh * kw));
      tmp.resize(e.count);
      parallel_fill((e.count + 1) / 2, [&](size_t p) {
        const auto [a, b] = normal_pair_at(seed, i, p);
        tmp[2 * p] = float(sd * a);
        if (2 * p + 1 < e.count) tmp[2 * p + 1] = float(sd * b);
      });
      oihw_to_ohwi(tmp.data(), dst, o, ci, kh, kw);
    } else if (e.name == "fc.weight" || e.name == "fc.bias") {
      // nn.Linear's default: kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)); bias same.
      const double bound = 1.0 / std::sqrt(double(m.fc_in));
      parallel_fill(e.count, [&](size_t k) { dst[k] = float((2.0 * uniform_at(seed, i, k) - 1.0) * bound); });
    } else {
      // BN: weight 1, bias 0.
      const bool is_weight = e.name.size() > 7 && e.name.compare(e.name.size() - 7, 7, ".weight") == 0;
      std::fill_n(dst, e.count, is_weight ? 1.0f : 0.0f);
    }
  }
  s.num_batches_tracked = 0;
  set_state(s);
}

void Model::forward_backward(float grad_scale) {
  impl_->on_grads_ready = on_grads_ready;
  impl_->forward(true, grad_scale);
  impl_->backward();
}

void Model::count_replayed_forward() { ++impl_->batches_tracked; }

void Model::forward_eval() { impl_->forward(false, 1.0f); }

void Model::set_label_smoothing(float e) { impl_->cfg.label_smoothing = e; }

float Model::last_loss() {
  float v = 0;
  impl_->ops.synchronize();
  impl_->ops.download(&v, impl_->loss, sizeof(float));
  return v;
}

std::vector<float> Model::last_logits() {
  std::vector<float> v(size_t(impl_->cfg.batch) * size_t(impl_->cfg.num_classes));
  impl_->ops.synchronize();
  impl_->ops.download(v.data(), impl_->logits, v.size() * sizeof(float));
  return v;
}

ModelState Model::get_state() {
  Impl& m = *impl_;
  ModelState s;
  s.params.resize(m.nparams);
  s.buffers.resize(m.nbuffers);
  m.ops.synchronize();
  m.ops.download(s.params.data(), m.params ? m.params : m.grads, m.nparams * sizeof(float));
  m.ops.download(s.buffers.data(), m.buffers, m.nbuffers * sizeof(float));
  s.num_batches_tracked = m.batches_tracked;
  return s;
}

void Model::set_state(const ModelState& s) {
  Impl& m = *impl_;
  if (s.params.size() != m.nparams || s.buffers.size() != m.nbuffers)
    throw std::invalid_argument("model: state has " + std::to_string(s.params.size()) +
                                " parameters and " + std::to_string(s.buffers.size()) +
                                " buffer values, the model " + std::to_string(m.nparams) +
                                " and " + std::to_string(m.nbuffers));
  m.ops.upload(m.params ? m.params : m.grads, s.params.data(), m.nparams * sizeof(float));
  m.ops.upload(m.buffers, s.buffers.data(), m.nbuffers * sizeof(float));
  m.batches_tracked = s.num_batches_tracked;
  if (m.params) m.ops.params_updated();
}

std::vector<ParamView> Model::vector_params() const {
  std::vector<ParamView> v;
  for (const StateEntry& e : impl_->entries)
    if (e.kind == StateKind::Param && e.shape.size() == 1) v.push_back({e.offset, e.count});
  std::sort(v.begin(), v.end(), [](const ParamView& a, const ParamView& b) { return a.offset < b.offset; });
  return v;
}

std::vector<std::pair<std::string, size_t>> Model::memory_breakdown() const {
  const Impl& m = *impl_;
  return {{"params fp32", m.mem_params},
          {"grads fp32", m.mem_grads},
          {"running + saved BN statistics", m.mem_stats},
          {"activations kept for backward", m.mem_acts},
          {"activation-gradient scratch", m.mem_scratch},
          {"recomputed activations (shared)", m.mem_recompute},
          {"input, labels, logits", m.mem_io}};
}

// --- Layout conversion

void oihw_to_ohwi(const float* src, float* dst, int o, int i, int kh, int kw) {
  for (int a = 0; a < o; ++a)
    for (int b = 0; b < i; ++b)
      for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x)
          dst[((size_t(a) * kh + y) * kw + x) * i + b] = src[((size_t(a) * i + b) * kh + y) * kw + x];
}

void ohwi_to_oihw(const float* src, float* dst, int o, int i, int kh, int kw) {
  for (int a = 0; a < o; ++a)
    for (int b = 0; b < i; ++b)
      for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x)
          dst[((size_t(a) * i + b) * kh + y) * kw + x] = src[((size_t(a) * kh + y) * kw + x) * i + b];
}

}  // namespace worker
