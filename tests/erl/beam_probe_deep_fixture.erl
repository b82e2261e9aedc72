%% Test-only: a node whose dump holds a deep recursion and a long list
%% (tests/test_crashdump_deep.py). The hostile round's `inspect DUMP PID`
%% ran past 922 s on a process of 326,474 stack slots, every frame's
%% slots searched for in the heap's text; and a 1.5M-element list's
%% count was left blank.
%%
%% start/2 registers bp_deep, a process Depth calls deep, each frame
%% holding the State every frame holds and a small tuple of its own, and
%% bp_long, a receive loop holding a list of Length integers. The node
%% then dies with beam_probe_dump_fixture:die(eheap) on a capped node.
%%
%% hold/2 registers a process under any name (the hostile round's
%% 'nl\nname') holding {held, List} of Length integers, so that it is
%% among the largest.
-module(beam_probe_deep_fixture).

-export([start/2, deep/3, hold/2]).

-spec start(pos_integer(), pos_integer()) -> ok.
start(Depth, Length) ->
    Self = self(),
    State = {state, lists:seq(1, 100), <<"a shared state">>},
    register(bp_deep, spawn(?MODULE, deep, [Depth, State, Self])),
    receive deep_ready -> ok end,
    %% Registered once its list is whole: the test waits for the name.
    spawn(fun() ->
                  List = lists:seq(1, Length),
                  register(bp_long, self()),
                  Self ! long_ready,
                  long(List)
          end),
    receive long_ready -> ok end,
    ok.

%% Not a tail call: each frame keeps State and Mine (two y slots) for
%% after the call below it returns.
-spec deep(non_neg_integer(), tuple(), pid()) -> tuple().
deep(0, _State, Parent) ->
    Parent ! deep_ready,
    receive never -> {} end;
deep(N, State, Parent) ->
    Mine = {frame, N},
    Below = deep(N - 1, State, Parent),
    {Below, State, Mine}.

long(List) ->
    receive
        {length, From} ->
            From ! erlang:length(List),
            long(List)
    end.

-spec hold(atom(), pos_integer()) -> ok.
hold(Name, Length) ->
    Self = self(),
    spawn(fun() ->
                  Held = {held, lists:seq(1, Length)},
                  register(Name, self()),
                  Self ! held,
                  receive never -> Held end
          end),
    receive held -> ok end.
