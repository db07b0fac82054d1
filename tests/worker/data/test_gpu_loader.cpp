// [gpu] The GPU back end (nvJPEG + our resize kernel) against the CPU back end: the same data
// set, order, seed and epoch give the same micro-batches within rounding, for the training
// transform (random boxes and flips) and the evaluation transform, fp32 and bf16, with a
// grayscale JPEG, a progressive JPEG and a PNG (decoded on the CPU, resized on the GPU) and a
// truncated JPEG (skipped and replaced alike). The CPU loader feeding the GPU backend is
// checked too. Without a visible GPU: exit 77 (skipped). Run on the GPU machine.
#include <cstdio>  // before jpeglib.h, which uses FILE

#include <cuda_runtime.h>
#include <jpeglib.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
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

void write_jpeg(const std::string& path, int w, int h, int comps, bool progressive, std::mt19937& rng) {
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

std::string make_folder() {
  char t[] = "/tmp/test_gpu_loader_XXXXXX";
  const std::string root = ::mkdtemp(t);
  std::mt19937 rng(5);
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const std::string d = root + "/" + split + "/c" + std::to_string(c);
      std::system(("mkdir -p " + d).c_str());
      for (int i = 0; i < 20; ++i) {
        const int w = 40 + int(rng() % 400), h = 40 + int(rng() % 300);
        write_jpeg(d + "/img" + std::to_string(i) + ".jpg", w, h, 3, false, rng);
      }
    }
  }
  const std::string t0 = root + "/train/c0";
  write_jpeg(t0 + "/gray.jpg", 180, 130, 1, false, rng);
  write_jpeg(t0 + "/progressive.jpg", 210, 170, 3, true, rng);
  write_png(t0 + "/rgb.png", 150, 190, rng);
  write_jpeg(t0 + "/whole.jpg", 200, 150, 3, false, rng);
  std::ifstream in(t0 + "/whole.jpg", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(t0 + "/truncated.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  return root;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One pass of `batches` micro-batches through both back ends; returns the worst difference.
void compare(const std::string& root, Split split, DType dtype, Loader gpu_loader, const char* what) {
  const int size = 56, batch = 16, batches = 4;
  DataSourceOptions o;
  o.data = root;
  o.batch = batch;
  o.threads = 4;
  o.seed = 17;
  o.tf.size = size;
  o.tf.dct_scaling = false;  // the GPU back end decodes at full size
  auto cpu_ops = make_cpu_ops(2);
  auto gpu_ops = make_gpu_ops(0, dtype);
  o.loader = Loader::Cpu;
  auto cpu = open_image_source(o, split, *cpu_ops);
  o.loader = gpu_loader;
  auto gpu = open_image_source(o, split, *gpu_ops);
  std::cout << what << ": " << gpu->describe() << std::endl;
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
    for (size_t i = 0; i < count; ++i) {
      const double g = dtype == DType::F32 ? reinterpret_cast<float*>(host.data())[i]
                                           : bf16_to_float(reinterpret_cast<uint16_t*>(host.data())[i]);
      // fp32: the two sides round differently (FMA, order): each of at most 2 x 27 taps + the
      // weights rounds once, relative 2^-24 of 255 levels, / (255 std): < 1e-4. bf16: plus one
      // rounding to 8 significant bits (half an ulp, 1 ulp at a tie the fp32 noise flips).
      const double tol = 1e-4 + (dtype == DType::BF16 ? std::ldexp(std::fabs(ref[i]), -7) : 0.0);
      const double d = std::fabs(g - ref[i]);
      worst = std::max(worst, d / tol);
      if (d > tol) {
        EXPECT(d <= tol, what << " batch " << b << " element " << i << ": gpu " << g << " cpu " << ref[i]);
        break;
      }
    }
  }
  EXPECT(cpu->skipped() == gpu->skipped(), what << ": skipped " << cpu->skipped() << " vs " << gpu->skipped());
  std::cout << what << ": worst |gpu - cpu| / tolerance = " << worst << ", skipped " << gpu->skipped() << std::endl;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cout << "SKIPPED: no GPU visible ([gpu] test: run it on the GPU machine)" << std::endl;
    return 77;
  }
  const std::string root = make_folder();
  try {
    compare(root, Split::Train, DType::F32, Loader::Gpu, "train fp32, GPU loader");
    compare(root, Split::Train, DType::BF16, Loader::Gpu, "train bf16, GPU loader");
    compare(root, Split::Val, DType::F32, Loader::Gpu, "val fp32, GPU loader");
    compare(root, Split::Train, DType::F32, Loader::Cpu, "train fp32, CPU loader into the GPU backend");
  } catch (const std::exception& e) {
    std::cout << "FAILED: " << e.what() << std::endl;
    ++failures;
  }
  std::system(("rm -rf " + root).c_str());
  std::cout << (failures ? "FAILED" : "All tests passed") << " (" << failures << " failure(s))" << std::endl;
  return failures ? 1 : 0;
}
