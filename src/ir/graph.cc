#include "ir/graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "base/strings.h"

namespace tessera {

std::string Node::label() const {
  return name.empty() ? str_cat(op_type, " (unnamed)") : str_cat(op_type, " '", name, "'");
}

int64_t Node::attr_int(const std::string& key, int64_t def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.i;
}

float Node::attr_float(const std::string& key, float def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.f;
}

std::string Node::attr_string(const std::string& key, const std::string& def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.s;
}

std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.ints;
}

std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.floats;
}

Value* Graph::add_value(std::string value_name, DType dtype, Shape shape) {
  auto v = std::make_unique<Value>();
  v->name = std::move(value_name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  Value* p = v.get();
  values_.push_back(std::move(v));
  if (!p->name.empty()) by_name_[p->name] = p;
  return p;
}

Value* Graph::add_input(std::string value_name, DType dtype, Shape shape) {
  Value* v = add_value(std::move(value_name), dtype, std::move(shape));
  v->is_input = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(std::string value_name, Tensor t) {
  Value* v = add_value(std::move(value_name), t.dtype(), t.shape());
  v->shape_known = true;
  v->constant = std::move(t);
  return v;
}

Node* Graph::add_node(std::string op_type, std::string node_name, std::vector<Value*> inputs, int num_outputs,
                      std::vector<std::string> output_names) {
  auto n = std::make_unique<Node>();
  n->op_type = std::move(op_type);
  n->name = std::move(node_name);
  n->inputs = std::move(inputs);
  for (Value* in : n->inputs)
    if (in != nullptr) in->uses.push_back(n.get());
  for (int i = 0; i < num_outputs; ++i) {
    std::string vname = i < static_cast<int>(output_names.size()) ? output_names[i] : str_cat(n->name, ":", i);
    Value* v = add_value(vname, DType::kUndefined, Shape());
    v->producer = n.get();
    n->outputs.push_back(v);
  }
  Node* p = n.get();
  nodes_.push_back(std::move(n));
  return p;
}

Node* Graph::add_node_producing(std::string op_type, std::string node_name, std::vector<Value*> inputs,
                                std::vector<Value*> outputs) {
  auto n = std::make_unique<Node>();
  n->op_type = std::move(op_type);
  n->name = std::move(node_name);
  n->inputs = std::move(inputs);
  for (Value* in : n->inputs)
    if (in != nullptr) in->uses.push_back(n.get());
  n->outputs = std::move(outputs);
  for (Value* v : n->outputs) v->producer = n.get();
  Node* p = n.get();
  nodes_.push_back(std::move(n));
  return p;
}

void Graph::mark_output(Value* v) {
  v->is_output = true;
  outputs_.push_back(v);
}

Value* Graph::find_value(const std::string& value_name) const {
  auto it = by_name_.find(value_name);
  return it == by_name_.end() ? nullptr : it->second;
}

namespace {

// Drops one entry of `n` from v's uses.
void drop_use(Value* v, const Node* n) {
  if (v == nullptr) return;
  auto it = std::find(v->uses.begin(), v->uses.end(), n);
  if (it != v->uses.end()) v->uses.erase(it);
}

}  // namespace

void Graph::set_input(Node* n, size_t i, Value* v) {
  if (i >= n->inputs.size()) n->inputs.resize(i + 1, nullptr);
  drop_use(n->inputs[i], n);
  n->inputs[i] = v;
  if (v != nullptr) v->uses.push_back(n);
}

void Graph::add_input(Node* n, Value* v) {
  n->inputs.push_back(v);
  if (v != nullptr) v->uses.push_back(n);
}

void Graph::replace_uses(Value* from, Value* to) {
  if (from == to) return;
  for (Node* n : from->uses)
    for (auto& in : n->inputs)
      if (in == from) {
        in = to;
        if (to != nullptr) to->uses.push_back(n);
      }
  from->uses.clear();
  for (auto& o : outputs_)
    if (o == from) o = to;
}

int Graph::use_count(const Value* v) const {
  int c = 0;
  for (const Node* n : v->uses) c += !n->dead;
  return c;
}

Node* Graph::sole_consumer(const Value* v) const {
  if (v->is_output) return nullptr;
  Node* found = nullptr;
  for (Node* n : v->uses) {
    if (n->dead) continue;
    if (found != nullptr) return nullptr;  // a second read, by it or another node
    found = n;
  }
  return found;
}

void Graph::compact() {
  // Values a removed node produced (a folded constant, an output taken over
  // by a fused node) must not point at it afterwards.
  std::set<const Node*> removed;
  for (auto& n : nodes_)
    if (n->dead) removed.insert(n.get());
  for (auto& v : values_)
    if (v->producer != nullptr && removed.count(v->producer)) v->producer = nullptr;
  for (auto& n : nodes_)
    if (!n->dead)
      for (Value* o : n->outputs) o->producer = n.get();
  for (auto& v : values_)
    v->uses.erase(std::remove_if(v->uses.begin(), v->uses.end(), [&](const Node* n) { return removed.count(n) != 0; }),
                  v->uses.end());
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [](auto& n) { return n->dead; }), nodes_.end());
  std::set<const Value*> live(inputs_.begin(), inputs_.end());
  live.insert(outputs_.begin(), outputs_.end());
  for (auto& n : nodes_) {
    live.insert(n->inputs.begin(), n->inputs.end());
    live.insert(n->outputs.begin(), n->outputs.end());
  }
  for (auto it = by_name_.begin(); it != by_name_.end();) {
    if (!live.count(it->second)) it = by_name_.erase(it);
    else ++it;
  }
  values_.erase(std::remove_if(values_.begin(), values_.end(), [&](auto& v) { return !live.count(v.get()); }),
                values_.end());
  // Graph outputs that were rewired to another value keep is_output.
  for (auto* o : outputs_) o->is_output = true;
}

