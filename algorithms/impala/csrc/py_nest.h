// Python side of nests: flatten a nest of NumPy arrays into a Structure and leaf views, and
// rebuild a nest from leaves. Every function here needs the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "buffer.h"
#include "nest.h"

namespace batchenv::batcher {

namespace py = pybind11;

// What flatten() does with a leaf that is not a numpy.ndarray.
enum class LeafPolicy {
  kStrict,   // TypeError naming the leaf
  kConvert,  // numpy.asarray() it (lists, scalars, CPU torch tensors, anything with __array__)
};

struct FlatNest {
  Structure structure;
  std::vector<py::array> arrays;  // C-contiguous (copied only where the input was not)
  std::vector<LeafView> views;    // into `arrays`: valid while `arrays` lives
};

// Flattens `nest`: tuples, lists, dicts with str keys (in sorted key order) and None are
// structure; everything else is a leaf, which must become a C-contiguous array with a
// `batch_dim` axis and a dtype without Python objects. Errors (TypeError, ValueError) start
// with `caller` and name the offending leaf.
FlatNest flatten(py::handle nest, int batch_dim, LeafPolicy policy, const char* caller);

// Rebuilds the nest of `structure` from `leaves` (depth-first order; consumed).
py::object unflatten(const Node& structure, std::vector<py::object>& leaves);

// A NumPy array that takes over `leaf`'s buffer (no copy; freed with the array).
py::array adopt(Leaf&& leaf);

// An uninitialised C-contiguous NumPy array.
py::array empty_array(const DType* dtype, const Shape& shape);

// The interned DType of a NumPy dtype, and back.
const DType* intern_dtype(const py::dtype& dtype);
py::dtype dtype_object(const DType* dtype);

}  // namespace batchenv::batcher
