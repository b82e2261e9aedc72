"""call_spec: the functions, matches and safety rules of `calls`, as text.

Pure (no node): every accepted form gives the spec or head the tracer is
handed; every rejected input gives one UsageError line.
"""

from __future__ import annotations

from typing import Any

import pytest

from beam_probe.erldist.errors import UsageError
from beam_probe.erldist.terms import Atom, ImproperList
from beam_probe.probes.call_spec import (ALLOW_FLAG, FunctionSpec,
                                         check_safe, narrows, parse_function,
                                         parse_match)

A = Atom


@pytest.mark.parametrize("text, module, function, arity, elixir", [
    ("ets:insert/2", "ets", "insert", 2, False),
    ("  ets:insert/2 ", "ets", "insert", 2, False),
    ("'my mod':f/1", "my mod", "f", 1, False),
    ("erlang:list_to_atom/1", "erlang", "list_to_atom", 1, False),
    ("lists:keyfind/_", "lists", "keyfind", None, False),
    ("'Elixir.MyApp.Cache':put/2", "Elixir.MyApp.Cache", "put", 2, False),
    ("m:'f\\'g'/0", "m", "f'g", 0, False),
    ("node@x:f/255", "node@x", "f", 255, False),
    ("_:_/_", "_", "_", None, False),
    ("_:handle_call/3", "_", "handle_call", 3, False),
    ("MyApp.Cache.put/2", "Elixir.MyApp.Cache", "put", 2, True),
    (":ets.insert/2", "ets", "insert", 2, True),
    (':"my mod".f/1', "my mod", "f", 1, True),
    ("Map.put/3", "Elixir.Map", "put", 3, True),
    ("Kernel.+/2", "Elixir.Kernel", "+", 2, True),
    ("Kernel.===/2", "Elixir.Kernel", "===", 2, True),
    ("MyApp.fun_with?/1", "Elixir.MyApp", "fun_with?", 1, True),
    ("MyApp.fun!/1", "Elixir.MyApp", "fun!", 1, True),
    ("MyApp.Cache.put/_", "Elixir.MyApp.Cache", "put", None, True),
])
def test_function_forms(text: str, module: str, function: str,
                        arity: int | None, elixir: bool) -> None:
    spec = parse_function(text)
    assert spec == FunctionSpec(module, function, arity, text.strip(),
                                elixir=elixir)


