// The three memory planners (none / bn / block recomputation) as one pure function.
// Memory (ResNet-50, batch 256, bf16: 11.5 GB of activations and 1.2 GB of gradient scratch
// before these two rules; now 10.7 GB and, with the gradient homes of plan_gradient_memory,
// 0.05 GB: test_memory_plan.cpp):
//   - a downsample branch's batch-norm output is only read by the block's last batch norm (as
//     its residual), never by backward (no ReLU): it is written into the block's output
//     buffer, which that batch norm then overwrites element by element (y may alias residual);
//   - batch-norm backward writes dx over its input x (the conv output, dead once read) and the
//     residual gradient over its output y (dead once its ReLU mask is read): every backend
//     reads element i of x and y before writing element i of dx and dresidual.
// The order of the buffers is the order of the allocations the model made before the plan was
// a value (so a backend's pool lays them out as it did).
#include "worker/model/memory_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace worker {

const char* mem_use_name(MemUse u) {
  switch (u) {
    case MemUse::Params: return "params fp32";
    case MemUse::Grads: return "grads fp32";
    case MemUse::Stats: return "running + saved BN statistics";
    case MemUse::Acts: return "activations kept for backward";
    case MemUse::Scratch: return "activation-gradient scratch";
    case MemUse::Recompute: return "recomputed activations (shared)";
    case MemUse::Io: return "input, labels, logits";
  }
  return "?";
}

size_t MemoryPlan::bytes(MemUse u) const {
  size_t n = 0;
  for (const Buffer& b : buffers)
    if (b.use == u) n += b.bytes;
  return n;
}

size_t MemoryPlan::total() const {
  size_t n = 0;
  for (const Buffer& b : buffers) n += b.bytes;
  return n;
}

namespace {

size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }

// A tensor of a recomputed segment (or a candidate home of a gradient): where, and its size.
struct Slot {
  Place* at;
  size_t bytes;
};

class Planner {
 public:
  Planner(const Schema& s, DType dt, Recompute mode) : s_(s) {
    p_.dtype = dt;
    p_.mode = mode;
    p_.blocks.resize(s.blocks.size());
  }

  MemoryPlan plan(bool whole_params) {
    if (whole_params) p_.params = carve(s_.nparams * sizeof(float), MemUse::Params);
    p_.grads = carve(s_.nparams * sizeof(float), MemUse::Grads);
    p_.stats = carve(s_.nbuffers * sizeof(float), MemUse::Stats);
    p_.input = carve(bytes(s_.input()), MemUse::Io);
    p_.labels = carve(size_t(s_.batch) * sizeof(int32_t), MemUse::Io);
    if (p_.mode == Recompute::Block) {
      plan_block_mode();
    } else {
      plan_kept();
      if (p_.mode == Recompute::Bn) plan_shared_bn_outputs();
      plan_gradient_memory();
    }
    if (p_.mode != Recompute::None) plan_bn_sink();
    const ActShape avg{s_.batch, 1, 1, s_.fc_in};
    p_.avg_out = carve(bytes(avg), MemUse::Acts);
    p_.d_avg = carve(bytes(avg), MemUse::Scratch);
    const size_t nl = size_t(s_.batch) * size_t(s_.num_classes);
    p_.logits = carve(nl * sizeof(float), MemUse::Io);
    p_.dlogits = carve(nl * sizeof(float), MemUse::Io);
    p_.loss = carve(sizeof(float), MemUse::Io);
    return p_;
  }

 private:
  const Schema& s_;
  MemoryPlan p_;

  Place carve(size_t bytes, MemUse use) {
    p_.buffers.push_back({use, bytes});
    return {int(p_.buffers.size()) - 1, 0};
  }
  size_t bytes(const ActShape& sh) const { return sh.numel() * dtype_size(p_.dtype); }
  size_t buffer_bytes(const Place& at) const { return p_.buffers[size_t(at.buffer)].bytes; }
  Place& block_out(size_t i) { return s_.blocks[i].bottleneck ? p_.blocks[i].b3.out : p_.blocks[i].b2.out; }
  Place& last_conv(size_t i) { return s_.blocks[i].bottleneck ? p_.blocks[i].c3 : p_.blocks[i].c2; }

  void stats(BnPlaces& b, const BnLayer& l) {
    b.save_mean = carve(size_t(l.d.c) * sizeof(float), MemUse::Stats);
    b.save_invstd = carve(size_t(l.d.c) * sizeof(float), MemUse::Stats);
  }

