%% Processes whose every collection is major (spawned with
%% {fullsweep_after, 0}), for trace-gc's verdict (test_trace_gc.py): a
%% RabbitMQ queue collected 13 times a second, every collection major, and
%% its heap after each wandered with its backlog. One process here is
%% steady, its working set a new size at random every turn; the other
%% really grows. Both collect as fast as their garbage fills the heap, so
%% a test counts their collections and never their seconds.
-module(beam_probe_gc_fixture).

-export([steady/3, growing/4]).

%% The garbage a turn makes and drops: 20,000 cons cells (~320 KB on 64
%% bits), enough for a collection every few turns.
-define(GARBAGE, 20000).

%% A process registered as Name holding Low to High list elements, a new
%% size drawn each turn: its heap after a collection wanders, leak or not.
-spec steady(atom(), pos_integer(), pos_integer()) -> pid().
steady(Name, Low, High) when Low =< High ->
    start(Name, fun() -> steady_loop(Low, High, []) end).

%% A process registered as Name holding Start list elements, Step more
%% each turn until it holds Max (a bound on what the test costs).
-spec growing(atom(), pos_integer(), pos_integer(), pos_integer()) -> pid().
growing(Name, Start, Step, Max) ->
    start(Name, fun() -> grow_loop(Step, Max, Start, lists:seq(1, Start)) end).

-spec start(atom(), fun(() -> ok)) -> pid().
start(Name, Loop) ->
    Pid = spawn_opt(Loop, [{fullsweep_after, 0}]),
    register(Name, Pid),
    Pid.

%% Kept is live until the next turn has built its own: what a
%% collection finds left is one working set and part of the next.
steady_loop(Low, High, _Kept) ->
    receive
        stop ->
            ok
    after 0 ->
            New = lists:seq(1, Low + rand:uniform(High - Low + 1) - 1),
            _ = lists:seq(1, ?GARBAGE),
            steady_loop(Low, High, New)
    end.

grow_loop(Step, Max, Count, Kept) ->
    receive
        stop ->
            ok
    after 0 ->
            _ = lists:seq(1, ?GARBAGE),
            case Count < Max of
                true ->
                    grow_loop(Step, Max, Count + Step,
                              lists:seq(1, Step) ++ Kept);
                false ->
                    grow_loop(Step, Max, Count, Kept)
            end
    end.
