// The ResNet's passes. Every activation lives where the memory plan put it; gradients of
// activations mostly in activations backward has finished with (see backward_block), plus the
// scratch S. Recomputation (memory_plan.h) changes which activations are there when backward
// needs them:
//   - Bn: the batch-norm + ReLU outputs that only feed a convolution share one buffer; backward
//     recomputes each from its convolution's output right before the convolution's backward;
//   - Block: backward refills the arena with a block's convolutions and batch norms (the stem's
//     last), then runs its backward.
// A recomputed batch norm writes its batch statistics to a sink: running statistics are
// updated by the forward alone, and backward uses the forward's saved statistics.
#include "worker/model/resnet.h"

#include <algorithm>
#include <utility>

namespace worker {

// --- Layers bound to memory: the schema's, with their tensors

namespace {

struct ConvL {
  ConvDesc d;
  ParamView w;  // (C_out, kH, kW, C_in)
  int unit = -1;
  Act out;
};

struct BnL {
  BnDesc d;
  ParamView gamma, beta;  // (C), (C)
  int unit = -1;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_invstd = nullptr;
  Act out;
};

struct Block {
  bool bottleneck = false;
  bool has_ds = false;
  ConvL c1, c2, c3, cd;
  BnL b1, b2, b3, bd;
  const Act* in = nullptr;
  Act* out = nullptr;  // the last BN's output
  // Downsampling blocks: where backward puts the input's gradient (see backward_block); null:
  // the scratch S.
  void* din_data = nullptr;
};

// The schema's layers with the plan's places resolved in the carved buffers.
struct Binder {
  const std::vector<void*>& memory;
  DType dtype;
  float* stats;  // the running statistics

  void* at(const Place& p) const {
    return p.placed() ? static_cast<char*>(memory[size_t(p.buffer)]) + p.offset : nullptr;
  }
  float* at_f(const Place& p) const { return static_cast<float*>(at(p)); }
  Act act(const ActShape& s, const Place& p) const { return Act{at(p), dtype, s.n, s.h, s.w, s.c}; }

  ConvL conv(const ConvLayer& l, const Place& out) const { return {l.d, l.w, l.unit, act(l.out(), out)}; }
  BnL bn(const BnLayer& l, const BnPlaces& p) const {
    BnL b;
    b.d = l.d;
    b.gamma = l.gamma;
    b.beta = l.beta;
    b.unit = l.unit;
    b.running_mean = stats + l.running_mean;
    b.running_var = stats + l.running_var;
    b.save_mean = at_f(p.save_mean);
    b.save_invstd = at_f(p.save_invstd);
    b.out = act(l.out(), p.out);
    return b;
  }
};

// Scratch tensors reshaped to the activation they hold the gradient of.
Act like(const Act& scratch, const Act& shape) {
  Act a = shape;
  a.data = scratch.data;
  return a;
}

}  // namespace

struct ResNet::Net {
  Ops& ops;
  Recompute mode;
  bool pooled;
  int batch, classes;
  size_t nparams;

  Act input;
  int32_t* labels = nullptr;
  ConvL conv1;
  BnL bn1;
  PoolDesc pool_d;
  Act pool_out;
  std::vector<Block> blocks;
  Act avg_out;  // (n, 1, 1, C)
  Act d_avg;
  ParamView fc_w, fc_b;
  int fc_unit = -1;
  float* logits = nullptr;
  float* dlogits = nullptr;
  float* loss = nullptr;
  Act grad_s;  // data: activation-gradient scratch S (see backward_block)
  // Recomputed batch norms' statistics go here (4 x the widest BN): running mean, running
  // variance, mean, invstd -- never read.
  float* bn_sink = nullptr;
  int bn_sink_c = 0;
  void* stem_dx = nullptr;  // where maxpool's backward writes (a dead activation, or S)

  std::vector<Unit> units;
  std::vector<char> unit_done;
  size_t ready_begin = 0;
  std::function<void(size_t, size_t)> on_grads_ready;

