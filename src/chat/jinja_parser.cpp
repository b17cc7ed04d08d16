// chat/jinja_parser.cpp — the recursive-descent parser from tokens to the AST.
#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_lexer.h"

namespace cairn::chat::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::unique_ptr<Program> run() {
    auto prog = std::make_unique<Program>();
    std::string end;
    prog->body = parse_body({}, &end);
    return prog;
  }

 private:
  // --- token helpers ---
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  [[noreturn]] void error(std::string_view what) const {
    syntax_error(cur().line, cur().column, what);
  }
  std::string describe() const {
    switch (cur().type) {
      case Tok::Eof:
        return "end of template";
      case Tok::BlockEnd:
        return "end of statement block";
      case Tok::VarEnd:
        return "end of print statement";
      case Tok::Text:
        return "template data";
      default:
        return "'" + cur().text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) error("expected '" + std::string(op) + "', got " + describe());
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error("expected a name, got " + describe());
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error("expected end of statement block, got " + describe());
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) p_->error("template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // --- statements ---
  // Parses until a block tag whose name is in `ends` (left current, returned in *end)
  // or the end of input (only allowed when `ends` is empty).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* end) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (ends.size() != 0)
          error("unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
        return body;
      }
      if (t.type == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == Tok::VarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->line = t.line;
        advance();
        s->expr = parse_tuple(true);
        if (cur().type != Tok::VarEnd) error("expected end of print statement, got " + describe());
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        advance();
        if (cur().type != Tok::Name) error("expected a statement name, got " + describe());
        for (std::string_view e : ends) {
          if (cur().text == e) {
            *end = cur().text;
            advance();
            return body;
          }
        }
        const std::string& name = cur().text;
        if (name == "elif" || name == "else" || name.rfind("end", 0) == 0)
          error("unexpected '" + name + "'" +
                (ends.size() ? ", expected '" + std::string(*ends.begin()) + "'" : std::string()));
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe());
      }
    }
  }

  StmtPtr parse_statement() {
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    std::string kw = expect_name();
    std::string end;
    if (kw == "if") {
      s->kind = StmtKind::If;
      ExprPtr cond = parse_tuple(false);
      while (true) {
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end != "elif") break;
        cond = parse_tuple(false);
      }
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
    } else if (kw == "for") {
      s->kind = StmtKind::For;
      s->target = parse_target(false);
      if (!accept_name("in")) error("expected 'in', got " + describe());
      s->expr = parse_tuple(false, /*stop_at_if=*/true);
      if (accept_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) error("recursive loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->body = parse_body({"endfor", "else"}, &end);
      --loop_depth_;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
    } else if (kw == "set") {
      s->target = parse_target(true);
      if (accept_op("=")) {
        s->kind = StmtKind::Set;
        s->expr = parse_tuple(true);
      } else {
        s->kind = StmtKind::SetBlock;
        if (s->target.tuple) error("a block set takes a single target");
        if (is_op("|")) s->expr = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"}, &end);
      }
    } else if (kw == "macro") {
      s->kind = StmtKind::Macro;
      s->text = expect_name();
      s->params = parse_params();
      expect_block_end();
      int saved_loops = loop_depth_;
      loop_depth_ = 0;  // a macro body cannot break out of the caller's loop
      s->body = parse_body({"endmacro"}, &end);
      loop_depth_ = saved_loops;
      if (cur().type == Tok::Name) advance();  // "endmacro name" is allowed
    } else if (kw == "call") {
      s->kind = StmtKind::CallBlock;
      if (is_op("(")) s->params = parse_params();
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::Call) error("expected a call in call block");
      expect_block_end();
      s->body = parse_body({"endcall"}, &end);
    } else if (kw == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &end);
    } else if (kw == "with") {
      s->kind = StmtKind::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->assignments.empty()) expect_op(",");
        Target t = parse_target(false);
        expect_op("=");
        s->assignments.emplace_back(std::move(t), parse_expression(true));
      }
      expect_block_end();
      s->body = parse_body({"endwith"}, &end);
    } else if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) error("'" + kw + "' outside of a loop");
      s->kind = kw == "break" ? StmtKind::Break : StmtKind::Continue;
    } else {
      syntax_error(s->line, toks_[pos_ - 1].column, "encountered unknown tag '" + kw + "'");
    }
    expect_block_end();
    return s;
  }

  Target parse_target(bool allow_namespace) {
    Target t;
    bool paren = accept_op("(");
    t.names.push_back(expect_name());
    if (allow_namespace && !paren && is_op(".")) {
      advance();
      t.attr = expect_name();
      return t;
    }
    while (accept_op(",")) {
      t.tuple = true;
      if (cur().type != Tok::Name) break;
      t.names.push_back(expect_name());
    }
    if (paren) {
      t.tuple = true;
      expect_op(")");
    }
    if (std::any_of(t.names.begin(), t.names.end(), [](const std::string& n) {
          return n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
                 n == "None";
        }))
      error("cannot assign to a constant");
    return t;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!accept_op(")")) {
      if (!params.empty()) expect_op(",");
      if (accept_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (accept_op("="))
        p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value)
        error("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    return params;
  }

  // --- expressions ---
  ExprPtr parse_tuple(bool with_condexpr, bool stop_at_if = false) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!accept_op(",")) break;
        comma = true;
      }
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          (stop_at_if && (is_name("if") || is_name("recursive")))) {
        if (items.empty()) error("expected an expression, got " + describe());
        break;
      }
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
    }
    if (!comma) return std::move(items[0]);
    auto t = node(ExprKind::TupleLit, line);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      advance();
      auto c = node(ExprKind::CondExpr, line);
      c->a = parse_or();
      c->b = std::move(e);
      if (accept_name("else")) c->c = parse_expression(true);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = node(ExprKind::Binary, line);
    b->name = std::move(op);
    b->a = std::move(l);
    b->b = std::move(r);
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto u = node(ExprKind::Unary, cur().line);
      advance();
      u->name = "not";
      u->a = parse_not();
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::Compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      advance();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(ExprKind::Unary, cur().line);
      e->name = cur().text;
      advance();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, int line) {
    auto e = node(ExprKind::Literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    switch (t.type) {
      case Tok::Name: {
        std::string n = t.text;
        advance();
        if (n == "true" || n == "True") return literal(Value(true), line);
        if (n == "false" || n == "False") return literal(Value(false), line);
        if (n == "none" || n == "None") return literal(Value(None{}), line);
        auto e = node(ExprKind::Name, line);
        e->name = std::move(n);
        return e;
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) {
          s += cur().text;
          advance();
        }
        return literal(Value(std::move(s)), line);
      }
      case Tok::Int: {
        int64_t v = t.int_value;
        advance();
        return literal(Value(v), line);
      }
      case Tok::Float: {
        double v = t.float_value;
        advance();
        return literal(Value(v), line);
      }
      case Tok::Op:
        if (t.text == "(") {
          advance();
          if (accept_op(")")) {
            auto e = node(ExprKind::TupleLit, line);
            return e;
          }
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto e = node(ExprKind::ListLit, line);
          while (!accept_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (accept_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          return e;
        }
        if (t.text == "{") {
          advance();
          auto e = node(ExprKind::DictLit, line);
          while (!accept_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (accept_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args2.push_back(parse_expression(true));
          }
          return e;
        }
        break;
      default:
        break;
    }
    error("unexpected " + describe());
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        advance();
        if (cur().type == Tok::Int) {
          auto g = node(ExprKind::GetItem, line);
          g->a = std::move(e);
          g->b = literal(Value(cur().int_value), line);
          advance();
          e = std::move(g);
        } else {
          auto g = node(ExprKind::GetAttr, line);
          g->a = std::move(e);
          g->name = expect_name();
          e = std::move(g);
        }
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    DepthGuard guard(this);
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (is_op(":") && n < 2) {
      slice = true;
      advance();
      ++n;
      if (!is_op(":") && !is_op("]")) parts[n] = parse_expression(true);
    }
    expect_op("]");
    if (!slice) {
      auto g = node(ExprKind::GetItem, line);
      g->a = std::move(obj);
      g->b = std::move(parts[0]);
      return g;
    }
    auto s = node(ExprKind::Slice, line);
    s->a = std::move(obj);
    s->args.push_back(std::move(parts[0]));
    s->args.push_back(std::move(parts[1]));
    s->args.push_back(std::move(parts[2]));
    return s;
  }

  void parse_call_args(Expr* call) {
    DepthGuard guard(this);
    expect_op("(");
    bool first = true;
    while (!accept_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (accept_op(")")) break;
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = expect_name();
        advance();
        call->kwargs.emplace_back(std::move(k), parse_expression(true));
      } else {
        if (!call->kwargs.empty()) error("positional argument follows keyword argument");
        call->args.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_call(ExprPtr fn) {
    auto c = node(ExprKind::Call, cur().line);
    c->a = std::move(fn);
    parse_call_args(c.get());
    return c;
  }

  // "| name(args) | name ..." applied to `e` (null inside filter blocks).
  ExprPtr parse_filter_chain(ExprPtr e, bool leading_pipe = true) {
    bool first = true;
    while (first ? (!leading_pipe || is_op("|")) : is_op("|")) {
      if (!first || leading_pipe) expect_op("|");
      first = false;
      auto f = node(ExprKind::Filter, cur().line);
      f->name = expect_name();
      while (accept_op(".")) f->name += "." + expect_name();
      if (is_op("(")) parse_call_args(f.get());
      f->a = std::move(e);
      e = std::move(f);
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        auto t = node(ExprKind::Test, cur().line);
        advance();
        t->negated = accept_name("not");
        t->name = expect_name();
        while (accept_op(".")) t->name += "." + expect_name();
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if ((cur().type == Tok::Name || cur().type == Tok::String ||
                    cur().type == Tok::Int || cur().type == Tok::Float || is_op("(") ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error("you cannot chain multiple tests with is");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for-loop bodies, for break/continue
};

}  // namespace

std::unique_ptr<Program> parse_template(std::string_view source) {
  return Parser(lex(source)).run();
}

}  // namespace cairn::chat::jinja
