// [gpu] The GPU back end (nvJPEG + our resize kernel) against the CPU back end: the same data
// set, order, seed and epoch give the same micro-batches, for the training transform (random
// boxes and flips) and the evaluation transform, fp32 and bf16.
//   - PNGs are decoded on the CPU by both back ends, so a PNG folder checks our crop, resize,
//     flip and normalisation kernel element by element, within rounding.
//   - JPEGs are decoded by different decoders (nvJPEG's hardware engine or its hybrid back end
//     against libjpeg-turbo's accurate integer IDCT with fancy chroma upsampling). JPEG leaves
//     the inverse DCT and the chroma upsampling to the decoder, so they may differ; how much is
//     measured on each folder itself as libjpeg-turbo's own spread between two of its settings
//     (fast IDCT without fancy upsampling against the default), and every sample's mean and
//     largest difference are held to twice that spread. A folder of 4:4:4 JPEGs, which have no
//     chroma upsampling, holds the decoders to their IDCTs (a spread of about 1 level on
//     average); a folder of 4:2:0 JPEGs (libjpeg's default) to the upsampling as well, which on
//     these high-frequency colour patterns is ten times more. Each folder has a grayscale, a
//     progressive, a PNG and a truncated JPEG (skipped and replaced alike).
// With regions of interest (the hardware engine decoding only each crop's region) the JPEG folders
// are held to the same spread.
// The GPU loader's CPU share (its reader threads decode some positions of each batch as the CPU
// loader does) is checked whole (every position: element by element against the CPU loader) and
// half (the other half within the decoders' spread), in fp16 too.
// The CPU loader feeding the GPU backend is checked too. Without a visible GPU: exit 77
// (skipped). Run on the GPU machine.
#include <cstdio>  // before jpeglib.h, which uses FILE

#include <cuda_runtime.h>
#include <jpeglib.h>
#include <png.h>
#include <unistd.h>

#include <csetjmp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "worker/core/backend.h"
#include "worker/data/open_image_source.h"

using namespace worker;

namespace {

int failures = 0;
#define EXPECT(cond, msg)                                       \
  do {                                                          \
    if (!(cond)) {                                              \
      ++failures;                                               \
      std::cout << "FAILED: " << msg << " (" #cond ")" << std::endl; \
    }                                                           \
  } while (0)

std::vector<uint8_t> pattern(int w, int h, int comps, std::mt19937& rng) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(comps));
  std::normal_distribution<double> noise(0, 25);
  const double fx = 1 + rng() % 5, fy = 1 + rng() % 5;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comps; ++c) {
        const double v = 127 + 90 * std::sin(x * fx * (c + 1) / w * 6.28) * std::cos(y * fy / h * 6.28) + noise(rng);
        px[(size_t(y) * size_t(w) + size_t(x)) * size_t(comps) + size_t(c)] = uint8_t(std::min(255.0, std::max(0.0, v)));
      }
  return px;
}

// `subsample`: libjpeg's default 4:2:0 chroma; else 4:4:4 (no chroma upsampling in the decoder).
void write_jpeg(const std::string& path, int w, int h, int comps, bool progressive, bool subsample, std::mt19937& rng) {
  const std::vector<uint8_t> px = pattern(w, h, comps, rng);
  FILE* f = std::fopen(path.c_str(), "wb");
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  if (!subsample)
    for (int k = 0; k < c.num_components; ++k) c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data() + size_t(c.next_scanline) * size_t(w) * size_t(comps));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

void write_png(const std::string& path, int w, int h, std::mt19937& rng) {
  const std::vector<uint8_t> px = pattern(w, h, 3, rng);
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = png_uint_32(w);
  img.height = png_uint_32(h);
  img.format = PNG_FORMAT_RGB;
  png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr);
}

