%% Test-only: tables as the hostile round made them, for inspect --table
%% (tests/test_inspect_table.py, tests/bench_inspect.py), and a watch of
%% what a walk costs the node.
%%
%% packed/3: a compressed table whose objects are lists of small
%% integers: ETS stores such a list packed, a byte an element, and a
%% reader gets it back at 2 words an element, 16 times as large.
%% churn/2: a set rewritten while it is read: a writer inserts new keys
%% and deletes old ones without pause, so that a walk that fixed the
%% table would keep every deleted object until it ends.
%% watch_start/1, watch_stop/0: the node's memory and a table's at their
%% peak, the longest a ticker waited past its millisecond, and the
%% longest collection and run without a yield system_monitor reported.
-module(beam_probe_table_fixture).

-export([packed/3, churn/2, churn/3, churn_stop/1, kind/2, one_key/4,
         big_keys/3, watch_start/1, watch_stop/0]).

-spec packed(atom(), pos_integer(), pos_integer()) -> non_neg_integer().
packed(Name, Objects, Length) ->
    Self = self(),
    Owner = spawn(fun() ->
                          T = ets:new(Name, [named_table, public, set,
                                             compressed]),
                          List = [I rem 256 || I <- lists:seq(1, Length)],
                          [ets:insert(T, {K, List})
                           || K <- lists:seq(1, Objects)],
                          Self ! {packed, ets:info(T, memory)},
                          receive never -> ok end
                  end),
    receive {packed, Words} -> erlang:put(Name, Owner), Words end.

%% A table of type Type whose 300 keys have 20 objects each (two alike
%% in a duplicate_bag): a bag's key comes once an object from a walk.
-spec kind(atom(), ets:table_type()) -> non_neg_integer().
kind(Name, Type) ->
    Self = self(),
    spawn(fun() ->
                  T = ets:new(Name, [named_table, public, Type]),
                  ets:insert(T, [{K rem 300, V} || K <- lists:seq(1, 3000),
                                                   V <- [K, K]]),
                  Self ! {kind, ets:info(T, size)},
                  receive never -> ok end
          end),
    receive {kind, Size} -> Size end.

