// Owned byte buffers, the leaf arrays the batcher moves, and the copies that concatenate and
// slice them along the batch axis. Pure C++17: the binding layer (py_nest.cpp) turns NumPy
// arrays into these and back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace batchenv::batcher {

// A NumPy dtype as the core sees it. The binding layer interns one DType per distinct dtype
// and never frees it, so a `const DType*` is a stable identity: equal pointers, equal dtypes.
struct DType {
  int id;                // index in the registry
  std::size_t itemsize;  // bytes per element
  std::string name;      // printable, e.g. "float32"
  bool has_object;       // holds PyObject pointers: never memcpy'd, rejected on the way in
};

using Shape = std::vector<std::int64_t>;

// A move-only, 64-byte aligned block of bytes (never null, even when empty).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t nbytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

  // Gives up ownership; free the pointer with Buffer::free_raw.
  void* release();
  static void free_raw(void* pointer);

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// An owned C-contiguous array: what a queued request or a reply holds.
struct Leaf {
  const DType* dtype = nullptr;
  Shape shape;
  Buffer data;
};

// A borrowed C-contiguous array; whoever builds it keeps the memory alive while it is used.
struct LeafView {
  const DType* dtype = nullptr;
  Shape shape;
  const std::uint8_t* data = nullptr;
};

std::int64_t num_elements(const Shape& shape);
std::size_t num_bytes(const DType& dtype, const Shape& shape);
// "(2, 3)" — Python's tuple spelling.
std::string shape_string(const Shape& shape);

// Copies `view` into a fresh owned leaf.
Leaf copy_leaf(const LeafView& view);

// Copies rows [row_begin, row_begin + count) along `axis` of the C-contiguous array `src`
// (shape `shape`) into the contiguous `dst` (shape `shape` with `count` rows at `axis`).
void slice_rows(const std::uint8_t* src, const Shape& shape, std::size_t itemsize, int axis,
                std::int64_t row_begin, std::int64_t count, std::uint8_t* dst);

// Concatenates `parts` (same dtype, same shape except at `axis`) along `axis` into the
// contiguous `dst`, which must hold concat_shape(parts, axis).
void concatenate(const std::vector<const Leaf*>& parts, int axis, std::uint8_t* dst);
Shape concat_shape(const std::vector<const Leaf*>& parts, int axis);

}  // namespace batchenv::batcher