std::string make_folder(bool subsample) {
  char t[] = "/tmp/test_gpu_loader_XXXXXX";
  const std::string root = ::mkdtemp(t);
  std::mt19937 rng(5);
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const std::string d = root + "/" + split + "/c" + std::to_string(c);
      std::system(("mkdir -p " + d).c_str());
      for (int i = 0; i < 20; ++i) {
        const int w = 40 + int(rng() % 400), h = 40 + int(rng() % 300);
        write_jpeg(d + "/img" + std::to_string(i) + ".jpg", w, h, 3, false, subsample, rng);
      }
    }
  }
  const std::string t0 = root + "/train/c0";
  write_jpeg(t0 + "/gray.jpg", 180, 130, 1, false, subsample, rng);
  write_jpeg(t0 + "/progressive.jpg", 210, 170, 3, true, subsample, rng);
  write_png(t0 + "/rgb.png", 150, 190, rng);
  write_jpeg(t0 + "/whole.jpg", 200, 150, 3, false, subsample, rng);
  std::ifstream in(t0 + "/whole.jpg", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(t0 + "/truncated.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  return root;
}

// Train and val folders of RGB PNGs only: both back ends decode them on the CPU.
std::string make_png_folder() {
  char t[] = "/tmp/test_gpu_loader_png_XXXXXX";
  const std::string root = ::mkdtemp(t);
  std::mt19937 rng(9);
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const std::string d = root + "/" + split + "/c" + std::to_string(c);
      std::system(("mkdir -p " + d).c_str());
      for (int i = 0; i < 8; ++i) write_png(d + "/img" + std::to_string(i) + ".png", 40 + int(rng() % 300), 40 + int(rng() % 250), rng);
    }
  }
  return root;
}

// --- libjpeg-turbo's own spread between two decoder settings, in levels of 255

struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};

extern "C" void jpeg_err_exit(j_common_ptr c) { std::longjmp(reinterpret_cast<JpegErr*>(c->err)->jump, 1); }

// RGB pixels of `path`; empty when libjpeg cannot decode it.
std::vector<uint8_t> decode_rgb(const std::string& path, bool fast) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  jpeg_decompress_struct c;
  JpegErr err;
  c.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_err_exit;
  std::vector<uint8_t> px;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&c);
    return {};
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  if (fast) {
    c.dct_method = JDCT_IFAST;
    c.do_fancy_upsampling = FALSE;
  }
  jpeg_start_decompress(&c);
  px.resize(size_t(c.output_width) * c.output_height * 3);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = px.data() + size_t(c.output_scanline) * c.output_width * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return px;
}

struct Spread {
  double mean = 0, max = 0;  // the largest per-image mean and the largest single difference
};

Spread decoder_spread(const std::string& root) {
  Spread s;
  for (const auto& f : std::filesystem::recursive_directory_iterator(root)) {
    if (f.path().extension() != ".jpg" || f.path().filename() == "truncated.jpg") continue;
    const std::vector<uint8_t> a = decode_rgb(f.path(), false), b = decode_rgb(f.path(), true);
    if (a.empty() || a.size() != b.size()) continue;
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs(int(a[i]) - int(b[i]));
      sum += d;
      s.max = std::max(s.max, d);
    }
    s.mean = std::max(s.mean, sum / double(a.size()));
  }
  return s;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return float(h);
}

