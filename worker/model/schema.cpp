// The ResNet v1.5 schema (torchvision's resnet18/34/50/101/152): layers in torchvision's
// state_dict() order, so the flat parameter buffer holds them in that order and backward
// finishes gradients from its end towards its start.
#include "worker/model/schema.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace worker {

namespace {

int conv_out(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

// Adds layers to a schema in state-dict order: entries first, offsets as they come.
struct Builder {
  Schema& s;

  size_t add_param(const std::string& name, std::vector<int64_t> shape, bool conv_weight) {
    StateEntry e;
    e.name = name;
    e.shape = std::move(shape);
    e.kind = StateKind::Param;
    e.count = 1;
    for (int64_t v : e.shape) e.count *= size_t(v);
    e.offset = s.nparams;
    e.conv_weight = conv_weight;
    s.nparams += e.count;
    s.entries.push_back(e);
    return e.offset;
  }

  void add_conv(ConvLayer& l, const std::string& name, int n, int h, int w, int cin, int cout, int k, int stride,
                int pad) {
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
    l.unit = int(s.units.size());
    s.units.push_back({l.w.offset, l.w.offset + l.w.count});
  }

  void add_bn(BnLayer& l, const std::string& name, int n, int h, int w, int c) {
    l.d.n = n;
    l.d.h = h;
    l.d.w = w;
    l.d.c = c;
    l.gamma = {add_param(name + ".weight", {c}, false), size_t(c)};
    l.beta = {add_param(name + ".bias", {c}, false), size_t(c)};
    l.unit = int(s.units.size());
    s.units.push_back({l.gamma.offset, l.beta.offset + l.beta.count});
    for (StateKind k : {StateKind::RunningMean, StateKind::RunningVar}) {
      StateEntry e;
      e.name = name + (k == StateKind::RunningMean ? ".running_mean" : ".running_var");
      e.shape = {c};
      e.kind = k;
      e.offset = s.nbuffers;
      e.count = size_t(c);
      (k == StateKind::RunningMean ? l.running_mean : l.running_var) = s.nbuffers;
      s.nbuffers += size_t(c);
      s.entries.push_back(e);
    }
    StateEntry t;
    t.name = name + ".num_batches_tracked";
    t.shape = {};
    t.kind = StateKind::NumBatchesTracked;
    t.count = 1;
    s.entries.push_back(t);
  }
};

}  // namespace

Schema make_schema(const ModelConfig& cfg) {
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

  Schema s;
  s.batch = n;
  s.image_size = cfg.image_size;
  s.num_classes = cfg.num_classes;
  s.pooled = cfg.stem == Stem::ImageNet;
  Builder b{s};
  if (s.pooled)
    b.add_conv(s.conv1, "conv1", n, cfg.image_size, cfg.image_size, 3, cfg.width, 7, 2, 3);
  else
    b.add_conv(s.conv1, "conv1", n, cfg.image_size, cfg.image_size, 3, cfg.width, 3, 1, 1);
  b.add_bn(s.bn1, "bn1", n, s.conv1.d.ho, s.conv1.d.wo, cfg.width);
  s.pool.n = n;
  s.pool.h = s.conv1.d.ho;
  s.pool.w = s.conv1.d.wo;
  s.pool.c = cfg.width;
  s.pool.ho = s.pooled ? conv_out(s.pool.h, 3, 2, 1) : s.pool.h;
  s.pool.wo = s.pooled ? conv_out(s.pool.w, 3, 2, 1) : s.pool.w;

  int h = s.pool.ho, w = s.pool.wo, inplanes = cfg.width;
  for (int li = 0; li < 4; ++li) {
    const int planes = cfg.width << li;
    for (int j = 0; j < counts[size_t(li)]; ++j) {
      BlockLayers& k = s.blocks.emplace_back();
      const std::string p = "layer" + std::to_string(li + 1) + "." + std::to_string(j);
      const int stride = (li > 0 && j == 0) ? 2 : 1;
      k.bottleneck = bottleneck;
      const int ho = conv_out(h, 3, stride, 1), wo = conv_out(w, 3, stride, 1);
      if (bottleneck) {
        b.add_conv(k.c1, p + ".conv1", n, h, w, inplanes, planes, 1, 1, 0);
        b.add_bn(k.b1, p + ".bn1", n, h, w, planes);
        b.add_conv(k.c2, p + ".conv2", n, h, w, planes, planes, 3, stride, 1);
        b.add_bn(k.b2, p + ".bn2", n, ho, wo, planes);
        b.add_conv(k.c3, p + ".conv3", n, ho, wo, planes, planes * expansion, 1, 1, 0);
        b.add_bn(k.b3, p + ".bn3", n, ho, wo, planes * expansion);
      } else {
        b.add_conv(k.c1, p + ".conv1", n, h, w, inplanes, planes, 3, stride, 1);
        b.add_bn(k.b1, p + ".bn1", n, ho, wo, planes);
        b.add_conv(k.c2, p + ".conv2", n, ho, wo, planes, planes, 3, 1, 1);
        b.add_bn(k.b2, p + ".bn2", n, ho, wo, planes);
      }
      k.has_ds = stride != 1 || inplanes != planes * expansion;
      if (k.has_ds) {
        b.add_conv(k.cd, p + ".downsample.0", n, h, w, inplanes, planes * expansion, 1, stride, 0);
        b.add_bn(k.bd, p + ".downsample.1", n, ho, wo, planes * expansion);
      }
      inplanes = planes * expansion;
      h = ho;
      w = wo;
    }
  }
  s.fc_in = inplanes;
  s.fc_w = {b.add_param("fc.weight", {cfg.num_classes, s.fc_in}, false),
            size_t(cfg.num_classes) * size_t(s.fc_in)};
  s.fc_b = {b.add_param("fc.bias", {cfg.num_classes}, false), size_t(cfg.num_classes)};
  s.fc_unit = int(s.units.size());
  s.units.push_back({s.fc_w.offset, s.fc_b.offset + s.fc_b.count});
  return s;
}

void check_tensor_sizes(const Schema& s, int64_t max_elements) {
  int64_t per_sample = 0;
  std::string where;
  std::vector<const ConvLayer*> convs{&s.conv1};
  for (const BlockLayers& b : s.blocks)
    for (const ConvLayer* l : {&b.c1, &b.c2, &b.c3, &b.cd})
      if (l->d.cin) convs.push_back(l);  // c3 of a basic block and a missing downsample: unset
  for (const ConvLayer* l : convs) {
    const ConvDesc& c = l->d;
    const int64_t in = int64_t(c.h) * c.w * c.cin, out = int64_t(c.ho) * c.wo * c.cout;
    if (std::max(in, out) > per_sample) {
      per_sample = std::max(in, out);
      where = l == &s.conv1 ? "conv1's output" : "a convolution's " + std::string(out >= in ? "output" : "input");
    }
  }
  if (per_sample * s.batch <= max_elements) return;
  throw ModelTooLarge("batch " + std::to_string(s.batch) + " at " + std::to_string(s.image_size) + "x" +
                      std::to_string(s.image_size) + " px needs " + std::to_string(per_sample * s.batch) +
                      " elements in one tensor (" + where + ", " + std::to_string(per_sample) +
                      " per image), more than this backend takes in one tensor (" + std::to_string(max_elements) +
                      "): use a batch of at most " + std::to_string(max_elements / per_sample) +
                      " per micro-batch (--accum-steps adds micro-batches to a step)");
}

std::vector<ParamView> vector_params(const Schema& s) {
  std::vector<ParamView> v;
  for (const StateEntry& e : s.entries)
    if (e.kind == StateKind::Param && e.shape.size() == 1) v.push_back({e.offset, e.count});
  std::sort(v.begin(), v.end(), [](const ParamView& a, const ParamView& b) { return a.offset < b.offset; });
  return v;
}

// --- Layout conversion

namespace {

// move(oihw, ohwi) for every element of an (o, i, kh, kw) weight: its index in either layout.
template <typename F>
void for_each_weight(int o, int i, int kh, int kw, F move) {
  for (int a = 0; a < o; ++a)
    for (int b = 0; b < i; ++b)
      for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x)
          move(((size_t(a) * i + b) * kh + y) * kw + x, ((size_t(a) * kh + y) * kw + x) * i + b);
}

}  // namespace

void oihw_to_ohwi(const float* src, float* dst, int o, int i, int kh, int kw) {
  for_each_weight(o, i, kh, kw, [&](size_t oihw, size_t ohwi) { dst[ohwi] = src[oihw]; });
}

void ohwi_to_oihw(const float* src, float* dst, int o, int i, int kh, int kw) {
  for_each_weight(o, i, kh, kw, [&](size_t oihw, size_t ohwi) { dst[oihw] = src[ohwi]; });
}

}  // namespace worker
