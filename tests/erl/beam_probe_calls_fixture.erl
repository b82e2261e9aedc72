%% Code whose callers and senders test_calls.py and bench_calls.py name
%% (issue 40): a table filled from two call sites in a known ratio, a
%% mailbox flooded by two senders in a known ratio, an atom maker, and a
%% function called as fast as a process can. Loaded only into nodes the
%% tests start.
%%
%% Every traced call is a non-tail call (its value is matched after it):
%% {caller} names the function a call returns to, and a tail call returns
%% to its caller's caller.
-module(beam_probe_calls_fixture).

-export([fill/1, put_a/2, put_b/2, put_other/2,
         flood/1, atoms/1, infos/0, hot/1, spin/0, paced/1, paced_calls/1]).

%% A process inserting into the named table Table: put_a/2 three times
%% and put_b/2 once a round, and put_other/2 once into another table
%% (which --match leaves out), a round each millisecond or so.
-spec fill(atom()) -> pid().
fill(Table) ->
    Other = erlang:list_to_atom(erlang:atom_to_list(Table) ++ "_other"),
    Owner = erlang:self(),
    spawn_ready(fun() ->
                        ets:new(Table, [named_table, public, set]),
                        ets:new(Other, [named_table, public, set]),
                        Owner ! ready,
                        fill_loop(Table, Other, 0)
                end).

fill_loop(Table, Other, N) ->
    ok = put_a(Table, N),
    ok = put_a(Table, N + 1),
    ok = put_a(Table, N + 2),
    ok = put_b(Table, N + 3),
    ok = put_other(Other, N),
    receive stop -> ok after 1 -> fill_loop(Table, Other, (N + 4) rem 1000) end.

-spec put_a(atom(), integer()) -> ok.
put_a(Table, K) ->
    true = ets:insert(Table, {K, a}),
    ok.

-spec put_b(atom(), integer()) -> ok.
put_b(Table, K) ->
    true = ets:insert(Table, {K, b}),
    ok.

-spec put_other(atom(), integer()) -> ok.
put_other(Table, K) ->
    true = ets:insert(Table, {K, other}),
    ok.

%% A sink registered as Name that takes every message, sent {put, K, V}
%% three times a round by one sender and {get, K} once by another.
-spec flood(atom()) -> {pid(), pid(), pid()}.
flood(Name) ->
    Sink = erlang:spawn(fun sink/0),
    erlang:register(Name, Sink),
    A = erlang:spawn(fun() -> send_loop(Sink, 3, put) end),
    B = erlang:spawn(fun() -> send_loop(Sink, 1, get) end),
    {Sink, A, B}.

sink() ->
    receive _ -> sink() end.

send_loop(Sink, Times, Kind) ->
    [Sink ! message(Kind, N) || N <- lists:seq(1, Times)],
    receive stop -> ok after 1 -> send_loop(Sink, Times, Kind) end.

message(put, N) -> {put, N, <<"value">>};
message(get, N) -> {get, N}.

%% A process making atoms with list_to_atom/1 from a bounded set of
%% Count names (the node's atom table grows once, then not).
-spec atoms(pos_integer()) -> pid().
atoms(Count) ->
    erlang:spawn(fun() -> atom_loop(Count, 0) end).

atom_loop(Count, N) ->
    _ = make_atom(N),
    receive stop -> ok after 1 -> atom_loop(Count, (N + 1) rem Count) end.

make_atom(N) ->
    Atom = erlang:list_to_atom("bp_calls_atom_" ++ erlang:integer_to_list(N)),
    {ok, Atom}.

%% A process asking process_info/2 of itself each millisecond or so, as
%% beam-probe's names lookups ask it of others.
-spec infos() -> pid().
infos() ->
    erlang:spawn(fun info_loop/0).

info_loop() ->
    {memory, _} = erlang:process_info(erlang:self(), memory),
    receive stop -> ok after 1 -> info_loop() end.

%% The function called as fast as a process can (spin/0) or at a paced
%% rate (paced/1): its value is used, so the call is not a tail call.
-spec hot(integer()) -> integer().
hot(N) ->
    N + 1.

%% A process calling hot/1 in a loop without pause, until sent stop.
-spec spin() -> pid().
spin() ->
    erlang:spawn(fun() -> spin_loop(0) end).

spin_loop(N) ->
    M = hot(N),
    receive stop -> ok after 0 -> spin_loop(M rem 1000000) end.

%% A process calling hot/1 PerMs times a millisecond, as closely as the
%% timer lets it, until sent stop.
-spec paced(pos_integer()) -> pid().
paced(PerMs) ->
    erlang:spawn(fun() ->
                         paced_loop(PerMs, erlang:monotonic_time(millisecond))
                 end).

paced_loop(PerMs, Tick) ->
    _ = paced_calls(PerMs),
    Next = Tick + 1,
    Wait = erlang:max(0, Next - erlang:monotonic_time(millisecond)),
    receive stop -> ok after Wait -> paced_loop(PerMs, Next) end.

%% Count calls of hot/1, each non-tail; returns their sum.
-spec paced_calls(non_neg_integer()) -> integer().
paced_calls(0) ->
    0;
paced_calls(N) ->
    hot(N) + paced_calls(N - 1).

spawn_ready(Fun) ->
    Pid = erlang:spawn(Fun),
    receive ready -> Pid after 5000 -> erlang:error(not_ready) end.