  // --- None and Bn: every activation has its own memory (but Bn's shared outputs).

  // In Bn mode the outputs of bn1 (before the pool) and of each block's inner batch norms are
  // recomputed into R (plan_shared_bn_outputs).
  bool shared(const BnLayer& l, const BlockLayers* b) const {
    if (p_.mode != Recompute::Bn) return false;
    if (!b) return s_.pooled;
    return &l == &b->b1 || (b->bottleneck && &l == &b->b2);
  }

  void bn(BnPlaces& at, const BnLayer& l, const BlockLayers* b) {
    if (!shared(l, b)) at.out = carve(bytes(l.out()), MemUse::Acts);
    stats(at, l);
  }

  // A downsampling block's last conv output and its output, adjacent: one buffer.
  void conv_bn_pair(const BlockLayers& b, const ConvLayer& lc, const BnLayer& lb, Place& c, BnPlaces& o) {
    if (!b.has_ds) {
      c = carve(bytes(lc.out()), MemUse::Acts);
      bn(o, lb, &b);
      return;
    }
    const size_t a = aligned(bytes(lc.out()));  // keeps the output 256-byte aligned
    c = carve(a + bytes(lb.out()), MemUse::Acts);
    o.out = {c.buffer, a};
    stats(o, lb);
  }

  void plan_kept() {
    p_.conv1 = carve(bytes(s_.conv1.out()), MemUse::Acts);
    if (s_.pooled) {
      bn(p_.bn1, s_.bn1, nullptr);
      p_.stem_out = carve(bytes(s_.stem_out()), MemUse::Acts);
    } else {
      p_.stem_out = carve(bytes(s_.stem_out()), MemUse::Acts);
      p_.bn1.out = p_.stem_out;
      stats(p_.bn1, s_.bn1);
    }
    for (size_t i = 0; i < s_.blocks.size(); ++i) {
      const BlockLayers& b = s_.blocks[i];
      BlockPlaces& q = p_.blocks[i];
      q.c1 = carve(bytes(b.c1.out()), MemUse::Acts);
      bn(q.b1, b.b1, &b);
      if (b.bottleneck) {
        q.c2 = carve(bytes(b.c2.out()), MemUse::Acts);
        bn(q.b2, b.b2, &b);
        conv_bn_pair(b, b.c3, b.b3, q.c3, q.b3);
      } else {
        conv_bn_pair(b, b.c2, b.b2, q.c2, q.b2);
      }
      if (b.has_ds) {
        q.cd = carve(bytes(b.cd.out()), MemUse::Acts);
        stats(q.bd, b.bd);
        q.bd.out = block_out(i);  // the residual, overwritten by the block's output
      }
    }
  }

  void plan_shared_bn_outputs() {
    std::vector<std::pair<Place*, const BnLayer*>> out;
    if (s_.pooled) out.emplace_back(&p_.bn1.out, &s_.bn1);
    for (size_t i = 0; i < s_.blocks.size(); ++i) {
      out.emplace_back(&p_.blocks[i].b1.out, &s_.blocks[i].b1);
      if (s_.blocks[i].bottleneck) out.emplace_back(&p_.blocks[i].b2.out, &s_.blocks[i].b2);
    }
    size_t n = 0;
    for (const auto& o : out) n = std::max(n, bytes(o.second->out()));
    const Place r = carve(n, MemUse::Recompute);
    for (auto& o : out) *o.first = r;
  }