// One pass of `batches` micro-batches through both back ends. Without `spread`, element by
// element within rounding; with it, each sample's mean and largest difference in levels (beyond
// bf16's rounding) within twice the decoders' spread.
// `share`: the GPU loader's CPU share (0: nvJPEG decodes every JPEG it can). `roi`: whether the
// hardware engine decodes only each crop's region (-1: WORKER_NVJPEG_ROI's choice).
void compare(const std::string& root, Split split, DType dtype, Loader gpu_loader, const char* what,
             const Spread* spread = nullptr, Augment augment = Augment::Standard, double share = 0.0, int roi = -1) {
  const int size = 56, batch = 16, batches = 4;
  DataSourceOptions o;
  o.images.data = root;
  o.batch = batch;
  o.images.read.threads = 4;
  o.seed = 17;
  o.image_size = size;
  o.images.tf.dct_scaling = false;  // the GPU back end decodes at full size
  o.images.tf.augment = augment;
  o.images.read.gpu_cpu_share = share;
  o.images.read.nvjpeg_roi = roi;
  auto cpu_ops = make_cpu_ops(2);
  auto gpu_ops = make_gpu_ops(0, dtype);
  o.images.loader = Loader::Cpu;
  auto cpu = open_image_source(o, split, *cpu_ops);
  o.images.loader = gpu_loader;
  auto gpu = open_image_source(o, split, *gpu_ops);
  std::cout << what << ": " << gpu->describe() << std::endl;
  if (roi >= 0 && gpu_loader == Loader::Gpu && gpu->describe().find("hardware engine") != std::string::npos) {
    EXPECT((gpu->describe().find("regions of interest") != std::string::npos) == (roi == 1),
           what << ": the engine decodes regions of interest exactly when asked to");
  }
  const int64_t n = cpu->info().size;
  std::vector<BatchIndices> order;
  std::mt19937 rng(3);
  for (int b = 0; b < batches; ++b) {
    BatchIndices idx;
    for (int i = 0; i < batch; ++i) idx.push_back(int64_t(rng() % uint64_t(n)));
    order.push_back(idx);
  }
  for (int64_t i = 0; i < 25 && i < n; ++i) order[size_t(i % batches)][size_t(i / batches)] = i;  // all of c0: gray, PNG, progressive, truncated
  cpu->start(4, order);
  gpu->start(4, order);
  const size_t count = size_t(batch) * size * size * 3;
  std::vector<float> ref(count);
  Act x_cpu{ref.data(), DType::F32, batch, size, size, 3};
  std::vector<int32_t> lab_cpu(batch), lab_gpu(batch);
  Act x_gpu{gpu_ops->alloc(count * dtype_size(dtype)), dtype, batch, size, size, 3};
  auto* lab_dev = static_cast<int32_t*>(gpu_ops->alloc(sizeof(int32_t) * batch));
  std::vector<uint8_t> host(count * dtype_size(dtype));
  double worst = 0;
  for (int b = 0; b < batches; ++b) {
    const int n1 = cpu->next(x_cpu, lab_cpu.data(), nullptr);
    const int n2 = gpu->next(x_gpu, lab_dev, nullptr);
    EXPECT(n1 == n2, what << " batch " << b << ": " << n1 << " vs " << n2 << " samples");
    gpu_ops->synchronize();
    gpu_ops->download(host.data(), x_gpu.data, host.size());
    gpu_ops->download(lab_gpu.data(), lab_dev, sizeof(int32_t) * batch);
    EXPECT(lab_cpu == lab_gpu, what << " batch " << b << ": labels differ");
    const size_t per_sample = size_t(size) * size * 3;
    for (size_t i = 0; i < count; i += per_sample) {
      double sum = 0, largest = 0;
      bool reported = false;
      for (size_t k = i; k < i + per_sample; ++k) {
        const uint16_t half = reinterpret_cast<uint16_t*>(host.data())[k];
        const double g = dtype == DType::F32    ? reinterpret_cast<float*>(host.data())[k]
                         : dtype == DType::BF16 ? bf16_to_float(half)
                                                : f16_to_float(half);
        // fp32: the two sides round differently (FMA, order): each of at most 2 x 27 taps + the
        // weights rounds once, relative 2^-24 of 255 levels, / (255 std): < 1e-4. bf16 / fp16:
        // plus one rounding to 8 / 11 significant bits (half an ulp, 1 ulp at a tie the fp32
        // noise flips).
        const double tol = 1e-4 + (dtype == DType::BF16   ? std::ldexp(std::fabs(ref[k]), -7)
                                   : dtype == DType::F16 ? std::ldexp(std::fabs(ref[k]), -10)
                                                         : 0.0);
        const double d = std::fabs(g - ref[k]);
        if (!spread) {
          worst = std::max(worst, d / tol);
          if (d > tol && !reported) {
            EXPECT(d <= tol, what << " batch " << b << " element " << k << ": gpu " << g << " cpu " << ref[k]);
            reported = true;
          }
          continue;
        }
        static const double kStd[3] = {0.229, 0.224, 0.225};  // ImageNet std: back to levels
        const double levels = std::max(0.0, d - tol) * kStd[k % 3] * 255.0;
        sum += levels;
        largest = std::max(largest, levels);
      }
      if (!spread) continue;
      const double mean = sum / double(per_sample);
      worst = std::max({worst, mean / (2 * spread->mean), largest / (2 * spread->max + 1)});
      const size_t sample = i / per_sample;
      EXPECT(mean <= 2 * spread->mean, what << " batch " << b << " sample " << sample << ": mean difference " << mean
                                            << " levels, libjpeg's own spread " << spread->mean);
      EXPECT(largest <= 2 * spread->max + 1, what << " batch " << b << " sample " << sample << ": largest difference "
                                                   << largest << " levels, libjpeg's own spread " << spread->max);
    }
  }
  EXPECT(cpu->skipped() == gpu->skipped(), what << ": skipped " << cpu->skipped() << " vs " << gpu->skipped());
  std::cout << what << ": worst difference / tolerance = " << worst << ", skipped " << gpu->skipped() << std::endl;
}