  Net(const Schema& s, const MemoryPlan& p, const std::vector<void*>& memory, Ops& o)
      : ops(o), mode(p.mode), pooled(s.pooled), batch(s.batch), classes(s.num_classes), nparams(s.nparams) {
    Binder m{memory, ops.compute_dtype(), nullptr};
    m.stats = m.at_f(p.stats);
    input = m.act(s.input(), p.input);
    labels = static_cast<int32_t*>(m.at(p.labels));
    conv1 = m.conv(s.conv1, p.conv1);
    bn1 = m.bn(s.bn1, p.bn1);
    pool_d = s.pool;
    pool_out = m.act(s.stem_out(), p.stem_out);
    blocks.resize(s.blocks.size());  // no reallocation afterwards: blocks point at each other's outputs
    const Act* prev = &pool_out;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const BlockLayers& l = s.blocks[i];
      const BlockPlaces& q = p.blocks[i];
      Block& b = blocks[i];
      b.bottleneck = l.bottleneck;
      b.has_ds = l.has_ds;
      b.c1 = m.conv(l.c1, q.c1);
      b.c2 = m.conv(l.c2, q.c2);
      b.c3 = m.conv(l.c3, q.c3);
      b.cd = m.conv(l.cd, q.cd);
      b.b1 = m.bn(l.b1, q.b1);
      b.b2 = m.bn(l.b2, q.b2);
      b.b3 = m.bn(l.b3, q.b3);
      b.bd = m.bn(l.bd, q.bd);
      b.in = prev;
      b.out = b.bottleneck ? &b.b3.out : &b.b2.out;
      b.din_data = m.at(q.din);
      prev = b.out;
    }
    const ActShape avg{s.batch, 1, 1, s.fc_in};
    avg_out = m.act(avg, p.avg_out);
    d_avg = m.act(avg, p.d_avg);
    fc_w = s.fc_w;
    fc_b = s.fc_b;
    fc_unit = s.fc_unit;
    logits = m.at_f(p.logits);
    dlogits = m.at_f(p.dlogits);
    loss = m.at_f(p.loss);
    grad_s.dtype = ops.compute_dtype();
    grad_s.data = m.at(p.grad_s);
    bn_sink = m.at_f(p.bn_sink);
    bn_sink_c = p.bn_sink_c;
    stem_dx = m.at(p.stem_dx);
    units = s.units;
    unit_done.assign(units.size(), 0);
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

  static Ops::BnSide side(const BnL& l, const Act& x) {
    return {l.d, x, l.gamma, l.beta, l.running_mean, l.running_var, l.save_mean, l.save_invstd};
  }

  // A batch norm + ReLU inside a block and the convolution that reads it (its one reader): in training, one
  // call, so that a backend may apply the batch norm as the convolution reads its input.
  void bn_relu_conv(BnL& l, const Act& x, ConvL& c, bool train) {
    if (train) {
      ops.bn_relu_conv_forward_train(side(l, x), l.out, c.d, c.w, c.out);
    } else {
      bn_fwd(l, x, nullptr, true, false);
      ops.conv_forward(c.d, l.out, c.w, c.out);
    }
  }

