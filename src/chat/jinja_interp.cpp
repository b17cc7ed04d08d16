// chat/jinja_interp.cpp — the interpreter: statements, expressions, scopes, macros and loops over the AST.
#include "chat/jinja_interp.h"

#include <chrono>

namespace cairn::chat::jinja {

namespace {

// Restores a counter on scope exit (the interpreter unwinds through Failure).
struct CounterGuard {
  CounterGuard(int* counter, int limit, const char* what) : c(counter) {
    if (++*c > limit) fail("RecursionError", std::string("maximum ") + what + " depth exceeded");
  }
  ~CounterGuard() { --*c; }
  int* c;
};

}  // namespace

Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [k, v] : args.keyword)
    if (k == name) return v;
  return fallback;
}

void check_args(const CallArgs& args, std::string_view fn, size_t max_positional,
                std::initializer_list<std::string_view> keywords) {
  if (args.positional.size() > max_positional)
    fail("TypeError", std::string(fn) + "() takes at most " + std::to_string(max_positional) +
                          " positional argument(s) (" + std::to_string(args.positional.size()) +
                          " given)");
  for (const auto& kv : args.keyword) {
    bool known = false;
    for (std::string_view k : keywords) known = known || kv.first == k;
    if (!known)
      fail("TypeError",
           std::string(fn) + "() got an unexpected keyword argument '" + kv.first + "'");
  }
}

Interpreter::Interpreter(const RenderOptions& options, const Value& context)
    : limits_(options.limits) {
  if (options.now) {
    now_ = *options.now;
  } else {
    std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &now_);
  }
  auto globals = std::make_shared<Scope>();
  DictData builtins;
  install_globals(builtins);
  for (auto& [k, v] : builtins.entries) globals->vars[k.as_string()] = v;
  if (context.is_dict())
    for (const auto& [k, v] : context.as_dict().entries)
      if (k.is_string()) globals->vars[k.as_string()] = v;
  scope_ = std::make_shared<Scope>();
  scope_->parent = globals;
}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->attrs.entries.clear();
}

Value Interpreter::make_namespace(DictData attrs) {
  Value v = Value::ns(std::move(attrs));
  namespaces_.push_back(std::get<std::shared_ptr<NamespaceData>>(v.v));
  return v;
}

std::string Interpreter::render(const Program& program) {
  std::string out;
  exec_body(program.body, out);
  return out;
}

void Interpreter::charge(size_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    fail("LimitError",
         "template exceeded its work limit (" + std::to_string(limits_.max_steps) + " steps)");
}

