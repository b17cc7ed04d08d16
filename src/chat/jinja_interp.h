// chat/jinja_interp.h — walks the AST and renders text.
// Owns scoping (root, for-loop, macro and with scopes; namespaces for writes that
// outlive a loop), macros and call blocks, loop variables and controls, operators,
// attribute/item lookup, and the render limits (output size, loop iterations, steps,
// depth). Filters, tests, methods and globals live in jinja_filters.cpp and
// jinja_methods.cpp. Never throws anything but jinja::Failure.
#pragma once

#include <ctime>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace cairn::chat::jinja {

// --- filters, tests, methods, globals (jinja_filters.cpp, jinja_methods.cpp) ---
using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// A bound method such as "abc".startswith or dict.items; Undefined when there is none.
std::optional<Value> find_method(const Value& obj, std::string_view name);
void install_globals(DictData& globals);

// Argument `index` by position or `name` by keyword, else `fallback`.
Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback = Value());
// Fails with TypeError when a call passes more positionals or unknown keywords.
void check_args(const CallArgs& args, std::string_view fn, size_t max_positional,
                std::initializer_list<std::string_view> keywords);

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, const Value& context);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render(const Program& program);

  Value call(const Value& fn, CallArgs& args);
  Value apply_filter(std::string_view name, const Value& v, CallArgs& args);
  bool apply_test(std::string_view name, const Value& v, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);

  // One unit of work; fails once the step budget is spent.
  void charge(size_t steps = 1);
  // Fails when a string or list of `size` bytes/items would exceed the output bound.
  void check_size(size_t size) const;
  void count_loop_iteration();
  const std::tm& now() const { return now_; }
  // Namespaces can be made to contain themselves ({% set ns.me = ns %}); the
  // interpreter empties every namespace it made when it ends, breaking such cycles.
  Value make_namespace(DictData attrs);

 private:
  struct Scope {
    std::shared_ptr<Scope> parent;
    std::unordered_map<std::string, Value> vars;
  };
  using ScopePtr = std::shared_ptr<Scope>;
  enum class Flow { Normal, Break, Continue };

  Value lookup(const std::string& name) const;
  void assign(const Target& target, const Value& v);

  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void exec_macro_def(const Stmt& s);
  void exec_call_block(const Stmt& s, std::string& out);
  Value invoke_macro(const Stmt& m, const ScopePtr& def_scope, CallArgs& args);
  std::string render_in_scope(const Body& body, ScopePtr scope);

  Value eval(const Expr& e);
  Value eval_call(const Expr& e, std::optional<Value> caller = std::nullopt);
  Value eval_filter(const Expr& e, const Value* input);
  Value eval_compare(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_slice(const Expr& e);
  CallArgs eval_args(const Expr& e);
  void append(std::string& out, std::string_view s) const;

  RenderLimits limits_;
  std::tm now_{};
  ScopePtr scope_;
  size_t steps_ = 0;
  size_t loop_iterations_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<NamespaceData>> namespaces_;
};

// Python-style binary arithmetic shared with filters (sum): "+", "-", "*", "/", "//", "%", "**".
Value arithmetic(Interpreter& in, std::string_view op, const Value& a, const Value& b);

}  // namespace cairn::chat::jinja
