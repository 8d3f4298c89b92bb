// The structure of a nest without its leaves, and the comparison that decides whether two
// nests can share a batch. Pure C++17: py_nest.cpp builds these from Python objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"

namespace batchenv::batcher {

// One node of a nest. Leaves are numbered in depth-first order; dict children are ordered
// by key (keys are str, sorted by code point, like Python's sorted()).
struct Node {
  enum class Kind : std::uint8_t { kLeaf, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kLeaf;
  std::vector<std::string> keys;  // kDict only: one UTF-8 key per child, sorted
  std::vector<Node> children;     // kTuple, kList, kDict
};

// Immutable and shared: one structure serves every caller of a batch.
using Structure = std::shared_ptr<const Node>;

bool operator==(const Node& a, const Node& b);
inline bool operator!=(const Node& a, const Node& b) { return !(a == b); }

std::size_t count_leaves(const Node& node);

// Where each leaf sits, in leaf order: "['obs'][0]"; "<root>" for a nest that is one array.
std::vector<std::string> leaf_paths(const Node& node);

// A short Python-like picture of the structure: "{'a': (*, *), 'b': *}" (* = an array).
std::string describe(const Node& node);

// "" when the nest (structure `b`, leaves `b_leaves`) can join a batch whose first member is
// (`a`, `a_leaves`): same structure, and every leaf with the same dtype and the same shape
// apart from its extent along `batch_dim`. Otherwise one sentence naming the first
// difference, phrased from b's point of view.
std::string describe_mismatch(const Node& a, const std::vector<Leaf>& a_leaves, const Node& b,
                              const std::vector<Leaf>& b_leaves, int batch_dim);

}  // namespace batchenv::batcher