%% A bag or duplicate_bag with Objects objects {k, I, a tuple of Words
%% I's} under the one key k, and 100 objects {K, K} under keys of their
%% own: ets:lookup(T, k) copies every object of k at once. (A bag checks
%% each insert against the key's objects: 30,000 take ~3 s to make.)
-spec one_key(atom(), bag | duplicate_bag, pos_integer(),
              non_neg_integer()) -> non_neg_integer().
one_key(Name, Type, Objects, Words) ->
    Self = self(),
    spawn(fun() ->
                  T = ets:new(Name, [named_table, public, Type]),
                  one_key_insert(T, 1, Objects, Words),
                  ets:insert(T, [{K, K} || K <- lists:seq(1, 100)]),
                  erlang:garbage_collect(),
                  Self ! {one_key, ets:info(T, size)},
                  receive never -> ok end
          end),
    receive {one_key, Size} -> Size end.

one_key_insert(_, From, To, _) when From > To ->
    ok;
one_key_insert(T, From, To, Words) ->
    Last = erlang:min(To, From + 9999),
    ets:insert(T, [{k, I, erlang:make_tuple(Words, I)}
                   || I <- lists:seq(From, Last)]),
    one_key_insert(T, Last + 1, To, Words).

%% A set of Keys objects {Key, K} whose keys are lists of Length small
%% integers (2 words an element: 20,000 of them are 320 KB a key), and
%% 100 objects {K, K} with small keys among them.
-spec big_keys(atom(), pos_integer(), pos_integer()) -> non_neg_integer().
big_keys(Name, Keys, Length) ->
    Self = self(),
    spawn(fun() ->
                  T = ets:new(Name, [named_table, public, set]),
                  [ets:insert(T, {[K | lists:seq(2, Length)], K})
                   || K <- lists:seq(1, Keys)],
                  ets:insert(T, [{K, K} || K <- lists:seq(1, 100)]),
                  erlang:garbage_collect(),
                  Self ! {big_keys, ets:info(T, memory)},
                  receive never -> ok end
          end),
    receive {big_keys, Words} -> Words end.

%% A table of Objects keys, each {Key, Payload of 50 words}; its writer
%% inserts the next key and deletes the oldest, Objects apart, and every
%% 16th insert leaves the oldest in place (the table grows, slowly).
-spec churn(atom(), pos_integer()) -> pid().
churn(Name, Objects) ->
    churn(Name, Objects, 16).

%% As churn/2, every Keep-th insert leaving the oldest in place (0: none:
%% the table's size stays as it was, give or take one).
-spec churn(atom(), pos_integer(), non_neg_integer()) -> pid().
churn(Name, Objects, Keep) ->
    Self = self(),
    Writer = spawn(fun() ->
                           T = ets:new(Name, [named_table, public, set]),
                           ets:insert(T, [{K, payload(K)}
                                          || K <- lists:seq(1, Objects)]),
                           Self ! {churning, self()},
                           churn_loop(T, Objects + 1, 1, Keep)
                   end),
    receive {churning, Writer} -> ok end,
    %% Named for tests/bench_inspect.py, which stops it through erl_call.
    register(bp_churn_writer, Writer),
    Writer.

payload(K) ->
    erlang:make_tuple(50, K).

churn_loop(T, Next, Oldest, Keep) ->
    receive
        {stop, From} -> From ! {stopped, self()}
    after 1 ->
            %% 100 writes a millisecond at most: a writer that never
            %% waits would hold a core of a 2-core machine.
            {Next2, Oldest2} = churn_writes(T, Next, Oldest, Keep, 100),
            churn_loop(T, Next2, Oldest2, Keep)
    end.

churn_writes(_, Next, Oldest, _, 0) ->
    {Next, Oldest};
churn_writes(T, Next, Oldest, Keep, N) ->
    ets:insert(T, {Next, payload(Next)}),
    case Keep > 0 andalso Next rem Keep =:= 0 of
        true ->
            churn_writes(T, Next + 1, Oldest, Keep, N - 1);
        false ->
            ets:delete(T, Oldest),
            churn_writes(T, Next + 1, Oldest + 1, Keep, N - 1)
    end.

-spec churn_stop(pid()) -> ok.
churn_stop(Writer) ->
    Writer ! {stop, self()},
    receive {stopped, Writer} -> ok after 5000 -> ok end.

%% Watches the node every millisecond until watch_stop/0: a ticker
%% whose lateness is how long a scheduler kept it waiting, and
%% system_monitor's long_gc and long_schedule (over 50 ms) for the
%% whole node (the test node's only monitor).
-spec watch_start(atom()) -> ok.
watch_start(Table) ->
    Self = self(),
    Pid = spawn(fun() ->
                        erlang:system_monitor(self(), [{long_gc, 50},
                                                       {long_schedule, 50}]),
                        Self ! watching,
                        Base = erlang:memory(total),
                        Now = erlang:monotonic_time(microsecond),
                        watch_loop(Table, #{base => Base, memory => Base,
                                            table => per_object(Table),
                                            table_base => per_object(Table),
                                            late_us => 0, long_gc_ms => 0,
                                            long_schedule_ms => 0}, Now)
                end),
    receive watching -> ok end,
    register(bp_table_watch, Pid),
    ok.

%% A table's words an object, in thousandths: a fixation keeps deleted
%% objects in memory, and out of the size.
per_object(Table) ->
    case {ets:info(Table, memory), ets:info(Table, size)} of
        {Words, Size} when is_integer(Words), is_integer(Size), Size > 0 ->
            Words * 1000 div Size;
        _ ->
            0
    end.

watch_loop(Table, Seen, Last) ->
    receive
        {stop, From} ->
            erlang:system_monitor(undefined),
            From ! {watched, Seen};
        {monitor, _, long_gc, Info} ->
            {timeout, Ms} = lists:keyfind(timeout, 1, Info),
            watch_loop(Table, Seen#{long_gc_ms := erlang:max(
                                                    Ms, maps:get(long_gc_ms,
                                                                 Seen))},
                       Last);
        {monitor, _, long_schedule, Info} ->
            {timeout, Ms} = lists:keyfind(timeout, 1, Info),
            watch_loop(Table, Seen#{long_schedule_ms :=
                                        erlang:max(Ms, maps:get(
                                                         long_schedule_ms,
                                                         Seen))},
                       Last);
        _ ->
            watch_loop(Table, Seen, Last)
    after 1 ->
            Now = erlang:monotonic_time(microsecond),
            #{memory := Memory, table := Words, late_us := Late} = Seen,
            watch_loop(Table,
                       Seen#{memory := erlang:max(Memory,
                                                  erlang:memory(total)),
                             table := erlang:max(Words, per_object(Table)),
                             late_us := erlang:max(Late, Now - Last - 1000)},
                       Now)
    end.

%% #{memory_rise => Bytes, table_base, table_peak (the table's words an
%% object, in thousandths), late_ms, long_gc_ms, long_schedule_ms}.
-spec watch_stop() -> map().
watch_stop() ->
    bp_table_watch ! {stop, self()},
    receive
        {watched, #{base := Base, memory := Memory, table := Peak,
                    table_base := TableBase, late_us := Late,
                    long_gc_ms := Gc, long_schedule_ms := Schedule}} ->
            #{memory_rise => Memory - Base, table_base => TableBase,
              table_peak => Peak, late_ms => Late div 1000,
              long_gc_ms => Gc, long_schedule_ms => Schedule}
    end.
