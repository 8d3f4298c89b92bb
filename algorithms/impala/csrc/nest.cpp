#include "nest.h"

namespace batchenv::batcher {

namespace {

constexpr std::size_t kMaxDescription = 200;

void collect_paths(const Node& node, const std::string& prefix, std::vector<std::string>* out) {
  switch (node.kind) {
    case Node::Kind::kLeaf:
      out->push_back(prefix.empty() ? "<root>" : prefix);
      return;
    case Node::Kind::kNone:
      return;
    case Node::Kind::kDict:
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        collect_paths(node.children[i], prefix + "['" + node.keys[i] + "']", out);
      }
      return;
    case Node::Kind::kTuple:
    case Node::Kind::kList:
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        collect_paths(node.children[i], prefix + "[" + std::to_string(i) + "]", out);
      }
      return;
  }
}

void describe_into(const Node& node, std::string* out) {
  if (out->size() > kMaxDescription) return;
  switch (node.kind) {
    case Node::Kind::kLeaf:
      *out += "*";
      return;
    case Node::Kind::kNone:
      *out += "None";
      return;
    case Node::Kind::kDict:
      *out += "{";
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        if (i) *out += ", ";
        *out += "'" + node.keys[i] + "': ";
        describe_into(node.children[i], out);
      }
      *out += "}";
      return;
    case Node::Kind::kTuple:
    case Node::Kind::kList: {
      const bool tuple = node.kind == Node::Kind::kTuple;
      *out += tuple ? "(" : "[";
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        if (i) *out += ", ";
        describe_into(node.children[i], out);
      }
      if (tuple && node.children.size() == 1) *out += ",";
      *out += tuple ? ")" : "]";
      return;
    }
  }
}

// The shape with the batch extent written as "B": what callers of one batch must share.
std::string shape_without_batch(const Shape& shape, int batch_dim) {
  std::string text = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d) text += ", ";
    text += static_cast<int>(d) == batch_dim ? std::string("B") : std::to_string(shape[d]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

}  // namespace

bool operator==(const Node& a, const Node& b) {
  return a.kind == b.kind && a.keys == b.keys && a.children == b.children;
}

std::size_t count_leaves(const Node& node) {
  if (node.kind == Node::Kind::kLeaf) return 1;
  std::size_t n = 0;
  for (const Node& child : node.children) n += count_leaves(child);
  return n;
}

std::vector<std::string> leaf_paths(const Node& node) {
  std::vector<std::string> paths;
  collect_paths(node, "", &paths);
  return paths;
}

std::string describe(const Node& node) {
  std::string text;
  describe_into(node, &text);
  if (text.size() > kMaxDescription) text = text.substr(0, kMaxDescription) + "...";
  return text;
}

std::string describe_mismatch(const Node& a, const std::vector<Leaf>& a_leaves, const Node& b,
                              const std::vector<Leaf>& b_leaves, int batch_dim) {
  if (a != b) {
    return "its nest structure " + describe(b) + " differs from the batch's " + describe(a);
  }
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < a_leaves.size(); ++i) {
    const Leaf& x = a_leaves[i];
    const Leaf& y = b_leaves[i];
    bool same_shape = x.shape.size() == y.shape.size();
    for (std::size_t d = 0; same_shape && d < x.shape.size(); ++d) {
      same_shape = static_cast<int>(d) == batch_dim || x.shape[d] == y.shape[d];
    }
    if (x.dtype != y.dtype || !same_shape) {
      if (paths.empty()) paths = leaf_paths(a);
      return "its leaf " + paths[i] + " has dtype " + y.dtype->name + " and shape " +
             shape_without_batch(y.shape, batch_dim) + ", the batch's has dtype " +
             x.dtype->name + " and shape " + shape_without_batch(x.shape, batch_dim) +
             " (B: any extent along batch_dim " + std::to_string(batch_dim) + ")";
    }
  }
  return "";
}

}  // namespace batchenv::batcher
