%% What beam-probe runs on the node it inspects.
%%
%% This module is never compiled or loaded on the target. beam-probe sends
%% its text; the target's own erl_scan and erl_parse read it, and erl_eval
%% runs one function at a time as a fun. So, by rule:
%%
%%   * only stock OTP modules are called, always as Module:Function;
%%   * a function here never calls another function of this module by
%%     name: the ones it needs (pmap, values, top) arrive as fun arguments,
%%     which beam-probe builds from their clauses in this file;
%%   * per-process work is done by stock compiled functions taking external
%%     funs (lists:zipwith(fun erlang:process_info/2, ...)) or compiled
%%     match specifications (ets:match_spec_run/2), never by a fun written
%%     here, because erl_eval interprets a fun for every element (about
%%     1.4x the cost of recon's compiled loop over a million processes,
%%     measured). A process that died makes process_info return
%%     'undefined', which the match specifications simply do not match.
%%
%% The module compiles, so erlc checks the syntax (the test suite does).
-module(beam_probe_scan).

-export([pmap/3, values/3, top/2,
         bin_leak/6, proc_count/6, proc_window/7, proc_info/1,
         health/3]).

%% Fun over Jobs slices of List, each slice in a fresh process of its own,
%% so one pass runs on up to Jobs schedulers at once. Results in slice
%% order. Jobs 0 means two slices per online scheduler: a worker spends
%% most of its pass waiting for the process it asked, and with two per
%% scheduler one is always ready to run (measured at 100,000 processes on
%% 2 schedulers: 1 worker 248 ms, 2: 217 ms, 4: 151 ms, 8: 171 ms).
%%
%% Why processes: process_info(P, binary) on another process is a signal
%% that P must be scheduled to answer (about 1.5-2.5 us each, measured), so
%% one caller walking every process is bound to one scheduler; several
%% callers keep all of them busy.
%% Why a large initial heap: a slice's pass builds a few lists as long as
%% the slice; grown from the default heap, the garbage collections that
%% copy them cost more than the rest of the pass besides process_info
%% (measured: 340 ms against 60 ms over 100,000 processes). 16 words per
%% pid covers the live lists; the heap is freed when the worker exits.
%% Workers are monitored, not linked: one that fails fails the call with
%% its reason, and none outlives its slice.
pmap(Fun, List, Jobs0) ->
    Jobs = case Jobs0 of
               0 -> 2 * erlang:system_info(schedulers_online);
               _ -> Jobs0
           end,
    Size = erlang:max(1, (erlang:length(List) + Jobs - 1) div Jobs),
    Split = fun Split(1, Rest) ->
                    [Rest];
                Split(K, Rest) ->
                    {Slice, Tail} =
                        lists:split(erlang:min(Size, erlang:length(Rest)),
                                    Rest),
                    [Slice | Split(K - 1, Tail)]
            end,
    %% erl_eval funs keep only the variables they use, so a worker copies
    %% its slice and Fun, not List.
    Run = fun(Slice) -> erlang:exit({beam_probe_done, Fun(Slice)}) end,
    Options = [monitor, {min_heap_size, 16 * Size + 1000}],
    Workers = lists:map(fun(Slice) ->
                                erlang:spawn_opt(erlang, apply,
                                                 [Run, [Slice]], Options)
                        end,
                        Split(Jobs, List)),
    lists:map(fun({Pid, Ref}) ->
                      receive
                          {'DOWN', Ref, process, Pid, {beam_probe_done, Result}} ->
                              Result;
                          {'DOWN', Ref, process, Pid, Reason} ->
                              erlang:error({beam_probe_worker, Reason})
                      end
              end,
              Workers).

%% [{Value, Pid}] for the processes of Pids still alive, in Pids order.
%% Attribute is any integer-valued process_info item, or binary_memory: the
%% summed sizes of the refc binaries the process references. Unless Zeros,
%% binary_memory leaves out the processes that reference none (most of
%% them), so only the few holders are summed.
values(Attribute, Pids, Zeros) ->
    Item = case Attribute of
               binary_memory -> binary;
               _ -> Attribute
           end,
    Guard = case {Attribute, Zeros} of
                {binary_memory, false} -> [{'=/=', '$1', []}];
                _ -> []
            end,
    Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                          lists:duplicate(erlang:length(Pids), Item)),
    Alive = ets:match_spec_run(lists:zip(Infos, Pids),
                               ets:match_spec_compile(
                                 [{{{Item, '$1'}, '$2'}, Guard,
                                   [{{'$1', '$2'}}]}])),
    case Attribute of
        binary_memory ->
            {Lists, AlivePids} = lists:unzip(Alive),
            %% Each binary is {Id, Size, RefCount}.
            Unzipped = lists:map(fun lists:unzip3/1, Lists),
            Sizes = lists:zipwith(fun erlang:element/2,
                                  lists:duplicate(erlang:length(Lists), 2),
                                  Unzipped),
            lists:zip(lists:map(fun lists:sum/1, Sizes), AlivePids);
        _ ->
            Alive
    end.