  void forward(bool train, float grad_scale, float label_smoothing) {
    ops.conv_forward(conv1.d, input, conv1.w, conv1.out);
    if (pooled && train) {
      ops.bn_relu_maxpool_forward_train(side(bn1, conv1.out), pool_d, bn1.out, pool_out);
    } else {
      bn_fwd(bn1, conv1.out, nullptr, true, train);
      if (pooled) ops.maxpool_forward(pool_d, bn1.out, pool_out);
    }
    for (Block& b : blocks) {
      ops.conv_forward(b.c1.d, *b.in, b.c1.w, b.c1.out);
      bn_relu_conv(b.b1, b.c1.out, b.c2, train);
      if (b.has_ds) ops.conv_forward(b.cd.d, *b.in, b.cd.w, b.cd.out);
      if (b.bottleneck) bn_relu_conv(b.b2, b.c2.out, b.c3, train);
      BnL& last = b.bottleneck ? b.b3 : b.b2;
      const Act& last_x = b.bottleneck ? b.c3.out : b.c2.out;
      if (!b.has_ds) {
        bn_fwd(last, last_x, b.in, true, train);
      } else if (train) {  // the downsample's batch norm writes the block's output, the join adds to it
        ops.bn_forward_train_join(side(last, last_x), side(b.bd, b.cd.out), *b.out);
      } else {
        bn_fwd(b.bd, b.cd.out, nullptr, false, false);
        bn_fwd(last, last_x, &b.bd.out, true, false);
      }
    }
    ops.avgpool_forward(*blocks.back().out, avg_out);
    ops.fc_forward(avg_out, fc_w, fc_b, classes, logits);
    ops.softmax_xent(batch, classes, logits, labels, grad_scale, label_smoothing, loss, dlogits);
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

  // The backward of bn_relu_conv: the convolution's (its input gradient into dbn_y), then the batch norm's
  // from x (its input gradient into dx).
  void conv_bn_relu_bwd(ConvL& c, const Act& dy, BnL& l, const Act& x, Act& dbn_y, Act& dx) {
    ops.conv_bn_relu_backward(c.d, c.w, dy, side(l, x), l.out, dbn_y, dx);
    unit_ready(c.unit);
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
  //   - with a downsample, the input gradient goes where the plan put it (the [last conv output
  //     | O] region, or O and the outputs after it), once that is dead: the main branch's input
  //     gradient first, then the downsample branch's added to it;
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
    Act dd = b.cd.out;
    if (b.has_ds) {  // the join: the residual gradient over O (dead once its ReLU mask is read)
      ops.bn_backward_join(side(last, last_conv.out), side(b.bd, b.cd.out), dres, dout.a, dout.second(), d_last, dd);
      unit_ready(last.unit);
      unit_ready(b.bd.unit);
    } else {
      bn_bwd(last, last_conv.out, dout.a, true, d_last, &dres, dout.second());
    }
    const Act& dout_s = dout.a;
    if (b.bottleneck) {
      Act db2 = like(dout_s, b.b2.out);
      if (mode == Recompute::Bn) recompute_bn(b.b2, b.c2.out);
      Act dc2 = b.c2.out;
      conv_bn_relu_bwd(b.c3, d_last, b.b2, b.c2.out, db2, dc2);
      d_last = dc2;
    }
    Act db1 = like(dout_s, b.b1.out);
    if (mode == Recompute::Bn) recompute_bn(b.b1, b.c1.out);
    Act dc1 = b.c1.out;
    conv_bn_relu_bwd(b.c2, d_last, b.b1, b.c1.out, db1, dc1);
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
    ops.fc_backward(avg_out, fc_w, dlogits, classes, d_avg, fc_w, fc_b);
    unit_ready(fc_unit);
    Grad g{like(grad_s, *blocks.back().out), {}};
    ops.avgpool_backward(d_avg, g.a);
    for (size_t i = blocks.size(); i-- > 0;) {
      if (mode == Recompute::Block) recompute_block(blocks[i]);
      g = backward_block(blocks[i], g, /*split=*/i > 0);
    }
    if (mode == Recompute::Block) ops.conv_forward(conv1.d, input, conv1.w, conv1.out);
    Act dbn1 = bn1.out;
    if (pooled) {
      if (mode != Recompute::None) recompute_bn(bn1, conv1.out);
      dbn1.data = stem_dx;
      ops.maxpool_backward(pool_d, bn1.out, pool_out, g.a, dbn1);  // block 0 is never split
    } else {
      dbn1.data = g.a.data;  // bn1's output is block 0's input, kept
    }
    Act dc1 = conv1.out;
    bn_bwd(bn1, conv1.out, dbn1, true, dc1, nullptr);
    conv_bwd(conv1, input, dc1, nullptr, false);
  }
};

// --- ResNet

ResNet::ResNet(const Schema& s, const MemoryPlan& plan, const std::vector<void*>& memory, Ops& ops)
    : net_(std::make_unique<Net>(s, plan, memory, ops)) {}
ResNet::~ResNet() = default;

Act& ResNet::input() { return net_->input; }
int32_t* ResNet::labels() { return net_->labels; }
const float* ResNet::logits() const { return net_->logits; }
const float* ResNet::loss() const { return net_->loss; }

void ResNet::forward(bool train, float grad_scale, float label_smoothing) {
  net_->forward(train, grad_scale, label_smoothing);
}

void ResNet::backward(const std::function<void(size_t, size_t)>& on_ready) {
  net_->on_grads_ready = on_ready;
  net_->backward();
}

}  // namespace worker
