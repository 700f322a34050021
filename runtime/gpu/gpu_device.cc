#include "runtime/gpu/gpu_device.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/gpu/blas.h"
#include "runtime/gpu/cuda_check.h"

namespace kiln::gpu {

GpuBufferPtr GpuBuffer::View(const ir::Shape& shape, GpuBufferPtr base) {
  GpuBufferPtr view(new GpuBuffer(shape, shape.ByteSize()));
  view->data_ = base->data_;
  view->device_ = base->device_;
  view->base_ = std::move(base);
  return view;
}

GpuBufferPtr GpuBuffer::Slice(const ir::Shape& shape, GpuBufferPtr base, int64_t offset) {
  GpuBufferPtr view(new GpuBuffer(shape, shape.ByteSize()));
  view->data_ = static_cast<uint8_t*>(base->data_) + offset;
  view->device_ = base->device_;
  view->base_ = std::move(base);
  return view;
}

GpuBufferPtr GpuBuffer::Tuple(std::vector<GpuBufferPtr> elements) {
  std::vector<ir::Shape> shapes;
  for (const GpuBufferPtr& e : elements) shapes.push_back(e->shape());
  GpuBufferPtr tuple(new GpuBuffer(ir::Shape::Tuple(std::move(shapes)), 0));
  tuple->elements_ = std::move(elements);
  return tuple;
}

GpuBufferPtr GpuBuffer::Token() {
  return GpuBufferPtr(new GpuBuffer(ir::Shape::Token(), 0));
}

GpuBuffer::~GpuBuffer() {
  if (owns_) device_->Free(this);
}

GpuCount CountGpus() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it
    return {0, cudaGetErrorString(error)};
  }
  if (count == 0) return {0, "the host has no CUDA device"};
  return {count, ""};
}

GpuDevice::GpuDevice(int ordinal, int64_t capacity, size_t feed_queue_capacity)
    : name_(absl::StrCat("gpu:", ordinal)),
      ordinal_(ordinal),
      memory_(capacity),
      infeed_(feed_queue_capacity),
      outfeed_(feed_queue_capacity) {}

absl::StatusOr<std::unique_ptr<GpuDevice>> GpuDevice::Create(int ordinal, int64_t memory_bytes,
                                                             size_t feed_queue_capacity) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (memory_bytes <= 0) memory_bytes = static_cast<int64_t>(total_bytes / 10 * 9);
  std::unique_ptr<GpuDevice> device(new GpuDevice(ordinal, memory_bytes, feed_queue_capacity));
  device->arch_ = absl::StrCat("sm_", prop.major, prop.minor);
  device->description_ = absl::StrCat(prop.name, " (", device->arch_, ", ",
                                      prop.multiProcessorCount, " SMs, ",
                                      total_bytes >> 20, " MiB)");
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&device->stream_, cudaStreamNonBlocking));
  // Keep freed memory in the pool instead of returning it to the driver.
  cudaMemPool_t pool;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal));
  uint64_t keep = UINT64_MAX;
  CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  absl::MutexLock lock(&device->staging_mu_);
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&device->staging_, kTransferChunkBytes));
  return device;
}

GpuDevice::~GpuDevice() {
  cudaSetDevice(ordinal_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  absl::MutexLock lock(&staging_mu_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
  absl::MutexLock blas_lock(&blas_mu_);
  if (blas_.has_value()) cudaFree(blas_->workspace);
}

absl::Status GpuDevice::Activate() const {
  return CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice");
}

absl::Status GpuDevice::Synchronize() const {
  RETURN_IF_ERROR(Activate());
  return CudaStatus(cudaStreamSynchronize(stream_), "a kernel or copy on the GPU failed");
}

absl::StatusOr<GpuDevice::Blas> GpuDevice::blas() {
  absl::MutexLock lock(&blas_mu_);
  if (blas_.has_value()) return *blas_;
  RETURN_IF_ERROR(Activate());
  Blas b;
  ASSIGN_OR_RETURN(b.handle, CreateBlasHandle());
  b.workspace_bytes = size_t{32} << 20;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&b.workspace, b.workspace_bytes));
  blas_ = b;
  return b;
}