  // S holds the gradient reaching the last block's output. Each downsampling block's input
  // gradient (larger than its output) goes to the block's [last conv output | output] region
  // when it fits (every torchvision depth), else to S. maxpool's backward writes bn1's output
  // gradient into the largest dead activation that fits, else into S when S is free then.
  void plan_gradient_memory() {
    const size_t nb = s_.blocks.size();
    size_t s_bytes = bytes(s_.block_out(nb - 1));
    for (size_t i = 0; i < nb; ++i) {
      const BlockLayers& b = s_.blocks[i];
      // The gradients between a block's layers go where its output gradient was.
      const size_t out = s_.block_out(i).numel();
      if (b.b1.out().numel() > out || b.b2.out().numel() > out)
        throw std::logic_error("model: block " + std::to_string(i) + " has an inner activation larger than its output");
      if (!b.has_ds) continue;
      if (buffer_bytes(last_conv(i)) >= bytes(s_.block_in(i))) {
        p_.blocks[i].din = last_conv(i);  // the region's start
        continue;
      }
      s_bytes = std::max(s_bytes, bytes(s_.block_in(i)));
      // The block's output gradient must not be in S too (S holds it at the top, or when the
      // next block's input gradient is in S as well).
      if (i + 1 == nb || (s_.blocks[i + 1].has_ds && !p_.blocks[i + 1].din.placed()))
        throw std::logic_error("model: block " + std::to_string(i) +
                               ": no place for its input gradient (gradient memory plan)");
    }
    if (!s_.pooled) {  // bn1's output gradient is block 0's input gradient
      p_.grad_s = carve(s_bytes, MemUse::Scratch);
      return;
    }
    const size_t stem = bytes(s_.bn1.out());
    const bool pool_grad_in_s = s_.blocks[0].has_ds && !p_.blocks[0].din.placed();
    // Dead by then and outside every region and block output (which may hold the gradient).
    const Place* best = nullptr;
    size_t best_bytes = 0;
    for (size_t i = 0; i < nb; ++i) {
      const BlockLayers& b = s_.blocks[i];
      BlockPlaces& q = p_.blocks[i];
      std::vector<Slot> dead{{&q.c1, bytes(b.c1.out())}, {&q.b1.out, bytes(b.b1.out())}, {&q.cd, bytes(b.cd.out())}};
      if (b.bottleneck) dead.insert(dead.end(), {{&q.c2, bytes(b.c2.out())}, {&q.b2.out, bytes(b.b2.out())}});
      const bool in_r = p_.mode == Recompute::Bn;  // b1, b2 are R: live during the stem's backward
      for (const Slot& a : dead)
        if (a.at->placed() && !(in_r && (a.at == &q.b1.out || a.at == &q.b2.out)) && a.bytes >= stem &&
            (!best || a.bytes > best_bytes)) {
          best = a.at;
          best_bytes = a.bytes;
        }
    }
    if (!best && !pool_grad_in_s) s_bytes = std::max(s_bytes, stem);
    p_.grad_s = carve(s_bytes, MemUse::Scratch);
    if (best)
      p_.stem_dx = *best;
    else if (!pool_grad_in_s)
      p_.stem_dx = p_.grad_s;
    else
      p_.stem_dx = carve(stem, MemUse::Scratch);
  }

  // --- Block: what is kept, and the arena everything else is recomputed into.

  // The activations of one recomputed segment (the stem: -1, or a block), laid out back to back.
  std::vector<Slot> segment(int i) {
    if (i < 0) {
      std::vector<Slot> stem{{&p_.conv1, bytes(s_.conv1.out())}};
      if (s_.pooled) stem.push_back({&p_.bn1.out, bytes(s_.bn1.out())});
      return stem;
    }
    const BlockLayers& b = s_.blocks[size_t(i)];
    BlockPlaces& q = p_.blocks[size_t(i)];
    std::vector<Slot> acts{{&q.c1, bytes(b.c1.out())}, {&q.b1.out, bytes(b.b1.out())}, {&q.c2, bytes(b.c2.out())}};
    if (b.bottleneck) acts.insert(acts.end(), {{&q.b2.out, bytes(b.b2.out())}, {&q.c3, bytes(b.c3.out())}});
    if (b.has_ds) acts.push_back({&q.cd, bytes(b.cd.out())});
    return acts;
  }

  // Lays segment i out from `arena`'s start (not placed: only measures); returns its bytes.
  size_t lay_out(int i, const Place& arena) {
    size_t off = 0;
    for (const Slot& a : segment(i)) {
      if (arena.placed()) *a.at = {arena.buffer, off};
      off += aligned(a.bytes);
    }
    return off;
  }

