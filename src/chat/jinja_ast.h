// chat/jinja_ast.h — the parsed form of a template: expressions and statements.
// Owns only data; the parser builds it, the interpreter walks it. Nodes own their
// children (unique_ptr), and the parser bounds nesting so walking stays shallow.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace cairn::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Literal,   // value
  Name,      // name
  GetAttr,   // a.name
  GetItem,   // a[b]
  Slice,     // a[b:c:d] (null children are omitted bounds)
  Call,      // a(args, kwargs)
  Filter,    // a | name(args, kwargs); a null when a filter block applies it
  Test,      // a is [not] name(args)
  Unary,     // op a: "-", "+", "not"
  Binary,    // a op b: + - * / // % ** ~ and or in "not in"
  Compare,   // a op1 b op2 c ... (ops in `ops`, operands in `args`)
  CondExpr,  // b if a else c (c may be null)
  ListLit,
  TupleLit,
  DictLit,  // keys in args, values in args2
};

struct Expr {
  ExprKind kind;
  int line = 0;
  std::string name;      // Name, GetAttr, Filter, Test, Unary/Binary operator
  Value value;           // Literal
  bool negated = false;  // Test: "is not"
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> args2;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  Break,
  Continue,
  With
};

// A set/for target: a name, "ns.attr", or a tuple of names to unpack.
struct Target {
  std::vector<std::string> names;
  std::string attr;  // non-empty: assign names[0].attr (namespace)
  bool tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // Text; Macro name
  ExprPtr expr;      // Output, For iterable, Set value, CallBlock call, FilterBlock filters
  ExprPtr cond;      // For's "if" filter
  Target target;     // For, Set, SetBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body) in order
  Body body;
  Body else_body;
  std::vector<MacroParam> params;                       // Macro, CallBlock (caller's params)
  std::vector<std::pair<Target, ExprPtr>> assignments;  // With
};

struct Program {
  Body body;
};

}  // namespace cairn::chat::jinja