void Interpreter::check_size(size_t size) const {
  if (size > limits_.max_output_bytes)
    fail("LimitError",
         "template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
}

void Interpreter::count_loop_iteration() {
  if (++loop_iterations_ > limits_.max_loop_iterations)
    fail("LimitError",
         "template exceeded " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
}

void Interpreter::append(std::string& out, std::string_view s) const {
  check_size(out.size() + s.size());
  out.append(s);
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined("UndefinedError: " + py_string_repr(name) + " is undefined");
}

void Interpreter::assign(const Target& t, const Value& v) {
  if (!t.attr.empty()) {
    Value ns = lookup(t.names[0]);
    if (!ns.is_namespace())
      fail("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    ns.as_namespace().attrs.set(Value(t.attr), v);
    return;
  }
  if (!t.tuple) {
    scope_->vars[t.names[0]] = v;
    return;
  }
  if (!v.is_list() && !v.is_dict() && !v.is_string() && !v.is_undefined())
    fail("TypeError", "cannot unpack non-iterable " + type_name(v) + " object");
  std::vector<Value> items = iterate(v);
  if (items.size() != t.names.size())
    fail("ValueError", (items.size() > t.names.size() ? "too many" : "not enough") +
                           std::string(" values to unpack (expected ") +
                           std::to_string(t.names.size()) + ", got " +
                           std::to_string(items.size()) + ")");
  for (size_t i = 0; i < items.size(); ++i) scope_->vars[t.names[i]] = items[i];
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::render_in_scope(const Body& body, ScopePtr scope) {
  std::swap(scope_, scope);
  std::string out;
  try {
    exec_body(body, out);
  } catch (...) {
    std::swap(scope_, scope);
    throw;
  }
  std::swap(scope_, scope);
  return out;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  CounterGuard guard(&depth_, limits_.max_eval_depth, "nesting");
  charge();
  try {
    switch (s.kind) {
      case StmtKind::Text:
        append(out, s.text);
        break;
      case StmtKind::Output: {
        Value v = eval(*s.expr);
        if (v.is_string())
          append(out, v.as_string());
        else
          append(out, to_str(v));
        break;
      }
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec_body(body, out);
        return exec_body(s.else_body, out);
      case StmtKind::For:
        exec_for(s, out);
        break;
      case StmtKind::Set:
        assign(s.target, eval(*s.expr));
        break;
      case StmtKind::SetBlock: {
        auto scope = std::make_shared<Scope>();
        scope->parent = scope_;
        Value v(render_in_scope(s.body, scope));
        if (s.expr) v = eval_filter(*s.expr, &v);
        assign(s.target, v);
        break;
      }
      case StmtKind::Macro:
        exec_macro_def(s);
        break;
      case StmtKind::CallBlock:
        exec_call_block(s, out);
        break;
      case StmtKind::FilterBlock: {
        auto scope = std::make_shared<Scope>();
        scope->parent = scope_;
        Value v(render_in_scope(s.body, scope));
        Value r = eval_filter(*s.expr, &v);
        append(out, to_str(r));
        break;
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::With: {
        auto scope = std::make_shared<Scope>();
        scope->parent = scope_;
        std::vector<std::pair<const Target*, Value>> values;
        for (const auto& [t, e] : s.assignments) values.emplace_back(&t, eval(*e));
        std::swap(scope_, scope);
        try {
          for (const auto& [t, v] : values) assign(*t, v);
          Flow f = exec_body(s.body, out);
          std::swap(scope_, scope);
          return f;
        } catch (...) {
          std::swap(scope_, scope);
          throw;
        }
      }
    }
  } catch (Failure& f) {
    if (f.line == 0) f.line = s.line;
    throw;
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
  Value iterable = eval(*s.expr);
  if (iterable.is_undefined() && iterable.undefined_message().rfind("UndefinedError", 0) != 0)
    iterable.raise_undefined();  // e.g. a forbidden attribute, not a missing one
  std::vector<Value> items = iterate(iterable);
  const ScopePtr outer = scope_;
  // Jinja2 gives every iteration a fresh scope: a {% set %} in the body is not seen
  // by the next iteration, nor after the loop.
  auto fresh = [&] {
    scope_ = std::make_shared<Scope>();
    scope_->parent = outer;
  };
  try {
    fresh();
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        count_loop_iteration();
        assign(s.target, item);
        if (truthy(eval(*s.cond))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    Value length(static_cast<int64_t>(n));
    auto position = std::make_shared<size_t>(0);
    Value cycle = Value::callable("cycle", [position](Interpreter&, CallArgs& a) -> Value {
      if (a.positional.empty()) fail("TypeError", "no items for cycling given");
      return a.positional[*position % a.positional.size()];
    });
    for (size_t i = 0; i < n; ++i) {
      count_loop_iteration();
      fresh();
      assign(s.target, items[i]);
      const int64_t i64 = static_cast<int64_t>(i);
      DictData loop;
      loop.entries.reserve(13);
      loop.entries.emplace_back(Value("index"), Value(i64 + 1));
      loop.entries.emplace_back(Value("index0"), Value(i64));
      loop.entries.emplace_back(Value("revindex"), Value(static_cast<int64_t>(n - i)));
      loop.entries.emplace_back(Value("revindex0"), Value(static_cast<int64_t>(n - i - 1)));
      loop.entries.emplace_back(Value("first"), Value(i == 0));
      loop.entries.emplace_back(Value("last"), Value(i + 1 == n));
      loop.entries.emplace_back(Value("length"), length);
      loop.entries.emplace_back(Value("depth"), Value(1));
      loop.entries.emplace_back(Value("depth0"), Value(0));
      if (i > 0) loop.entries.emplace_back(Value("previtem"), items[i - 1]);
      if (i + 1 < n) loop.entries.emplace_back(Value("nextitem"), items[i + 1]);
      *position = i;
      loop.entries.emplace_back(Value("cycle"), cycle);
      scope_->vars["loop"] = Value::dict(std::move(loop));
      Flow f = exec_body(s.body, out);
      if (f == Flow::Break) break;
    }
    scope_ = outer;
    if (n == 0) exec_body(s.else_body, out);
  } catch (...) {
    scope_ = outer;
    throw;
  }
}

void Interpreter::exec_macro_def(const Stmt& s) {
  ScopePtr def_scope = scope_;
  const Stmt* m = &s;
  // The macro holds its defining scope; the scope holds the macro: a cycle that lives
  // only as long as this render (the interpreter drops the root scope at the end).
  std::weak_ptr<Scope> weak = def_scope;
  scope_->vars[s.text] = Value::callable(s.text, [m, weak](Interpreter& in, CallArgs& a) {
    ScopePtr scope = weak.lock();
    if (!scope) fail("TemplateRuntimeError", "macro '" + m->text + "' outlived its template");
    return in.invoke_macro(*m, scope, a);
  });
}

Value Interpreter::invoke_macro(const Stmt& m, const ScopePtr& def_scope, CallArgs& args) {
  CounterGuard guard(&call_depth_, limits_.max_call_depth, "macro call");
  auto scope = std::make_shared<Scope>();
  scope->parent = def_scope;
  if (args.positional.size() > m.params.size())
    fail("TypeError", "macro '" + m.text + "' takes not more than " +
                          std::to_string(m.params.size()) + " argument(s)");
  std::vector<bool> bound(m.params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->vars[m.params[i].name] = args.positional[i];
    bound[i] = true;
  }
  for (auto& [k, v] : args.keyword) {
    size_t i = 0;
    while (i < m.params.size() && m.params[i].name != k) ++i;
    if (i == m.params.size()) {
      if (k == "caller") {
        scope->vars["caller"] = v;
        continue;
      }
      fail("TypeError", "macro '" + m.text + "' takes no keyword argument '" + k + "'");
    }
    if (bound[i])
      fail("TypeError", "macro '" + m.text + "' got multiple values for argument '" + k + "'");
    scope->vars[k] = v;
    bound[i] = true;
  }
  scope->vars["varargs"] = Value::list({});
  scope->vars["kwargs"] = Value::dict({});
  std::swap(scope_, scope);
  try {
    // Defaults see the parameters before them, as Jinja2 evaluates them in the macro.
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (bound[i]) continue;
      scope_->vars[m.params[i].name] =
          m.params[i].default_value
              ? eval(*m.params[i].default_value)
              : Value::undefined("UndefinedError: parameter " + py_string_repr(m.params[i].name) +
                                 " was not provided");
    }
  } catch (...) {
    std::swap(scope_, scope);
    throw;
  }
  std::swap(scope_, scope);
  return Value(render_in_scope(m.body, scope));
}

void Interpreter::exec_call_block(const Stmt& s, std::string& out) {
  const Stmt* block = &s;
  std::weak_ptr<Scope> weak = scope_;
  Value caller = Value::callable("caller", [block, weak](Interpreter& in, CallArgs& a) {
    ScopePtr parent = weak.lock();
    if (!parent) fail("TemplateRuntimeError", "caller outlived its block");
    CounterGuard guard(&in.call_depth_, in.limits_.max_call_depth, "macro call");
    auto scope = std::make_shared<Scope>();
    scope->parent = parent;
    std::swap(in.scope_, scope);
    try {
      for (size_t i = 0; i < block->params.size(); ++i) {
        const MacroParam& p = block->params[i];
        std::optional<Value> v;
        if (i < a.positional.size()) v = a.positional[i];
        for (const auto& [k, kv] : a.keyword)
          if (k == p.name) v = kv;
        if (!v)
          v = p.default_value ? in.eval(*p.default_value)
                              : Value::undefined("UndefinedError: parameter " +
                                                 py_string_repr(p.name) + " was not provided");
        in.scope_->vars[p.name] = *v;
      }
    } catch (...) {
      std::swap(in.scope_, scope);
      throw;
    }
    std::swap(in.scope_, scope);
    return Value(in.render_in_scope(block->body, scope));
  });
  Value r = eval_call(*s.expr, caller);
  append(out, to_str(r));
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fn.raise_undefined();
  if (!fn.is_callable()) fail("TypeError", "'" + type_name(fn) + "' object is not callable");
  charge();
  return fn.as_callable().fn(*this, args);
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs args;
  args.positional.reserve(e.args.size());
  for (const auto& a : e.args) args.positional.push_back(eval(*a));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
  return args;
}

Value Interpreter::eval_call(const Expr& e, std::optional<Value> caller) {
  Value fn = eval(*e.a);
  CallArgs args = eval_args(e);
  if (caller) args.keyword.emplace_back("caller", std::move(*caller));
  return call(fn, args);
}

Value Interpreter::eval_filter(const Expr& e, const Value* input) {
  // In a filter block the chain bottoms out at a null operand standing for the body.
  Value v = !e.a ? (input ? *input : Value()) : input ? eval_filter(*e.a, input) : eval(*e.a);
  CallArgs args = eval_args(e);
  return apply_filter(e.name, v, args);
}

Value Interpreter::apply_filter(std::string_view name, const Value& v, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) fail("TemplateAssertionError", "No filter named '" + std::string(name) + "'.");
  charge();
  return f(*this, v, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& v, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) fail("TemplateAssertionError", "No test named '" + std::string(name) + "'.");
  charge();
  return t(*this, v, args);
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==")
      ok = py_equal(left, right);
    else if (op == "!=")
      ok = !py_equal(left, right);
    else if (op == "in" || op == "not in") {
      CallArgs a;
      a.positional.push_back(right);
      ok = apply_test("in", left, a) == (op == "in");
    } else {
      int c = py_compare(left, right, op);
      ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value l = eval(*e.a);
    return truthy(l) ? eval(*e.b) : l;
  }
  if (op == "or") {
    Value l = eval(*e.a);
    return truthy(l) ? l : eval(*e.b);
  }
  Value l = eval(*e.a);
  Value r = eval(*e.b);
  if (op == "~") {
    std::string s = to_str(l);
    std::string t = to_str(r);
    check_size(s.size() + t.size());
    charge((s.size() + t.size()) / 256);
    return Value(s + t);
  }
  return arithmetic(*this, op, l, r);
}

Value Interpreter::eval(const Expr& e) {
  CounterGuard guard(&depth_, limits_.max_eval_depth, "nesting");
  charge();
  switch (e.kind) {
    case ExprKind::Literal:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name);
    case ExprKind::GetAttr:
      return get_attr(eval(*e.a), e.name);
    case ExprKind::GetItem: {
      Value obj = eval(*e.a);
      return get_item(obj, eval(*e.b));
    }
    case ExprKind::Slice:
      return eval_slice(e);
    case ExprKind::Call:
      return eval_call(e);
    case ExprKind::Filter:
      return eval_filter(e, nullptr);
    case ExprKind::Test: {
      Value v = eval(*e.a);
      CallArgs args = eval_args(e);
      return Value(apply_test(e.name, v, args) != e.negated);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.a);
      if (e.name == "not") return Value(!truthy(v));
      if (v.is_undefined()) v.raise_undefined();
      if (v.is_bool()) v = Value(static_cast<int64_t>(v.as_bool()));
      if (e.name == "+" && (v.is_int() || v.is_float())) return v;
      if (v.is_int()) {
        if (v.as_int() == INT64_MIN) fail("OverflowError", "integer overflow");
        return Value(-v.as_int());
      }
      if (v.is_float()) return Value(-v.as_float());
      fail("TypeError", "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case ExprKind::Binary:
      return eval_binary(e);
    case ExprKind::Compare:
      return eval_compare(e);
    case ExprKind::CondExpr:
      if (truthy(eval(*e.a))) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined("UndefinedError: the inline if-expression on line " +
                              std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case ExprKind::ListLit:
    case ExprKind::TupleLit: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::list(std::move(items),
                         e.kind == ExprKind::TupleLit ? ListKind::Tuple : ListKind::List);
    }
    case ExprKind::DictLit: {
      DictData d;
      for (size_t i = 0; i < e.args.size(); ++i) d.set(eval(*e.args[i]), eval(*e.args2[i]));
      return Value::dict(std::move(d));
    }
  }
  fail("TemplateRuntimeError", "unknown expression");
}

}  // namespace cairn::chat::jinja