%% The N largest of [{Value, Pid}], kept in input order. Ties at the N-th
%% value keep the last ones, as recon's reverse(keysort(...)) does; the
%% caller orders by value, then later input first.
top(Pairs, N) ->
    Count = erlang:length(Pairs),
    if
        N < 1 ->
            [];
        Count =< N ->
            Pairs;
        true ->
            {Values, _} = lists:unzip(Pairs),
            Threshold = lists:nth(Count - N + 1, lists:sort(Values)),
            Above = ets:match_spec_run(
                      Pairs,
                      ets:match_spec_compile(
                        [{{'$1', '_'}, [{'>', '$1', {const, Threshold}}],
                          ['$_']}])),
            Equal = ets:match_spec_run(
                      Pairs,
                      ets:match_spec_compile(
                        [{{'$1', '_'}, [{'=:=', '$1', {const, Threshold}}],
                          ['$_']}])),
            Wanted = N - erlang:length(Above),
            Above ++ lists:nthtail(erlang:length(Equal) - Wanted, Equal)
    end.

%% recon's bin_leak: count every process's refc binary references, collect
%% only the processes that hold any (one that holds none cannot free any),
%% count again. At most MaxGc processes are collected, those holding most
%% first; DryRun collects none and says how many would be.
%% Returns {Scanned, Holders, Collected, MemoryBefore, MemoryAfter,
%%          [{Delta, Pid}]}: the N largest falls, most first, processes
%% that died meanwhile left out.
bin_leak(N, MaxGc, DryRun, Jobs, Pmap, Top) ->
    CountHolders =
        fun(Pids) ->
                Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                                      lists:duplicate(erlang:length(Pids),
                                                      binary)),
                ets:match_spec_run(
                  lists:zip(Infos, Pids),
                  ets:match_spec_compile(
                    [{{{binary, '$1'}, '$2'}, [{'=/=', '$1', []}],
                      [{{{length, '$1'}, '$2'}}]}]))
        end,
    %% One count per pid, in order; -1 for a process that died.
    Collect =
        fun(Pids) ->
                lists:foreach(fun erlang:garbage_collect/1, Pids),
                Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                                      lists:duplicate(erlang:length(Pids),
                                                      binary)),
                ets:match_spec_run(
                  Infos,
                  ets:match_spec_compile([{{binary, '$1'}, [],
                                           [{length, '$1'}]},
                                          {'_', [], [-1]}]))
        end,
    %% Not this process: it is ours, and holds the scan's own lists.
    Pids = lists:delete(erlang:self(), erlang:processes()),
    Holders = lists:append(Pmap(CountHolders, Pids, Jobs)),
    HolderCount = erlang:length(Holders),
    Chosen = case MaxGc < HolderCount of
                 true -> Top(Holders, MaxGc);
                 false -> Holders
             end,
    {Before, Victims} = lists:unzip(Chosen),
    MemoryBefore = erlang:memory(),
    case DryRun of
        true ->
            {erlang:length(Pids), HolderCount, erlang:length(Victims),
             MemoryBefore, MemoryBefore, []};
        false ->
            After = lists:append(Pmap(Collect, Victims, Jobs)),
            MemoryAfter = erlang:memory(),
            Deltas = ets:match_spec_run(
                       lists:zip3(After, Before, Victims),
                       ets:match_spec_compile(
                         [{{'$1', '$2', '$3'}, [{'>=', '$1', 0}],
                           [{{{'-', '$1', '$2'}, '$3'}}]}])),
            %% keysort is stable: reversed first, equal falls list the later
            %% process first, as recon's reverse(keysort(...)) does.
            {erlang:length(Pids), HolderCount, erlang:length(Victims),
             MemoryBefore, MemoryAfter,
             lists:sublist(lists:keysort(1, lists:reverse(Deltas)), N)}
    end.

%% recon's proc_count: the N processes with the largest Attribute.
%% Returns {Scanned, [{Value, Pid}]}: each slice's own top N, slices in
%% process order; the caller merges them.
proc_count(Attribute, N, Jobs, Pmap, Values, Top) ->
    %% Not this process: it is ours, and holds the scan's own lists.
    Pids = lists:delete(erlang:self(), erlang:processes()),
    Tops = Pmap(fun(Slice) -> Top(Values(Attribute, Slice, false), N) end,
                Pids,
                Jobs),
    {erlang:length(Pids), lists:append(Tops)}.

