// The graph IR.
//
// A Graph holds Values (tensors: a name, a dtype, a shape, and for
// initializers and folded constants the data) and Nodes (ops: a type, a
// name, attributes, input and output Values). Nodes are kept in a
// topological order. Optional inputs that are absent are nullptr.
//
//   Graph g;
//   Value* x = g.add_input("x", DType::kFloat32, Shape{1, 64});
//   Value* c = g.add_constant("c", Tensor::from_floats({...}, Shape{1, 64}));
//   Node* add = g.add_node("Add", "add0", {x, c}, 1);
//   g.mark_output(add->outputs[0]);
//
// Ownership: the Graph owns every Node and Value; pointers stay valid until
// the Graph is destroyed or compact() removes them. Thread-safety: none; a
// Graph is built and transformed by one thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "ir/tensor.h"
#include "tessera/status.h"

namespace tessera {

struct Node;

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  bool shape_known = false;  // false until inference reached this value
  Node* producer = nullptr;  // nullptr for graph inputs and constants
  std::optional<Tensor> constant;  // initializers and folded values
  bool is_input = false;
  bool is_output = false;
  // The nodes that read it, one entry per input slot (a node reading it
  // twice is here twice), in the order they started to; nodes marked dead
  // stay until Graph::compact(). Kept by Graph: a node's inputs change
  // through Graph (add_node, set_input, add_input, replace_uses) only.
  std::vector<Node*> uses;

  bool is_constant() const { return constant.has_value(); }
};

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  Tensor t;
};

struct Node {
  std::string op_type;
  std::string name;
  std::vector<Value*> inputs;  // nullptr where an optional input is absent
  std::vector<Value*> outputs;
  std::map<std::string, Attribute> attrs;
  bool dead = false;  // set by passes; removed by Graph::compact()
  int64_t opset = 17;  // the model's default-domain opset (semantics differ, e.g. Softmax < 13)

  // "Conv 'resnet/conv1'" for messages.
  std::string label() const;
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t def) const;
  float attr_float(const std::string& key, float def) const;
  std::string attr_string(const std::string& key, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> def = {}) const;
  // Input i if present, else nullptr (also past the end).
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  // Number of inputs counting absent optionals up to the last present one.
  size_t num_inputs() const { return inputs.size(); }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;
  int64_t opset = 17;

  Value* add_value(std::string value_name, DType dtype, Shape shape);
  Value* add_input(std::string value_name, DType dtype, Shape shape);
  Value* add_constant(std::string value_name, Tensor t);
  // Appends a node with `num_outputs` fresh output values named
  // "<name>:<i>" unless output_names are given.
  Node* add_node(std::string op_type, std::string node_name, std::vector<Value*> inputs, int num_outputs,
                 std::vector<std::string> output_names = {});
  // Appends a node that takes over existing values as its outputs (their
  // previous producer must be marked dead). Lets a lowering keep a value's
  // identity and name.
  Node* add_node_producing(std::string op_type, std::string node_name, std::vector<Value*> inputs,
                           std::vector<Value*> outputs);
  void mark_output(Value* v);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  Value* find_value(const std::string& value_name) const;

  // Node n's input i becomes v (nullptr: absent); the use lists follow.
  void set_input(Node* n, size_t i, Value* v);
  // Appends v to node n's inputs.
  void add_input(Node* n, Value* v);
  // Replaces every use of `from` (node inputs and graph outputs) with `to`.
  void replace_uses(Value* from, Value* to);
  // Drops dead nodes and values that nothing references any more.
  void compact();
  // Number of reads of v by live nodes (a node reading it twice counts
  // twice). O(uses).
  int use_count(const Value* v) const;
  // The one live node that reads v, reading it once, where v is not a
  // graph output; else nullptr. O(uses).
  Node* sole_consumer(const Value* v) const;
  // Reorders nodes topologically (stable where already ordered); fails on a
  // cycle or a value read before any node produces it.
  Status sort_topologically();

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, Value*> by_name_;
};

// Checks structural invariants: unique value names, every node input is a
// graph input, a constant or an earlier node's output, producers agree,
// outputs are produced. Errors name the node and value at fault.
Status verify_graph(const Graph& g);

}  // namespace tessera
