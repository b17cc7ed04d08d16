#!/usr/bin/env python3
"""Writes chat_feature_cases.inc: small templates, each rendered by real Jinja2
configured as Hugging Face's apply_chat_template configures it (trim_blocks,
lstrip_blocks, loopcontrols, tojson without HTML escaping). Run it with Debian's
python3-jinja2 when adding cases; the test binary itself needs no Python."""
import datetime
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(m):
    raise TemplateError(m)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def render(src, ctx):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda f: datetime.datetime(2026, 1, 15).strftime(f)
    try:
        return env.from_string(src).render(**ctx), None
    except Exception as e:  # the golden file records errors the same way
        return None, f"{type(e).__name__}: {e}"


MSGS = [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
CTX = {"messages": MSGS, "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True,
       "d": {"b": 2, "a": 1, "c": [1, 2.5, None, True, "x"]}, "s": "  Hello World  ",
       "n": 7, "f": 2.5, "u": "héllo 世界", "items": ["b", "A", "a", "c", "B"],
       "people": [{"name": "ann", "age": 31}, {"name": "bob", "age": 25},
                  {"name": "cy", "age": 31, "x": 1}]}

CASES = [
    # name, template
    ("text_only", "plain text\n"),
    ("variable", "{{ bos_token }}{{ n }}{{ f }}"),
    ("none_bool_print", "{{ none }} {{ true }} {{ false }} {{ d.c }}"),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}"),
    ("float_repr", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 1e-7 }} {{ 10 / 4 }} {{ 3 * 1.0 }}"),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none }} {{ '%s-%d' % ('a', 3) }}"),
    ("compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }} {{ none == none }}"),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ none or [] }} {{ 'a' if n > 5 else 'b' }} [{{ 'a' if false }}]"),
    ("in_ops", "{{ 'ell' in 'hello' }} {{ 2 in [1,2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 3 not in [1] }}"),
    ("is_tests", "{{ n is odd }} {{ n is even }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ s is string }} {{ d is mapping }} {{ items is sequence }} {{ d is iterable }} {{ x is defined }} {{ x is undefined }} {{ none is none }} {{ n is divisibleby 7 }} {{ n is eq 7 }} {{ n is equalto 8 }} {{ true is boolean }} {{ true is true }} {{ 0 is false }}"),
    ("is_not", "{{ n is not none }} {{ x is not defined }} {{ s is not string }}"),
    ("subscript", "{{ items[0] }}{{ items[-1] }}{{ d['a'] }}{{ d.b }}{{ items.1 }}{{ messages[1]['content'] }}"),
    ("slicing", "{{ items[1:3] }} {{ items[::-1] }} {{ items[:-2] }} {{ 'abcdef'[1::2] }} {{ u[1:4] }} {{ items[10:] }}"),
    ("unicode_len", "{{ u|length }} {{ u[-1] }} {{ u|upper }} {{ u|list|length }}"),
    ("dict_iter", "{% for k in d %}{{ k }};{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("loop_vars", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
    ("loop_prev_next", "{% for x in items %}{{ loop.previtem|default('^') }}{{ x }}{{ loop.nextitem|default('$') }} {% endfor %}"),
    ("loop_cycle", "{% for x in items %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("loop_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}"),
    ("loop_filter", "{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content }} {% endfor %}"),
    ("loop_nested", "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}"),
    ("loop_unpack", "{% for a, b in [(1, 'x'), (2, 'y')] %}{{ a }}{{ b }}{% endfor %}"),
    ("loop_scope", "{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, %}{{ t }}"),
    ("block_set", "{% set x %}  inner {{ n }}  {% endset %}[{{ x }}]{% set y | upper | trim %} abc {% endset %}[{{ y }}]"),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}"),
    ("macro_recursion", "{% macro f(k) %}{% if k > 0 %}{{ k }}{{ f(k - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}"),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ bos_token }}{% endmacro %}{{ m() }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% endcall %}"),
    ("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}<{{ item }}>{% endcall %}"),
    ("filter_block", "{% filter upper %}hello {{ n }}{% endfilter %}"),
    ("with_block", "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("comments", "a{# comment #}b\n{# line comment #}\nc"),
    ("ws_dash", "a  {{- n -}}  b\n  {%- if true -%}  c  {%- endif -%}\n  d"),
    ("ws_trim_lstrip", "<ul>\n  {% for x in [1,2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n"),
    ("ws_plus", "a\n  {%+ if true %}x{% endif +%}\nb"),
    ("ws_var_no_trim", "{{ n }}\n{{ n }}\n"),
    ("ws_comment_lstrip", "x\n    {# c #}\ny"),
    ("trailing_newline", "abc\n\n"),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("string_escapes", "{{ 'a\\nb\\t\\'q\\'' }}|{{ \"d\\\"q\\\"\" }}|{{ '\\u00e9\\x41' }}|{{ 'x' 'y' }}"),
    ("string_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'xay'.strip('xy') }}"),
    ("string_methods2", "{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ 'hello world'.title() }} {{ 'aXb'.replace('X', '-') }} {{ 'hello'.capitalize() }} {{ 'a-b'.find('-') }} {{ ','.join(['x','y']) }} {{ '{} and {}'.format(1, 'b') }} {{ 'a.b.c'.rsplit('.', 1) }}"),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list|length }}"),
    ("filter_trim_case", "[{{ s|trim }}] {{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }} [{{ 'xxhixx'|trim('x') }}]"),
    ("filter_length", "{{ items|length }} {{ d|length }} {{ 'abc'|count }} {{ missing|length }}"),
    ("filter_join", "{{ items|join(', ') }} {{ [1,2,3]|join }} {{ people|join('/', attribute='name') }}"),
    ("filter_default", "{{ missing|default('dflt') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ n|d(0) }}"),
    ("filter_first_last", "{{ items|first }} {{ items|last }} {{ 'abc'|first }} {{ []|first is undefined }}"),
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ \"it's\"|replace(\"'\", '\"') }}"),
    ("filter_round", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 5|round }}"),
    ("filter_int_float", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ 'ff'|int(base=16) }}"),
    ("filter_string_list", "{{ 12|string }} {{ d|string }} {{ 'ab'|list }} {{ d|list }} {{ (1, 'a')|string }}"),
    ("filter_map", "{{ people|map(attribute='name')|join(',') }} {{ ['a','b']|map('upper')|list }} {{ people|map(attribute='x', default=0)|list }}"),
    ("filter_select", "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('odd')|list }} {{ [0,1,'',none,'a']|select|list }} {{ [1,5,10]|select('gt', 3)|list }}"),
    ("filter_selectattr", "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }} {{ people|rejectattr('age', 'eq', 31)|map(attribute='name')|list }} {{ people|selectattr('x', 'defined')|list|length }} {{ messages|selectattr('role', 'in', ['user', 'system'])|list|length }}"),
    ("filter_unique", "{{ items|unique|list }} {{ items|unique(case_sensitive=true)|list }} {{ people|unique(attribute='age')|map(attribute='name')|list }}"),
    ("filter_sort", "{{ items|sort }} {{ items|sort(case_sensitive=true) }} {{ items|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }}"),
    ("filter_dictsort", "{{ d|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}"),
    ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{% for k, v in missing|items %}x{% endfor %}"),
    ("filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}"),
    ("filter_tojson", "{{ d|tojson }} {{ items|tojson }} {{ 'é\"\\n'|tojson }} {{ none|tojson }} {{ 1.0|tojson }} {{ {'z': 1, 'a': {'b': []}}|tojson(sort_keys=true) }}"),
    ("filter_tojson_indent", "{{ d|tojson(indent=2) }}\n{{ {'a': {}, 'b': [], 'c': [{}]}|tojson(indent=4) }}"),
    ("filter_tojson_ascii", "{{ u|tojson(ensure_ascii=true) }} {{ {'k': '\U0001F999'}|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }}"),
    ("filter_tojson_html", "{{ '<a href=\"x\">&</a>'|tojson }}"),
    ("filter_misc", "{{ -3|abs }} {{ [3,1,2]|max }} {{ [3,1,2]|min }} {{ [1,2,3]|sum }} {{ people|sum(attribute='age') }} {{ 'abc'|reverse }} {{ [1,2]|reverse|list }} {{ 'a b  c'|wordcount }} {{ 'x'|center(5) }}|"),
    ("filter_format", "{{ '%s=%d'|format('a', 5) }} {{ '%.2f'|format(3.14159) }} {{ '%05d|%-3s|'|format(42, 'x') }}"),
    ("filter_safe_escape", "{{ '<b>'|safe }} {{ '<b>'|escape }} {{ '<i>'|safe + '<u>' }} {{ '<i>' + '<u>'|e }} {{ ('<i>'|safe ~ '<u>') }}"),
    ("filter_truncate", "{{ 'Joel is a slug and a slow one'|truncate(9) }}|{{ 'hello world and more stuff'|truncate(15, true) }}|{{ 'short'|truncate(10) }}"),
    ("range_global", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}"),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict({'z': 0}, y=1)|tojson }}"),
    ("strftime", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}"),
    ("list_literals", "{{ [1, 'a', [none], {'k': (1, 2)}] }} {{ () }} {{ (1,) }} {{ {} }}"),
    ("messages_loop", "{% for m in messages %}<|{{ m['role'] }}|>{{ m.content }}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"),
    ("unary", "{{ -n }} {{ +f }} {{ -(1 + 2) }} {{ not not 1 }} {{ -2 ** 2 }}"),
    ("getattr_on_str", "{{ s.missing is defined }} {{ d.nokey is defined }} {{ items.count('a') }} {{ items.index('c') }}"),
    ("generator_truthy", "{{ 'yes' if [] | select else 'no' }} {{ 'yes' if []|list else 'no' }}"),
    ("undefined_ops", "[{{ missing }}][{{ missing ~ 'x' }}][{{ missing|trim }}][{{ missing is none }}][{{ missing == missing }}][{% for x in missing %}x{% endfor %}][{{ missing|string }}]"),
    ("inline_if_chain", "{{ 'a' if n == 1 else 'b' if n == 7 else 'c' }}"),
    ("nested_data", "{{ d.c[1] }} {{ d['c'][-1] }} {{ people[0].name }} {{ people[2]['x'] }} {{ messages[0].content|lower }}"),
    ("set_in_if", "{% if true %}{% set v = 3 %}{% endif %}{{ v }}"),
    ("macro_caller_kw", "{% macro m(a) %}{{ a }}{{ caller() if caller is defined else '-' }}{% endmacro %}{{ m(1) }}"),
    ("joiner", "{% set pipe = joiner('|') %}{% for x in [1,2,3] %}{{ pipe() }}{{ x }}{% endfor %}"),
    ("strings_compare_sort", "{{ ['b', 'B', 'a']|sort|join }} {{ [3, 1.5, 2]|sort|join(',') }}"),
    ("int_float_mix", "{{ 1 + 1.5 }} {{ 3 - 0.5 }} {{ 2 * 2.0 }} {{ 7 // 2.0 }} {{ 7 % 2.5 }} {{ true + 1 }}"),
    ("tool_schema_like", "{% for t in [{'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object', 'properties': {'x': {'type': 'string'}}}}}] %}{{ t.function.name }}({% for p, spec in t.function.parameters.properties|items %}{{ p }}: {{ spec.type }}{% endfor %}) {{ t|tojson }}{% endfor %}"),
    # errors Jinja2 raises at render time
    ("err_raise", "{{ raise_exception('custom failure') }}"),
    ("err_undefined_var", "{{ missing + 1 }}"),
    ("err_undefined_attr", "{{ d.nokey + 'x' }}"),
    ("err_undefined_attr_of_undefined", "{{ missing.attr }}"),
    ("err_concat_types", "{{ 'a' + 1 }}"),
    ("err_add_types", "{{ 1 + 'a' }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_iterate_none", "{% for x in none %}{% endfor %}"),
    ("err_tojson_generator", "{{ [1]|map('string')|tojson }}"),
    ("err_len_generator", "{{ [1]|select|length }}"),
    ("err_compare", "{{ 1 < 'a' }}"),
    ("err_unpack", "{% for a, b in [1] %}{% endfor %}"),
    ("err_mutate", "{{ items.append(1) }}"),
    ("err_undefined_item", "{{ items[10] + 1 }}"),
    ("err_not_callable", "{{ n() }}"),
    ("err_range_too_big", "{{ range(200000)|length }}"),
    ("err_ns_assign", "{% set x = 1 %}{% set x.a = 2 %}"),
    ("err_in_none", "{{ 1 in none }}"),
    ("err_unknown_filter", "{{ 1|nosuchfilter }}"),
]

def main():
    out = sys.stdout if len(sys.argv) < 2 else open(sys.argv[1], "w", encoding="utf-8")
    out.write("// Generated by gen_feature_cases.py from Jinja2 %s renders; do not edit.\n" %
              __import__("jinja2").__version__)
    out.write("// {name, template, expected render (or empty), expected error prefix (or empty)}\n")
    out.write("static const char* const kContextJson = R\"JSON(%s)JSON\";\n" % json.dumps(CTX, ensure_ascii=False))
    out.write("static const FeatureCase kFeatureCases[] = {\n")
    for name, src in CASES:
        r, e = render(src, dict(CTX))
        def lit(x):
            return "R\"CASE(" + x + ")CASE\""
        out.write("    {%s, %s, %s, %s},\n" % (json.dumps(name), lit(src), lit(r or ""), lit(e or "")))
    out.write("};\n")


if __name__ == "__main__":
    main()