%% recon's proc_window: the largest increases of Attribute over Millis
%% milliseconds. Unlike recon, a process born or dead inside the window is
%% not given its absolute value as a delta: those are counted and listed
%% apart. Returns {ScannedFirst, ScannedLast, [{Delta, Pid}],
%%                 BornCount, [{ValueAtEnd, Pid}],
%%                 DeadCount, [{ValueAtStart, Pid}]}, each list a top N.
proc_window(Attribute, N, Millis, Jobs, Pmap, Values, Top) ->
    Snapshot = fun(Slice) -> Values(Attribute, Slice, true) end,
    %% Not this process: it is ours. The workers of a pass are spawned after
    %% its processes() and gone before the next, so neither pass sees them.
    Others = fun() -> lists:delete(erlang:self(), erlang:processes()) end,
    First = lists:append(Pmap(Snapshot, Others(), Jobs)),
    receive
    after Millis ->
        ok
    end,
    Last = lists:append(Pmap(Snapshot, Others(), Jobs)),
    {FirstValues, FirstPids} = lists:unzip(First),
    Start = maps:from_list(lists:zip(FirstPids, FirstValues)),
    {LastValues, LastPids} = lists:unzip(Last),
    Count = erlang:length(LastPids),
    Earlier = lists:zipwith3(fun maps:get/3, LastPids,
                             lists:duplicate(Count, Start),
                             lists:duplicate(Count, born)),
    Joined = lists:zip3(LastValues, Earlier, LastPids),
    Deltas = ets:match_spec_run(
               Joined,
               ets:match_spec_compile([{{'$1', '$2', '$3'},
                                        [{is_integer, '$2'}],
                                        [{{{'-', '$1', '$2'}, '$3'}}]}])),
    Born = ets:match_spec_run(
             Joined,
             ets:match_spec_compile([{{'$1', born, '$3'}, [],
                                      [{{'$1', '$3'}}]}])),
    Dead = ets:match_spec_run(
             maps:to_list(maps:without(LastPids, Start)),
             ets:match_spec_compile([{{'$1', '$2'}, [], [{{'$2', '$1'}}]}])),
    {erlang:length(FirstPids), Count, Top(Deltas, N),
     erlang:length(Born), Top(Born, N), erlang:length(Dead), Top(Dead, N)}.

%% One process, the way recon:info/1 groups it, without the dictionary and
%% the mailbox; plus the count and summed size of its refc binaries.
%% PidText is "<0.1.0>" or a registered name; no atom is ever created.
%% Returns {ok, Pid, Items, BinaryCount, BinaryBytes}, or {error, Why}.
proc_info(PidText) ->
    Pid = case PidText of
              [$< | _] ->
                  try erlang:list_to_pid(PidText)
                  catch error:badarg -> not_a_pid
                  end;
              _ ->
                  try erlang:whereis(erlang:list_to_existing_atom(PidText))
                  catch error:badarg -> undefined
                  end
          end,
    Items = [registered_name, group_leader, status,
             links, monitors, monitored_by, trap_exit,
             initial_call, current_stacktrace,
             memory, message_queue_len, heap_size, total_heap_size,
             garbage_collection,
             reductions],
    case Pid of
        not_a_pid ->
            {error, not_a_pid};
        undefined ->
            {error, no_such_name};
        _ when erlang:node(Pid) =/= erlang:node() ->
            {error, {other_node, erlang:node(Pid)}};
        _ ->
            case erlang:process_info(Pid, Items) of
                undefined ->
                    {error, {not_alive, Pid}};
                Info ->
                    Binaries = case erlang:process_info(Pid, binary) of
                                   {binary, List} -> List;
                                   undefined -> []
                               end,
                    {_, Sizes, _} = lists:unzip3(Binaries),
                    {ok, Pid, Info, erlang:length(Binaries), lists:sum(Sizes)}
            end
    end.

%% What `beam-probe check` measures on one node: erlang:memory(), the
%% process count, atom count and limit, the largest binary_memory of one
%% process and the longest message queue. Returns
%% {Memory, ProcessCount, AtomCount, AtomLimit, TopBinaryMemory, MaxQueue}.
health(Jobs, Pmap, Values) ->
    Largest = fun(Pairs) ->
                      {Numbers, _} = lists:unzip(Pairs),
                      lists:max([0 | Numbers])
              end,
    Slices = Pmap(fun(Slice) ->
                          {Largest(Values(binary_memory, Slice, false)),
                           Largest(Values(message_queue_len, Slice, false))}
                  end,
                  lists:delete(erlang:self(), erlang:processes()), Jobs),
    {Binaries, Queues} = lists:unzip(Slices),
    {erlang:memory(), erlang:system_info(process_count),
     erlang:system_info(atom_count), erlang:system_info(atom_limit),
     lists:max([0 | Binaries]), lists:max([0 | Queues])}.
