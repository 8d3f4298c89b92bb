#include "py_nest.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

namespace batchenv::batcher {

namespace {

// Nests deeper than this are refused (a list that contains itself would recurse forever).
constexpr int kMaxDepth = 128;

// One DType per distinct NumPy dtype, never freed: the core compares DType pointers and
// holds them without the GIL. GUARDED_BY(the GIL): only ever touched with the GIL held. The
// registry is leaked on purpose, so it never drops Python references after the interpreter
// has shut down.
struct Registry {
  std::deque<DType> dtypes;        // stable addresses
  std::deque<py::object> objects;  // objects[i] is the numpy.dtype of dtypes[i]
};

Registry& registry() {
  static Registry* instance = new Registry();
  return *instance;
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
}

class Flattener {
 public:
  Flattener(int batch_dim, LeafPolicy policy, const char* caller, FlatNest* out)
      : batch_dim_(batch_dim), policy_(policy), caller_(caller), out_(out) {}

  Node visit(py::handle obj, int depth) {
    if (depth > kMaxDepth) {
      throw py::value_error(std::string(caller_) + ": the nest is more than " +
                            std::to_string(kMaxDepth) + " levels deep at " + path() +
                            " (does a list or dict contain itself?)");
    }
    Node node;
    if (obj.is_none()) {
      node.kind = Node::Kind::kNone;
    } else if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
      node.kind = py::isinstance<py::tuple>(obj) ? Node::Kind::kTuple : Node::Kind::kList;
      py::sequence sequence = py::reinterpret_borrow<py::sequence>(obj);
      const std::size_t n = sequence.size();
      node.children.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        path_.push_back("[" + std::to_string(i) + "]");
        node.children.push_back(visit(sequence[i], depth + 1));
        path_.pop_back();
      }
    } else if (py::isinstance<py::dict>(obj)) {
      node.kind = Node::Kind::kDict;
      std::vector<std::pair<std::string, py::handle>> entries;
      for (auto item : py::reinterpret_borrow<py::dict>(obj)) {
        if (!py::isinstance<py::str>(item.first)) {
          throw py::type_error(std::string(caller_) + ": dict keys in a nest must be str, got " +
                               type_name(item.first) + " key " +
                               py::repr(item.first).cast<std::string>() + " at " + path());
        }
        entries.emplace_back(item.first.cast<std::string>(), item.second);
      }
      std::sort(entries.begin(), entries.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& entry : entries) {
        path_.push_back("['" + entry.first + "']");
        node.keys.push_back(entry.first);
        node.children.push_back(visit(entry.second, depth + 1));
        path_.pop_back();
      }
    } else {
      add_leaf(obj);
    }
    return node;
  }

 private:
  void add_leaf(py::handle obj) {
    if (policy_ == LeafPolicy::kStrict && !py::isinstance<py::array>(obj)) {
      throw py::type_error(std::string(caller_) + ": leaf " + path() + " has type " +
                           type_name(obj) +
                           ", expected a numpy.ndarray (pass a CPU torch tensor as "
                           "tensor.numpy(), a zero-copy view)");
    }
    // A new reference to the same array when it is already C-contiguous, else a copy.
    py::array array = py::array::ensure(obj, py::array::c_style);
    if (!array) throw py::error_already_set();
    const DType* dtype = intern_dtype(array.dtype());
    if (dtype->has_object) {
      throw py::type_error(std::string(caller_) + ": leaf " + path() + " has dtype " +
                           dtype->name +
                           ", which holds Python objects; the batcher moves raw bytes, so "
                           "only arrays of plain data types are supported");
    }
    Shape shape(array.shape(), array.shape() + array.ndim());
    if (static_cast<int>(shape.size()) <= batch_dim_) {
      throw py::value_error(std::string(caller_) + ": leaf " + path() + " has shape " +
                            shape_string(shape) + ", which has no axis batch_dim=" +
                            std::to_string(batch_dim_));
    }
    const auto* data = static_cast<const std::uint8_t*>(array.data());
    out_->views.push_back(LeafView{dtype, std::move(shape), data});
    out_->arrays.push_back(std::move(array));
  }

  std::string path() const {
    if (path_.empty()) return "<root>";
    std::string text;
    for (const auto& part : path_) text += part;
    return text;
  }

  const int batch_dim_;
  const LeafPolicy policy_;
  const char* const caller_;
  FlatNest* const out_;
  std::vector<std::string> path_;  // where visit() is, for error messages
};

py::object build(const Node& node, std::vector<py::object>& leaves, std::size_t* next) {
  switch (node.kind) {
    case Node::Kind::kLeaf:
      return std::move(leaves.at((*next)++));
    case Node::Kind::kNone:
      return py::none();
    case Node::Kind::kTuple: {
      py::tuple tuple(node.children.size());
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        tuple[i] = build(node.children[i], leaves, next);
      }
      return std::move(tuple);
    }
    case Node::Kind::kList: {
      py::list list(node.children.size());
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        list[i] = build(node.children[i], leaves, next);
      }
      return std::move(list);
    }
    case Node::Kind::kDict: {
      py::dict dict;
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        dict[py::str(node.keys[i])] = build(node.children[i], leaves, next);
      }
      return std::move(dict);
    }
  }
  throw std::logic_error("unknown nest node kind");
}

}  // namespace

const DType* intern_dtype(const py::dtype& dtype) {
  Registry& r = registry();
  for (std::size_t i = 0; i < r.objects.size(); ++i) {  // builtin dtypes are singletons
    if (r.objects[i].ptr() == dtype.ptr()) return &r.dtypes[i];
  }
  for (std::size_t i = 0; i < r.objects.size(); ++i) {
    if (r.objects[i].equal(dtype)) return &r.dtypes[i];
  }
  r.dtypes.push_back(DType{static_cast<int>(r.dtypes.size()),
                           static_cast<std::size_t>(dtype.itemsize()),
                           py::str(dtype).cast<std::string>(),
                           dtype.attr("hasobject").cast<bool>()});
  r.objects.push_back(py::reinterpret_borrow<py::object>(dtype));
  return &r.dtypes.back();
}

py::dtype dtype_object(const DType* dtype) {
  return py::reinterpret_borrow<py::dtype>(registry().objects.at(dtype->id));
}

FlatNest flatten(py::handle nest, int batch_dim, LeafPolicy policy, const char* caller) {
  FlatNest flat;
  Flattener flattener(batch_dim, policy, caller, &flat);
  flat.structure = std::make_shared<const Node>(flattener.visit(nest, 0));
  return flat;
}

py::object unflatten(const Node& structure, std::vector<py::object>& leaves) {
  std::size_t next = 0;
  return build(structure, leaves, &next);
}

py::array adopt(Leaf&& leaf) {
  py::dtype dtype = dtype_object(leaf.dtype);
  std::vector<py::ssize_t> shape(leaf.shape.begin(), leaf.shape.end());
  void* data = leaf.data.release();
  py::capsule owner(data, [](void* pointer) { Buffer::free_raw(pointer); });
  return py::array(dtype, std::move(shape), data, owner);
}

py::array empty_array(const DType* dtype, const Shape& shape) {
  return py::array(dtype_object(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

}  // namespace batchenv::batcher