absl::StatusOr<GpuBufferPtr> GpuDevice::AllocateBuffer(const ir::Shape& shape) {
  if (shape.IsToken()) return GpuBuffer::Token();
  if (shape.IsTuple()) {
    std::vector<GpuBufferPtr> elements;
    for (const ir::Shape& s : shape.tuple_shapes()) {
      ASSIGN_OR_RETURN(GpuBufferPtr e, AllocateBuffer(s));
      elements.push_back(std::move(e));
    }
    return GpuBuffer::Tuple(std::move(elements));
  }
  GpuBufferPtr buffer(new GpuBuffer(shape, shape.ByteSize()));
  buffer->device_ = this;
  const int64_t bytes = shape.ByteSize();
  buffer->set_charged_bytes(bytes);
  RETURN_IF_ERROR(memory_.Reserve(buffer.get(), bytes));
  buffer->owns_ = true;  // from here on the destructor releases the charge
  if (bytes > 0) {
    RETURN_IF_ERROR(Activate());
    const cudaError_t error = cudaMallocAsync(&buffer->data_, bytes, stream_);
    if (error != cudaSuccess) {
      cudaGetLastError();
      buffer->data_ = nullptr;
      return CudaStatus(error, absl::StrCat("allocating ", bytes, " bytes on ", name_).c_str());
    }
  }
  return buffer;
}

void GpuDevice::Free(GpuBuffer* buffer) {
  if (buffer->data_ != nullptr) {
    cudaSetDevice(ordinal_);
    cudaFreeAsync(buffer->data_, stream_);
  }
  memory_.Release(buffer, buffer->charged_bytes());
}

absl::StatusOr<runtime::BufferPtr> GpuDevice::Allocate(const ir::Shape& shape) {
  if (!shape.IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate a ", shape.ToString(), " buffer: only arrays"));
  }
  ASSIGN_OR_RETURN(GpuBufferPtr buffer, AllocateBuffer(shape));
  return runtime::BufferPtr(std::move(buffer));
}

absl::Status GpuDevice::Copy(void* device_ptr, void* host_ptr, int64_t size, bool to_device) {
  RETURN_IF_ERROR(Activate());
  absl::MutexLock lock(&staging_mu_);
  auto* host = static_cast<uint8_t*>(host_ptr);
  auto* dev = static_cast<uint8_t*>(device_ptr);
  for (int64_t done = 0; done < size;) {
    const int64_t n = std::min<int64_t>(size - done, kTransferChunkBytes);
    if (to_device) {
      std::memcpy(staging_, host + done, n);
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dev + done, staging_, n, cudaMemcpyHostToDevice, stream_));
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    } else {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(staging_, dev + done, n, cudaMemcpyDeviceToHost, stream_));
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      std::memcpy(host + done, staging_, n);
    }
    done += n;
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<GpuBuffer*> CheckRange(const runtime::Buffer& buffer, const GpuDevice* device,
                                      int64_t offset, int64_t size) {
  auto* gpu = dynamic_cast<const GpuBuffer*>(&buffer);
  if (gpu == nullptr || gpu->device() != device || !buffer.shape().IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the buffer is not an array on ", device->name()));
  }
  if (offset < 0 || size < 0 || offset > buffer.size_bytes() ||
      size > buffer.size_bytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", ", offset + size,
                                                   ") are outside the buffer of ",
                                                   buffer.size_bytes(), " bytes"));
  }
  return const_cast<GpuBuffer*>(gpu);
}

}  // namespace

absl::Status GpuDevice::CopyToBuffer(runtime::Buffer& buffer, int64_t offset, const void* src,
                                     int64_t size) {
  ASSIGN_OR_RETURN(GpuBuffer * gpu, CheckRange(buffer, this, offset, size));
  return Copy(static_cast<uint8_t*>(gpu->data()) + offset, const_cast<void*>(src), size, true);
}

absl::Status GpuDevice::CopyFromBuffer(const runtime::Buffer& buffer, int64_t offset, void* dst,
                                       int64_t size) {
  ASSIGN_OR_RETURN(GpuBuffer * gpu, CheckRange(buffer, this, offset, size));
  return Copy(static_cast<uint8_t*>(gpu->data()) + offset, dst, size, false);
}

}  // namespace kiln::gpu
