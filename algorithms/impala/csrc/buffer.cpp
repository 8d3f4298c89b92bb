#include "buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace batchenv::batcher {

namespace {

constexpr std::size_t kAlignment = 64;

// Bytes per row at `axis` and the number of outer blocks before it, for a C-contiguous array.
struct AxisLayout {
  std::int64_t outer;
  std::int64_t rows;
  std::size_t row_bytes;
};

AxisLayout axis_layout(const Shape& shape, std::size_t itemsize, int axis) {
  AxisLayout layout{1, shape[axis], itemsize};
  for (int d = 0; d < axis; ++d) layout.outer *= shape[d];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) layout.row_bytes *= shape[d];
  return layout;
}

}  // namespace

Buffer::Buffer(std::size_t nbytes) : size_(nbytes) {
  // aligned_alloc wants a multiple of the alignment; allocate at least one block so that an
  // empty array still has a valid, unique data pointer.
  const std::size_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  if (memory == nullptr) throw std::bad_alloc();
  data_ = static_cast<std::uint8_t*>(memory);
}

Buffer::~Buffer() { std::free(data_); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void* Buffer::release() {
  size_ = 0;
  return std::exchange(data_, nullptr);
}

void Buffer::free_raw(void* pointer) { std::free(pointer); }

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t extent : shape) n *= extent;
  return n;
}

std::size_t num_bytes(const DType& dtype, const Shape& shape) {
  return static_cast<std::size_t>(num_elements(shape)) * dtype.itemsize;
}

std::string shape_string(const Shape& shape) {
  std::string text = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d) text += ", ";
    text += std::to_string(shape[d]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

Leaf copy_leaf(const LeafView& view) {
  Leaf leaf{view.dtype, view.shape, Buffer(num_bytes(*view.dtype, view.shape))};
  if (leaf.data.size()) std::memcpy(leaf.data.data(), view.data, leaf.data.size());
  return leaf;
}

void slice_rows(const std::uint8_t* src, const Shape& shape, std::size_t itemsize, int axis,
                std::int64_t row_begin, std::int64_t count, std::uint8_t* dst) {
  const AxisLayout layout = axis_layout(shape, itemsize, axis);
  const std::size_t chunk = static_cast<std::size_t>(count) * layout.row_bytes;
  if (chunk == 0) return;
  for (std::int64_t o = 0; o < layout.outer; ++o) {
    const auto from = static_cast<std::size_t>(o * layout.rows + row_begin) * layout.row_bytes;
    std::memcpy(dst + static_cast<std::size_t>(o) * chunk, src + from, chunk);
  }
}

Shape concat_shape(const std::vector<const Leaf*>& parts, int axis) {
  Shape shape = parts.front()->shape;
  shape[axis] = 0;
  for (const Leaf* part : parts) shape[axis] += part->shape[axis];
  return shape;
}

void concatenate(const std::vector<const Leaf*>& parts, int axis, std::uint8_t* dst) {
  const Shape total = concat_shape(parts, axis);
  const std::size_t itemsize = parts.front()->dtype->itemsize;
  const AxisLayout layout = axis_layout(total, itemsize, axis);
  std::int64_t row_begin = 0;
  for (const Leaf* part : parts) {
    const std::int64_t rows = part->shape[axis];
    const std::size_t chunk = static_cast<std::size_t>(rows) * layout.row_bytes;
    if (chunk != 0) {
      for (std::int64_t o = 0; o < layout.outer; ++o) {
        const auto to = static_cast<std::size_t>(o * layout.rows + row_begin) * layout.row_bytes;
        std::memcpy(dst + to, part->data.data() + static_cast<std::size_t>(o) * chunk, chunk);
      }
    }
    row_begin += rows;
  }
}

}  // namespace batchenv::batcher
