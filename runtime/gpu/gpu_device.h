// CUDA devices: buffers in device memory from the device's stream-ordered
// pool, charged to a MemoryTracker like every backend's; transfers staged
// through pinned host memory; one stream per device orders kernels,
// copies and frees.
#ifndef KILN_RUNTIME_GPU_GPU_DEVICE_H_
#define KILN_RUNTIME_GPU_GPU_DEVICE_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/device.h"

namespace kiln::gpu {

class GpuDevice;
class GpuBuffer;
using GpuBufferPtr = std::shared_ptr<GpuBuffer>;

// An array in device memory (or a view of another buffer's bytes under a
// new shape), a tuple of buffers, or a token. Thread-compatible.
class GpuBuffer final : public runtime::Buffer {
 public:
  // Views `base`'s bytes as `shape` (same byte size), keeping it alive.
  static GpuBufferPtr View(const ir::Shape& shape, GpuBufferPtr base);
  // Views `shape`'s bytes starting `offset` bytes into `base`, which must
  // hold them; keeps `base` alive.
  static GpuBufferPtr Slice(const ir::Shape& shape, GpuBufferPtr base, int64_t offset);
  static GpuBufferPtr Tuple(std::vector<GpuBufferPtr> elements);
  static GpuBufferPtr Token();
  // The GPU buffer behind `buffer`, or null when another backend owns it.
  static GpuBufferPtr Cast(const runtime::BufferPtr& buffer) {
    return std::dynamic_pointer_cast<GpuBuffer>(buffer);
  }
  ~GpuBuffer() override;

  void* data() const { return data_; }
  // The device the bytes live on (null for tuples and tokens).
  GpuDevice* device() const { return device_; }
  int tuple_size() const override { return static_cast<int>(elements_.size()); }
  runtime::BufferPtr tuple_element(int index) const override { return elements_[index]; }
  const GpuBufferPtr& element(int index) const { return elements_[index]; }

 private:
  friend class GpuDevice;
  GpuBuffer(ir::Shape shape, int64_t size_bytes) : Buffer(std::move(shape), size_bytes, 0) {}

  void* data_ = nullptr;
  GpuDevice* device_ = nullptr;
  bool owns_ = false;  // allocated (and charged) by this buffer
  GpuBufferPtr base_;  // the buffer a view reads
  std::vector<GpuBufferPtr> elements_;
};

// Thread-safe.
class GpuDevice final : public runtime::Device {
 public:
  // The CUDA device `ordinal`, named "gpu:<ordinal>", with a capacity of
  // `memory_bytes` (0: 90% of what the device has).
  static absl::StatusOr<std::unique_ptr<GpuDevice>> Create(int ordinal, int64_t memory_bytes,
                                                           size_t feed_queue_capacity);
  ~GpuDevice() override;

  const std::string& name() const override { return name_; }
  const std::string& kind() const override { return kind_; }
  int ordinal() const override { return ordinal_; }
  runtime::MemoryTracker* memory() override { return &memory_; }
  runtime::FeedQueue& infeed() override { return infeed_; }
  runtime::FeedQueue& outfeed() override { return outfeed_; }

  absl::StatusOr<runtime::BufferPtr> Allocate(const ir::Shape& shape) override;
  absl::Status CopyToBuffer(runtime::Buffer& buffer, int64_t offset, const void* src,
                            int64_t size) override;
  absl::Status CopyFromBuffer(const runtime::Buffer& buffer, int64_t offset, void* dst,
                              int64_t size) override;

  // An uninitialized array of `shape` (token and tuple shapes too, their
  // arrays allocated), charged to the device.
  absl::StatusOr<GpuBufferPtr> AllocateBuffer(const ir::Shape& shape);
  // The stream everything on this device is ordered on.
  cudaStream_t stream() const { return stream_; }
  // Makes this device current on the calling thread.
  absl::Status Activate() const;
  // The "sm_90" the device's kernels are compiled for.
  const std::string& arch() const { return arch_; }
  const std::string& description() const { return description_; }
  // Waits for everything queued on the stream; the first error of an
  // earlier kernel shows here.
  absl::Status Synchronize() const;

  // The device's cuBLASLt handle and GEMM workspace, made on first use.
  struct Blas {
    void* handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };
  absl::StatusOr<Blas> blas();

 private:
  friend class GpuBuffer;
  GpuDevice(int ordinal, int64_t capacity, size_t feed_queue_capacity);
  void Free(GpuBuffer* buffer);
  absl::Status Copy(void* device_ptr, void* host_ptr, int64_t size, bool to_device);

  const std::string name_;
  const std::string kind_ = "gpu";
  const int ordinal_;
  std::string arch_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  runtime::MemoryTracker memory_;
  runtime::FeedQueue infeed_;
  runtime::FeedQueue outfeed_;
  absl::Mutex blas_mu_;
  std::optional<Blas> blas_ ABSL_GUARDED_BY(blas_mu_);
  absl::Mutex staging_mu_;
  void* staging_ ABSL_GUARDED_BY(staging_mu_) = nullptr;  // pinned, kTransferChunkBytes
};

// How many CUDA devices the host has; 0 with the reason when none can be
// used (no driver, no device).
struct GpuCount {
  int count = 0;
  std::string reason;
};
GpuCount CountGpus();

}  // namespace kiln::gpu

#endif  // KILN_RUNTIME_GPU_GPU_DEVICE_H_