Status Graph::sort_topologically() {
  std::unordered_map<const Value*, Node*> producer;
  for (auto& n : nodes_)
    for (auto* o : n->outputs) producer[o] = n.get();
  std::unordered_map<Node*, int> state;  // 0 new, 1 visiting, 2 done
  std::vector<std::unique_ptr<Node>> order;
  std::unordered_map<Node*, std::unique_ptr<Node>*> slot;
  for (auto& n : nodes_) slot[n.get()] = &n;
  // Iterative DFS so that deep chains (10 000 nodes) cannot overflow the stack.
  for (auto& root : nodes_) {
    if (!root || state[root.get()] == 2) continue;
    std::vector<std::pair<Node*, size_t>> stack{{root.get(), 0}};
    state[root.get()] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Value* in = node->inputs[next++];
        if (in == nullptr) continue;
        auto it = producer.find(in);
        if (it == producer.end()) continue;
        Node* p = it->second;
        if (state[p] == 1)
          return invalid_argument(str_cat("graph has a cycle through ", p->label(), " (value '", in->name, "')"));
        if (state[p] == 0) {
          state[p] = 1;
          stack.push_back({p, 0});
        }
        continue;
      }
      state[node] = 2;
      order.push_back(std::move(*slot[node]));
      stack.pop_back();
    }
  }
  nodes_ = std::move(order);
  return Status();
}

Status verify_graph(const Graph& g) {
  std::set<std::string> names;
  std::set<const Value*> available;
  for (auto& v : g.values()) {
    if (!v->name.empty() && !names.insert(v->name).second)
      return invalid_argument(str_cat("value name '", v->name, "' is defined twice"));
    if (v->is_input || v->is_constant()) available.insert(v.get());
  }
  for (auto& n : g.nodes()) {
    if (n->dead) continue;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* in = n->inputs[i];
      if (in == nullptr) continue;
      if (!available.count(in))
        return invalid_argument(str_cat(n->label(), " input ", i, " ('", in->name,
                                        "') is not a graph input, an initializer or an earlier node's output"));
    }
    for (const Value* o : n->outputs) {
      if (o->producer != n.get())
        return internal_error(str_cat(n->label(), " output '", o->name, "' names another producer"));
      if (o->is_constant()) return invalid_argument(str_cat(n->label(), " writes constant '", o->name, "'"));
      available.insert(o);
    }
  }
  for (const Value* o : g.outputs())
    if (!available.count(o)) return invalid_argument(str_cat("graph output '", o->name, "' is never produced"));
  // The use lists say what the inputs say (a pass that changed a node's
  // inputs behind the Graph's back shows here).
  std::map<std::pair<const Value*, const Node*>, int> reads;
  for (auto& n : g.nodes())
    if (!n->dead)
      for (const Value* in : n->inputs)
        if (in != nullptr) ++reads[{in, n.get()}];
  for (auto& v : g.values())
    for (const Node* n : v->uses)
      if (!n->dead && --reads[{v.get(), n}] < 0)
        return internal_error(
            str_cat("the use list of '", v->name, "' names ", n->label(), " more often than it reads the value"));
  for (const auto& [key, left] : reads)
    if (left > 0)
      return internal_error(str_cat(key.second->label(), " reads '", key.first->name, "' but its use list does not say so"));
  return Status();
}

}  // namespace tessera