@pytest.mark.parametrize("text, says", [
    ("", "cannot read"),
    ("ets:insert", "arity is missing"),
    ("ets:insert/", "cannot read"),
    ("ets:insert/-1", "cannot read"),
    ("ets:insert/256", "0 to 255"),
    ("ets:insert/2x", "cannot read"),
    ("ets:Insert/2", "cannot read"),
    ("Ets:insert/2", "cannot read"),
    ("ets.insert/2", "cannot read"),
    ("myapp.Cache.put/2", "cannot read"),
    ("MyApp.Cache/2", "cannot read"),
    ("ets:insert/2 extra", "cannot read"),
    ("'':f/1", "module name is empty"),
    ("m:'':1", "cannot read"),
    ("m:''/1", "function name is empty"),
    (f"{'a' * 256}:f/1", "at most 255"),
    (f"m:{'f' * 256}/1", "at most 255"),
    (f"MyApp.{'f' * 256}/1", "at most 255"),
    ("m:f/1" * 200, "too long"),
    ("m:'\\x{110000}'/1", "bad escape"),
    # A surrogate: chr() makes it, but no atom can hold it (was exit 1,
    # UnicodeEncodeError, when the name was encoded for the node).
    ("m:'a\\x{D800}'/1", "bad escape"),
    (":'a\\u{DFFF}'.f/1", "bad escape"),
])
def test_function_refused(text: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_function(text)
    message = str(caught.value)
    assert says in message and "\n" not in message


@pytest.mark.parametrize("text, arity, head", [
    ("sessions, _", 2, [A("sessions"), A("_")]),
    ("'my table', _", 2, [A("my table"), A("_")]),
    ("true, false", 2, [True, False]),
    ("1, -2, 3.5, 16#ff, $a", 5, [1, -2, 3.5, 255, 97]),
    ('"abc", <<"abc">>, <<1, 2>>', 3, ["abc", b"abc", b"\x01\x02"]),
    ("{a, _}, [1, 2 | T]", 2,
     [(A("a"), A("_")), ImproperList((1, 2), A("$1"))]),
    ("[], {}", 2, [[], ()]),
    ("#{k => _, 1 => [x]}", 1, [{A("k"): A("_"), 1: [A("x")]}]),
    ("#{}", 1, [{}]),
    ("#{a => 1, a => 2}", 1, [{A("a"): 2}]),     # as Erlang: the last
    ("X, Y, X", 3, [A("$1"), A("$2"), A("$1")]),
    ("_Name, _, _Other", 3, [A("_"), A("_"), A("_")]),
    ("{K, V}, V", 2, [(A("$1"), A("$2")), A("$2")]),
    ("  ", 0, []),
    ("", 0, []),
    ("a, b, c", None, [A("a"), A("b"), A("c")]),
    ("'_'", 1, [A("_")]),
])
def test_erlang_match(text: str, arity: int | None, head: list[Any]) -> None:
    assert parse_match(text, arity) == head


def test_erlang_string_is_a_list_and_binary_bytes() -> None:
    # The codec sends a str as a list and bytes as a binary: the types, not
    # only the values, decide what the node matches.
    head = parse_match('"ab", <<"ab">>', 2)
    assert type(head[0]) is str and type(head[1]) is bytes


@pytest.mark.parametrize("text, arity, head", [
    (":sessions, _", 2, [A("sessions"), A("_")]),
    (':"my table", :\'q\'', 2, [A("my table"), A("q")]),
    ('"abc"', 1, [b"abc"]),
    ('"é", <<"é">>, <<1, 2>>', 3, [b"\xc3\xa9", b"\xc3\xa9", b"\x01\x02"]),
    ("'abc'", 1, ["abc"]),
    ("?a, 0x1F, 1_000, -1.5", 4, [97, 31, 1000, -1.5]),
    ("nil, true, false", 3, [A("nil"), True, False]),
    ("MyApp.Key, Map", 2, [A("Elixir.MyApp.Key"), A("Elixir.Map")]),
    ("{:a, _}, [1 | t]", 2, [(A("a"), A("_")), ImproperList((1,), A("$1"))]),
    ("%{k: _, \"s\" => v}", 1, [{A("k"): A("_"), b"s": A("$1")}]),
    ("%{:a => 1}", 1, [{A("a"): 1}]),
    ("%MyApp.S{id: id}, %S{}", 2,
     [{A("__struct__"): A("Elixir.MyApp.S"), A("id"): A("$1")},
      {A("__struct__"): A("Elixir.S")}]),
    ("x, y, x, _ignored", 4, [A("$1"), A("$2"), A("$1"), A("_")]),
])
def test_elixir_match(text: str, arity: int | None, head: list[Any]) -> None:
    assert parse_match(text, arity, elixir=True) == head


@pytest.mark.parametrize("text, arity, elixir, says", [
    ("a", 2, False, "gives 1 argument where the function takes 2"),
    ("a, b", 1, False, "gives 2 arguments where the function takes 1"),
    ("", 1, False, "gives 0 arguments"),
    ("a b", 1, False, "expected ',' or the end, found 'b'"),
    ("X Y", 1, False, "found 'Y'"),
    ("a,", 1, False, "missing at the end"),
    ("{a, b", 1, False, "expected '}'"),
    ("[a", 1, False, "expected ']'"),
    ("a)", 1, False, "found ')'"),
    ("#{X => 1}", 1, False, "map key must be a literal"),
    ("#{_ => 1}", 1, False, "map key must be a literal"),
    ("#{{a, _} => 1}", 1, False, "map key must be a literal"),
    ("#{[1] => 1}", 1, False, "map key must be a plain term"),
    ("#{1 => a, 1.0 => b}", 1, False, "cannot be told apart"),
    ("#{1 => a, true => b}", 1, False, "cannot be told apart"),
    ("'$1'", 1, False, "match variable"),
    ("'$_'", 1, False, "match variable"),
    ("<<X>>", 1, False, "strings and integers only"),
    ("a + b", 1, False, "cannot read"),
    ("f(x)", 1, False, "found '('"),
    ("&", 1, False, "cannot read"),
    ("{" * 17 + "}" * 17, 1, False, "more than 16 deep"),
    ("[" * 5000, 1, False, "at most 1000"),
    ("a" * 1001, 1, False, "at most 1000"),
    (f"'{'a' * 256}'", 1, False, "at most 255"),
    # Escapes past Unicode or of a surrogate: one line (were exit 1,
    # OverflowError and UnicodeEncodeError).
    ("'\\x{D800}'", 1, False, "bad escape"),
    ("<<\"\\x{D800}\">>", 1, False, "not a Unicode character"),
    ("\"\\x{FFFFFFFFFF}\"", 1, False, "not a Unicode character"),
    (':"a\\x{D800}"', 1, True, "bad escape"),
    ("[a: 1]", 1, True, "keyword key"),
    ("%{x => 1}", 1, True, "map key must be a literal"),
    (':"$1"', 1, True, "match variable"),
    (f":{'a' * 256}", 1, True, "at most 255"),
    ("x y", 1, True, "found 'y'"),
    ("&", 1, True, "cannot read"),
    ("#{a => 1}", 1, True, "cannot read"),
    ("{" * 17 + "}" * 17, 1, True, "more than 16 deep"),
    # The other language's look: a hint which one --match is read in.
    (":sessions, _", 2, False, "read as Erlang (atom, #{k => V})"),
    ("%{k: 1}", 1, False, "write :mod.f/a or Mod.f/a for Elixir's"),
    ("#{k => 1}", 1, True, "read as Elixir (:atom, %{k => v})"),
])
def test_match_refused(text: str, arity: int | None, elixir: bool,
                       says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_match(text, arity, elixir=elixir)
    message = str(caught.value)
    assert says in message, message
    assert "\n" not in message


@pytest.mark.parametrize("head, narrow", [
    (None, False),
    ([], False),
    ([A("_"), A("_")], False),
    ([A("$1"), A("$2")], False),
    ([A("$1"), A("$1")], True),
    ([A("sessions"), A("_")], True),
    ([(A("_"), A("_"))], True),
    ([1], True),
])
def test_narrows(head: list[Any] | None, narrow: bool) -> None:
    assert narrows(head) is narrow


@pytest.mark.parametrize("text, match", [
    ("ets:insert/2", None),
    ("ets:insert/2", "sessions, _"),
    ("erlang:list_to_atom/1", None),
    ("gen_server:cast/2", "demo_cache, _"),
    ("gen_server:cast/2", None),
    ("lists:keyfind/3", "k, 1, _"),
    ("io:format/2", "\"~p\", _"),
    ("ets:update_counter/4", "my_table, _, _, _"),
    ("ets:insert_new/2", "my_table, _"),
    ("mymod:_/_", None),
    ("MyApp.Cache.put/2", None),
    ("Map.put/3", None),
])
def test_safe_passes(text: str, match: str | None) -> None:
    spec = parse_function(text)
    head = (None if match is None
            else parse_match(match, spec.arity, elixir=spec.elixir))
    check_safe(spec, head, allow=False)


@pytest.mark.parametrize("text, match, says", [
    ("lists:keyfind/3", None, "every process calls lists"),
    ("lists:keyfind/_", None, "recon_trace refuses it too"),
    ("prim_eval:'receive'/2", None, "takes its messages with prim_eval"),
    ("ets:insert_new/2", None, "ets:insert_new"),
    ("ets:match_spec_run/2", None, "ets:match_spec_run"),
    ("io:format/2", "_, _", "every process calls io"),
    ("io:format/2", "X, Y", "every process calls io"),
    ("ets:_/_", None, "every function of ets"),
    ("erlang:_/2", None, "every function of erlang"),
    ("gen_server:_/_", None, "every function of gen_server"),
    ("erl_eval:exprs/2", None, "the tracer runs as an erl_eval fun"),
    ("ets:update_counter/4", None, "ets:update_counter"),
    ("ets:update_counter/_", None, "ets:update_counter"),
    ("erlang:send/3", None, "erlang:send"),
    ("erlang:process_info/2", None, "erlang:process_info"),
])
def test_safe_refuses(text: str, match: str | None, says: str) -> None:
    spec = parse_function(text)
    head = None if match is None else parse_match(match, spec.arity)
    with pytest.raises(UsageError) as caught:
        check_safe(spec, head, allow=False)
    message = str(caught.value)
    assert says in message and ALLOW_FLAG in message and "\n" not in message
    check_safe(spec, head, allow=True)      # written out: let through


@pytest.mark.parametrize("text, match, says", [
    ("_:_/_", None, "every function of every module"),
    ("_:handle_call/3", None, "handle_call in every loaded module"),
    ("_:f/_", "a", "f in every loaded module"),
])
def test_any_module_refused_even_with_the_flag(text: str, match: str | None,
                                               says: str) -> None:
    spec = parse_function(text)
    head = None if match is None else parse_match(match, spec.arity)
    for allow in (False, True):
        with pytest.raises(UsageError) as caught:
            check_safe(spec, head, allow=allow)
        message = str(caught.value)
        assert says in message and "no flag allows any module" in message


def test_usage_error_exit_code() -> None:
    # The documented exit code of a usage error (README): 2.
    with pytest.raises(UsageError) as caught:
        parse_function("nonsense")
    assert caught.value.exit_code == 2


# The heads as the node's own match-spec engine reads them: each must
# compile for tracing and match (or not) the argument lists the way the
# user meant. One shared node a release; a call each.
@pytest.mark.parametrize("spec, match, args, matches", [
    ("ets:insert/2", "sessions, _", [A("sessions"), (1, 2)], True),
    ("ets:insert/2", "sessions, _", [A("other"), (1, 2)], False),
    ("m:f/2", "X, X", [1, 1], True),
    ("m:f/2", "X, X", [1, 2], False),
    ("m:f/2", "_A, _B", [1, 2], True),
    ("m:f/1", "{a, _, [1 | _]}", [(A("a"), 0, [1, 2])], True),
    ("m:f/1", '"ab"', ["ab"], True),
    ("m:f/1", '"ab"', [b"ab"], False),
    ("m:f/1", '<<"ab">>', [b"ab"], True),
    ("m:f/1", "#{k => V}", [{A("k"): 1, A("j"): 2}], True),
    ("m:f/1", "#{k => V}", [{A("j"): 2}], False),
    ("m:f/1", "1.5", [1.5], True),
    ("M.f/1", '"ab"', [b"ab"], True),
    ("M.f/1", "'ab'", ["ab"], True),
    ("M.f/2", "%{k: v}, v", [{A("k"): 1}, 1], True),
    ("M.f/2", "%{k: v}, v", [{A("k"): 1}, 2], False),
    ("M.f/1", "%S{id: _}", [{A("__struct__"): A("Elixir.S"), A("id"): 7}],
     True),
    ("M.f/1", ":ok", [A("ok")], True),
])
def test_heads_on_the_node(remote: Any, spec: str, match: str, args: list[Any],
                           matches: bool) -> None:
    function = parse_function(spec)
    head = parse_match(match, function.arity, elixir=function.elixir)
    answer = remote.call("erlang", "match_spec_test",
                         [args, [(head, [], [True])], A("trace")])
    assert answer == (A("ok"), matches, [], []), answer
