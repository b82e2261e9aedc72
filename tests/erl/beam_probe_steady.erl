%% Steady state and slow growth, for the floors of the leak rules: ETS
%% tables rewritten in place beside tables that grow (test_snapshot.py),
%% and a process count moved a step at a time (test_watch.py).
-module(beam_probe_steady).

-export([tables/0, rewrite/1, wobble/2, counter/0, move/2]).

-define(ROWS, 1000).

%% Four public tables, owned by bp_steady_owner:
%%   bp_counters  1000 rows of counters, updated in place (no wobble);
%%   bp_stats     1000 rows of small lists that a rewrite lengthens by a
%%                few items: bytes rise a little (~3 KB) every rewrite,
%%                with no row added: a management table's wobble;
%%   bp_fat       10 rows, one of which a rewrite lengthens by 12,800
%%                items (200 KiB): growth in bytes with no row added;
%%   bp_rows      one more row of a few bytes each rewrite.
tables() ->
    Self = self(),
    Owner = spawn(fun() ->
                          register(bp_steady_owner, self()),
                          [ets:new(Name, [named_table, public, set])
                           || Name <- [bp_counters, bp_stats, bp_fat,
                                       bp_rows]],
                          Self ! {self(), ready},
                          receive stop -> ok end
                  end),
    receive {Owner, ready} -> ok end,
    ets:insert(bp_counters, [{K, 0, 0} || K <- lists:seq(1, ?ROWS)]),
    ets:insert(bp_fat, [{K, []} || K <- lists:seq(1, 10)]),
    rewrite(0).

rewrite(Step) ->
    [ets:update_counter(bp_counters, K, [{2, 1}, {3, K}])
     || K <- lists:seq(1, ?ROWS)],
    %% Every row rewritten; 200 of them one item longer each step.
    ets:insert(bp_stats, [{K, lists:seq(1, 5 + case K rem 5 of
                                                 0 -> Step;
                                                 _ -> 0
                                             end)}
                          || K <- lists:seq(1, ?ROWS)]),
    ets:insert(bp_fat, {1, lists:seq(1, 12800 * Step)}),
    ets:insert(bp_rows, {Step, <<"row">>}),
    [{T, ets:info(T, size), ets:info(T, memory)}
     || T <- [bp_counters, bp_stats, bp_fat, bp_rows]].

%% A table's wobble: Rows rows, each rewritten Rounds times with a list of
%% 1 to 20 items (its length at random), the table's bytes after each
%% round. Rows never change in number.
wobble(Rows, Rounds) ->
    T = ets:new(bp_wobble, [set, public]),
    Write = fun() ->
                    ets:insert(T, [{K, lists:seq(1, rand:uniform(20))}
                                   || K <- lists:seq(1, Rows)])
            end,
    Write(),
    Bytes = [begin
                 Write(),
                 Rows = ets:info(T, size),
                 ets:info(T, memory) * erlang:system_info(wordsize)
             end || _ <- lists:seq(1, Rounds)],
    ets:delete(T),
    Bytes.

%% A process that holds a number of idle processes: move/2 starts N more
%% (N > 0) or ends -N of them (N < 0), and answers how many it holds.
counter() ->
    spawn(fun() -> counter_loop([]) end).

move(Pid, N) ->
    beam_probe_workload:ask(Pid, move, N).

counter_loop(Held) ->
    receive
        {move, From, Ref, N} when is_integer(N), N >= 0 ->
            New = [spawn(fun() -> receive stop -> ok end end)
                   || _ <- lists:seq(1, N)],
            All = New ++ Held,
            From ! {Ref, erlang:length(All)},
            counter_loop(All);
        {move, From, Ref, N} when is_integer(N) ->
            {Gone, Kept} = lists:split(erlang:min(-N, erlang:length(Held)),
                                       Held),
            [begin
                 Mon = erlang:monitor(process, P),
                 exit(P, kill),
                 receive {'DOWN', Mon, process, P, _} -> ok end
             end || P <- Gone],
            From ! {Ref, erlang:length(Kept)},
            counter_loop(Kept)
    end.