// A train/ folder of `n` JPEGs of w x h in one class.
std::string make_sized_folder(int w, int h, int n) {
  char t[] = "/tmp/test_gpu_loader_XXXXXX";
  const std::string root = ::mkdtemp(t);
  std::system(("mkdir -p " + root + "/train/c0").c_str());
  std::mt19937 rng(9);
  for (int i = 0; i < n; ++i) write_jpeg(root + "/train/c0/img" + std::to_string(i) + ".jpg", w, h, 3, false, true, rng);
  return root;
}

// --loader auto on the GPU backend (issue 24 item 5): the CPU loader for small images when it has
// the threads to outpace nvJPEG, nvJPEG for photos; the Data line says which and why.
void check_auto_loader() {
  const std::string tiny = make_sized_folder(32, 32, 12), photos = make_sized_folder(500, 375, 12);
  auto ops = make_gpu_ops(0, DType::BF16);
  auto describe = [&](const std::string& root, int threads) {
    DataSourceOptions o;
    o.images.data = root;
    o.images.read.threads = threads;
    o.batch = 4;
    o.image_size = 32;
    return open_image_source(o, Split::Train, *ops)->describe();
  };
  const std::string t16 = describe(tiny, 16), p16 = describe(photos, 16), t1 = describe(tiny, 1);
  std::cout << "auto, 32x32, 16 threads: " << t16 << "\nauto, 500x375, 16 threads: " << p16
            << "\nauto, 32x32, 1 thread: " << t1 << std::endl;
  EXPECT(t16.find("CPU decode") != std::string::npos && t16.find("median 1024 px over 12 sampled") != std::string::npos,
         "32x32 JPEGs, 16 threads: the CPU loader, from the measured size");
  EXPECT(p16.find("GPU decode") != std::string::npos && p16.find("median 187500 px") != std::string::npos,
         "500x375 JPEGs, 16 threads: nvJPEG");
  EXPECT(p16.find("which decode 25 % of each batch on the CPU") != std::string::npos,
         "500x375 JPEGs, 16 threads: the reader threads take the modelled quarter of each batch");
  EXPECT(t1.find("GPU decode") != std::string::npos, "32x32 JPEGs, 1 thread: nvJPEG");
  std::system(("rm -rf " + tiny + " " + photos).c_str());
}

