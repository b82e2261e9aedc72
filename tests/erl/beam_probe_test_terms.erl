%% Test support, loaded only into the nodes the test suite starts: a corpus
%% of terms, encoded by the node itself, that covers every tag of the
%% external term format a modern node sends.
-module(beam_probe_test_terms).

-export([corpus/0, same/2, mixed/1]).

%% [{Name, Binary}]: each term under several encodings (the default, the old
%% minor version 0 with FLOAT_EXT and latin-1 atoms, and compressed).
corpus() ->
    Encodings = [{default, []},
                 {minor0, [{minor_version, 0}]},
                 {compressed, [compressed]}],
    [{{Name, Enc}, term_to_binary(Term, Opts)}
     || {Name, Term} <- terms(), {Enc, Opts} <- Encodings].

%% Whether two encodings decode to the same term.
same(Bin1, Bin2) ->
    binary_to_term(Bin1) =:= binary_to_term(Bin2).

%% About Bytes of term_to_binary output shaped like the replies beam-probe
%% gets: process rows of pids, integers, atoms, MFA tuples, strings, floats
%% and small binaries. For the decode benchmark.
mixed(Bytes) ->
    Row = fun(N) ->
                  {self(), N, N * 1000003, -N, float(N) / 7,
                   [{current_function, {gen_server, loop, 7}},
                    {initial_call, {proc_lib, init_p, 5}},
                    {registered_name, list_to_atom("proc_" ++ integer_to_list(N rem 100))}],
                   "label", <<N:32, "payload">>, make_ref(), #{n => N}}
          end,
    One = byte_size(term_to_binary(Row(1))),
    term_to_binary([Row(N) || N <- lists:seq(1, Bytes div One)]).

terms() ->
    [{small_int, 42},
     {integer, -1234567},
     {int_max, 2147483647},
     {small_big, 1 bsl 64},
     {negative_big, -(1 bsl 100)},
     {large_big, 1 bsl 4000},
     {float, 3.141592653589793},
     {negative_float, -0.5e-300},
     {atom, hello_world},
     {utf8_atom, 'Ünïcödé_ατομο'},
     {empty_atom, ''},
     {long_atom, list_to_atom(lists:duplicate(255, $a))},
     %% 400 bytes of UTF-8 (alpha is not latin-1): ATOM_UTF8_EXT.
     {long_utf8_atom, list_to_atom(lists:duplicate(200, 16#3b1))},
     {booleans, {true, false, undefined}},
     {nil, []},
     {string, "a charlist"},
     {unicode_list, [16#3b1, 16#3b2]},
     {long_string, lists:duplicate(70000, $x)},
     {list, [1, two, "three", <<"four">>]},
     {improper_list, [1, 2 | three]},
     {binary, <<"a binary of more than sixty-four bytes, so refc on the node">>},
     {empty_binary, <<>>},
     {bitstring, <<5:3>>},
     {long_bitstring, <<1, 2, 3, 1:1>>},
     {tuple, {a, 1, "b"}},
     {empty_tuple, {}},
     {large_tuple, list_to_tuple(lists:seq(1, 300))},
     {map, #{a => 1, "b" => [2], {c} => #{d => e}}},
     {large_map, maps:from_list([{K, K * K} || K <- lists:seq(1, 100)])},
     {pid, self()},
     {pids, erlang:processes()},
     {port, hd(erlang:ports())},
     {ref, make_ref()},
     {alias, alias()},
     {export_fun, fun lists:map/2},
     {local_fun, fun(X) -> X + 1 end},
     {closure, make_closure(7)},
     {nested, [{pid, self()}, {refs, [make_ref(), make_ref()]}, #{k => [a | b]}]}].

make_closure(N) ->
    fun(X) -> X * N end.