  void plan_block_mode() {
    stats(p_.bn1, s_.bn1);
    p_.stem_out = carve(bytes(s_.stem_out()), MemUse::Acts);
    // The block outputs, adjacent in block order (plan_block_gradients relies on it).
    size_t region = 0;
    std::vector<size_t> at;
    for (size_t i = 0; i < s_.blocks.size(); ++i) {
      at.push_back(region);
      region += aligned(bytes(s_.block_out(i)));
    }
    const Place outputs = carve(region, MemUse::Acts);
    for (size_t i = 0; i < s_.blocks.size(); ++i) {
      const BlockLayers& b = s_.blocks[i];
      BlockPlaces& q = p_.blocks[i];
      block_out(i) = {outputs.buffer, at[i]};
      const std::pair<const BnLayer*, BnPlaces*> bns[] = {
          {&b.b1, &q.b1}, {&b.b2, &q.b2}, {&b.b3, &q.b3}, {&b.bd, &q.bd}};
      for (const auto& [l, o] : bns)
        if (l->d.c) stats(*o, *l);
      if (b.has_ds) q.bd.out = block_out(i);  // the residual, overwritten by the block's output
    }
    // The arena: the largest segment; each segment's tensors from its start.
    size_t arena_bytes = lay_out(-1, {});
    for (size_t i = 0; i < s_.blocks.size(); ++i) arena_bytes = std::max(arena_bytes, lay_out(int(i), {}));
    plan_block_gradients(outputs, arena_bytes);
    const Place arena = carve(arena_bytes, MemUse::Recompute);
    for (int i = -1; i < int(s_.blocks.size()); ++i) lay_out(i, arena);
    if (!s_.pooled)
      p_.bn1.out = p_.stem_out;
    else if (!p_.stem_dx.placed())
      p_.stem_dx = {arena.buffer, aligned(bytes(s_.conv1.out())) + aligned(bytes(s_.bn1.out()))};
  }

  // At block i's backward everything in the output region from O_i on is dead (those blocks are
  // done, O_i once its ReLU mask is read), so: block i's output gradient is at O_{i+1} (block
  // i + 1's input gradient) and the gradients between its layers go there too; a downsampling
  // block's input gradient goes to O_i, spilling over into O_{i+1}, ...; without a downsample it
  // accumulates in O_i over the residual gradient. The top block's output gradient is in S. The
  // stem's bn1 gradient goes after the pool gradient in the region, else to the arena after the
  // stem's activations (the arena grows for it).
  void plan_block_gradients(const Place& outputs, size_t& arena_bytes) {
    const size_t nb = s_.blocks.size(), region = buffer_bytes(outputs);
    auto room_from = [&](const Place& a) { return region - a.offset; };
    for (size_t i = 0; i < nb; ++i) {
      size_t need = bytes(s_.block_out(i));
      for (const Slot& a : segment(int(i))) need = std::max(need, a.at == &p_.blocks[i].cd ? 0 : a.bytes);
      if (i + 1 < nb && room_from(block_out(i + 1)) < need)
        throw std::logic_error("model: block " + std::to_string(i) +
                               ": no room for its gradients (block recompute plan)");
      if (s_.blocks[i].has_ds) {
        if (room_from(block_out(i)) < bytes(s_.block_in(i)))
          throw std::logic_error("model: block " + std::to_string(i) +
                                 ": no room for its input gradient (block recompute plan)");
        p_.blocks[i].din = block_out(i);
      }
    }
    size_t s_bytes = bytes(s_.block_out(nb - 1));
    for (const Slot& a : segment(int(nb) - 1)) s_bytes = std::max(s_bytes, a.bytes);
    p_.grad_s = carve(s_bytes, MemUse::Scratch);
    if (!s_.pooled) return;  // bn1's output gradient is block 0's input gradient
    // The pool's gradient sits at O_0 (size of the pool output); bn1's goes after it if it fits.
    const size_t after_pool = block_out(0).offset + aligned(bytes(s_.stem_out()));
    if (region >= after_pool && region - after_pool >= bytes(s_.bn1.out())) {
      p_.stem_dx = {outputs.buffer, after_pool};
    } else {  // at the arena's end (plan_block_mode)
      arena_bytes = std::max(arena_bytes, aligned(bytes(s_.conv1.out())) + aligned(bytes(s_.bn1.out())) +
                                              bytes(s_.bn1.out()));
    }
  }

  // The sink for recomputed batch norms' statistics (Bn and Block modes).
  void plan_bn_sink() {
    int c = s_.bn1.d.c;
    for (const BlockLayers& b : s_.blocks)
      for (const BnLayer* l : {&b.b1, &b.b2, &b.b3, &b.bd}) c = std::max(c, l->d.c);
    p_.bn_sink_c = c;
    p_.bn_sink = carve(4 * size_t(c) * sizeof(float), MemUse::Stats);
  }
};

}  // namespace

MemoryPlan plan_memory(const Schema& s, DType dtype, Recompute mode, bool whole_params) {
  return Planner(s, dtype, mode).plan(whole_params);
}

}  // namespace worker