// A pass announced with follow() (the reader threads read into it while the current pass ends) gives,
// once started, the bytes a GPU source started on that epoch alone gives; the epoch matters to them.
void check_followed_pass(const std::string& root) {
  const int size = 48, batch = 8;
  DataSourceOptions o;
  o.images.data = root;
  o.batch = batch;
  o.images.read.threads = 4;
  o.images.read.gpu_cpu_share = 0.5;  // both halves of the GPU loader: nvJPEG and the reader threads' share
  o.seed = 23;
  o.image_size = size;
  o.images.loader = Loader::Gpu;
  auto ops = make_gpu_ops(0, DType::BF16);
  auto followed = open_image_source(o, Split::Train, *ops);
  const int64_t n = followed->info().size;
  auto order_of = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<BatchIndices> order(3);
    for (auto& b : order)
      for (int i = 0; i < batch; ++i) b.push_back(int64_t(rng() % uint64_t(n)));
    return order;
  };
  const std::vector<BatchIndices> first = order_of(1), second = order_of(2);
  const size_t bytes = size_t(batch) * size * size * 3 * 2;
  Act x{ops->alloc(bytes), DType::BF16, batch, size, size, 3};
  auto* labels = static_cast<int32_t*>(ops->alloc(sizeof(int32_t) * batch));
  auto read = [&](BatchSource& src, size_t batches) {
    std::vector<uint8_t> all(bytes * batches);
    for (size_t b = 0; b < batches; ++b) {
      EXPECT(src.next(x, labels, nullptr) == batch, "followed pass: a full batch");
      ops->synchronize();
      ops->download(all.data() + b * bytes, x.data, bytes);
    }
    return all;
  };
  followed->start(0, first);
  followed->follow(1, second);
  read(*followed, first.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the reader threads go on into the next pass
  followed->start(1, second);
  const std::vector<uint8_t> got = read(*followed, second.size());
  auto alone = open_image_source(o, Split::Train, *ops);
  alone->start(1, second);
  const std::vector<uint8_t> want = read(*alone, second.size());
  EXPECT(got == want, "followed pass: its batches are those of the epoch started alone");
  auto other = open_image_source(o, Split::Train, *ops);
  other->start(0, second);
  EXPECT(read(*other, second.size()) != want, "followed pass: epoch 0's augmentation gives other batches");
  std::cout << "followed pass: " << second.size() << " batches, bit for bit those of the epoch started alone"
            << std::endl;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cout << "SKIPPED: no GPU visible ([gpu] test: run it on the GPU machine)" << std::endl;
    return 77;
  }
  const std::string j444 = make_folder(false), j420 = make_folder(true), pngs = make_png_folder();
  try {
    compare(pngs, Split::Train, DType::F32, Loader::Gpu, "PNGs, train fp32, GPU loader");
    compare(pngs, Split::Train, DType::BF16, Loader::Gpu, "PNGs, train bf16, GPU loader");
    compare(pngs, Split::Val, DType::F32, Loader::Gpu, "PNGs, val fp32, GPU loader");
    // --augment pad-crop (issue 25): the window reaches past the image (black padding) in training,
    // and CenterCrop at the images' own scale in evaluation; the kernel gives such pixels no taps.
    compare(pngs, Split::Train, DType::F32, Loader::Gpu, "PNGs, pad-crop train fp32, GPU loader", nullptr,
            Augment::PadCrop);
    compare(pngs, Split::Val, DType::F32, Loader::Gpu, "PNGs, pad-crop val fp32, GPU loader", nullptr, Augment::PadCrop);
    for (const auto& [root, name] : {std::pair{j444, "4:4:4 JPEGs"}, std::pair{j420, "4:2:0 JPEGs"}}) {
      const Spread spread = decoder_spread(root);
      std::cout << name << ": libjpeg-turbo's own spread (fast IDCT, no fancy upsampling, against the default): "
                << "mean " << spread.mean << " levels per image at most, largest " << spread.max << " levels" << std::endl;
      EXPECT(spread.mean > 0, name << ": the decoder spread was measured");
      const std::string n = name;
      compare(root, Split::Train, DType::F32, Loader::Gpu, (n + ", train fp32, GPU loader").c_str(), &spread);
      compare(root, Split::Train, DType::BF16, Loader::Gpu, (n + ", train bf16, GPU loader").c_str(), &spread);
      compare(root, Split::Val, DType::F32, Loader::Gpu, (n + ", val fp32, GPU loader").c_str(), &spread);
      // The hardware engine decoding only each crop's region (the box's corner moved back to a
      // multiple of 16 pixels), training crops and the evaluation's centre crop.
      compare(root, Split::Train, DType::F32, Loader::Gpu, (n + ", train fp32, GPU loader, regions of interest").c_str(),
              &spread, Augment::Standard, 0.0, 1);
      compare(root, Split::Val, DType::BF16, Loader::Gpu, (n + ", val bf16, GPU loader, regions of interest").c_str(),
              &spread, Augment::Standard, 0.0, 1);
    }
    compare(j420, Split::Train, DType::F32, Loader::Cpu, "train fp32, CPU loader into the GPU backend");
    compare(j420, Split::Train, DType::F16, Loader::Cpu, "train fp16, CPU loader into the GPU backend");
    // The CPU share: every position rendered by the reader threads is the CPU loader's image.
    compare(j420, Split::Train, DType::BF16, Loader::Gpu, "4:2:0 JPEGs, train bf16, GPU loader, CPU share 1",
            nullptr, Augment::Standard, 1.0);
    compare(j420, Split::Val, DType::F16, Loader::Gpu, "4:2:0 JPEGs, val fp16, GPU loader, CPU share 1", nullptr,
            Augment::Standard, 1.0);
    {
      const Spread spread = decoder_spread(j420);
      compare(j420, Split::Train, DType::F16, Loader::Gpu, "4:2:0 JPEGs, train fp16, GPU loader, CPU share 0.5",
              &spread, Augment::Standard, 0.5);
    }
    check_auto_loader();
    check_followed_pass(j420);
  } catch (const std::exception& e) {
    std::cout << "FAILED: " << e.what() << std::endl;
    ++failures;
  }
  std::system(("rm -rf " + j444 + " " + j420 + " " + pngs).c_str());
  std::cout << (failures ? "FAILED" : "All tests passed") << " (" << failures << " failure(s))" << std::endl;
  return failures ? 1 : 0;
}
