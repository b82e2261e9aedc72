%% The mechanics of what beam-probe runs on the node it inspects: the guard
%% that ends our work when we go, the parallel pass over processes, the
%% values, the top N, the descriptions, the K-snapshot join, the fan-out.
%% beam_probe_scan.erl and the other helpers are built on them (recon
%% splits recon_lib from recon the same way).
%%
%%
%% This module is never compiled or loaded on the target. beam-probe sends
%% its text; the target's own erl_scan and erl_parse read it, and erl_eval
%% runs one function at a time as a fun. So, by rule:
%%
%%   * only stock OTP modules are called, always as Module:Function;
%%   * a function here never calls another function of this module by
%%     name: the ones it needs (pmap, values, top, ...) arrive as fun
%%     arguments, which beam-probe builds from their clauses in this file;
%%   * per-process work is done by stock compiled functions taking external
%%     funs (lists:zipwith(fun erlang:process_info/2, ...)) or compiled
%%     match specifications (ets:match_spec_run/2), never by a fun written
%%     here, because erl_eval interprets a fun for every element (about
%%     1.4x the cost of recon's compiled loop over a million processes,
%%     measured). A process that died makes process_info return
%%     'undefined', which the match specifications simply do not match;
%%   * every call runs under guard/3, so nothing started here outlives
%%     beam-probe's connection;
%%   * replies are maps, read by key on the Python side.
%%
%% The module compiles, so erlc checks the syntax and the specs (the test
%% suite does).
-module(beam_probe_lib).

-export([guard/3, others/0, pmap/5, values/3, top/2, describe/1,
         distinct/1, settled/1, partitioned/3, resolve/1, fan_out/5,
         encoded/5, piece/4]).
-export_type([memory/0, rows/0]).

-type watch() :: {node, node()} | {process, pid(), [pid() | port()]}.
-type pairs() :: [{integer(), pid()}].
-type memory() :: [{atom(), non_neg_integer()}].
%% Columns rather than a map per row: building a map per row would take an
%% interpreted fun per row; columns are made by compiled calls.
-type rows() :: #{values := [integer()],
                  pids := [pid()],
                  infos := [[{atom() | {dictionary, atom()}, term()}]
                            | undefined],
                  labels := boolean(),
                  names := keys | copies,
                  unread := #{rows := [{pid(), non_neg_integer()}],
                              per_copy := pos_integer(),
                              budget := pos_integer()},
                  distinct => [non_neg_integer()]}.


%% Run Work() in a process of its own while this one, the call's own
%% process, watches beam-probe: the connection of Watch = {node, Node}
%% (gone on Ctrl-C, kill -9, a network failure), or the process Watch =
%% {process, Pid, Fanning} (the call on the attached node that fanned this
%% one out; Fanning are our processes there, not the node's to report).
%% When it goes, the work is killed, and with it, through their links, the
%% workers pmap/3 started; past TimeoutMs (a little more than the caller
%% waits) too. Nothing is left behind either way.
%%
%% Why this process waits rather than works: when beam-probe is gone, it
%% ends *normally* (exit(self(), normal) cannot be caught), and rex sends
%% no reply for a call that ends normally. A reply, like any message to a
%% pid of a node that is gone, would make the node try to connect back to
%% it (measured: it started its DNS helper, inet_gethost_native, to look
%% our host up).
%%
%% Our own processes (this one, the worker, and those of the connection)
%% and the connection's port are kept in the worker's dictionary for
%% others/0 and the snapshot: they are not the node's to report.
-spec guard(watch(), timeout(), fun(() -> Result)) -> Result.
guard(Watch, TimeoutMs, Work) ->
    Watcher = erlang:self(),
    %% Our connection's processes: its owner, which lives as long as the
    %% connection, and its controllers. Watching means monitoring those, a
    %% local matter: monitor_node/2 on a node whose connection has just
    %% gone would make this node try to connect back to it.
    Connection =
        case Watch of
            {node, Prober} ->
                Owner = case net_kernel:node_info(Prober) of
                            {ok, Info} -> proplists:get_all_values(owner, Info);
                            _ -> []
                        end,
                %% A port over TCP, a process over TLS: a port is ours
                %% too (a snapshot leaves it out) but is not watched.
                Controllers = proplists:get_all_values(
                                Prober, erlang:system_info(dist_ctrl)),
                Owner ++ Controllers;
            {process, _, Fanning} ->
                %% Under a fan-out: the processes of ours that run it, and
                %% our connection's port, where they are this node's (on
                %% the entry node, among the node's own).
                [Ours || Ours <- Fanning,
                         erlang:node(Ours) =:= erlang:node()]
        end,
    Watched = case Watch of
                  {node, _} -> lists:filter(fun erlang:is_pid/1, Connection);
                  {process, Caller, _} -> [Caller]
              end,
    lists:foreach(fun(Pid) -> erlang:monitor(process, Pid) end, Watched),
    %% Whether beam-probe can still be answered: a reply to a node that is
    %% gone would connect back, so when it is gone this process ends
    %% normally instead, and rex sends nothing.
    Here = fun() ->
                   case Watch of
                       {node, _} ->
                           Watched =/= [] andalso
                               lists:all(fun erlang:is_process_alive/1,
                                         Watched);
                       {process, _, _} ->
                           true
                   end
           end,
    case Here() of
        true -> ok;
        false -> erlang:exit(Watcher, normal)
    end,
    Body = fun() ->
                   erlang:put('$beam_probe_ours',
                              [Watcher, erlang:self() | Connection]),
                   erlang:exit({beam_probe_done, Work()})
           end,
    try erlang:spawn_opt(Body, [monitor, {fullsweep_after, 0}]) of
        {Worker, Done} ->
            receive
                {'DOWN', Done, process, Worker, {beam_probe_done, Result}} ->
                    case Here() of
                        true -> Result;
                        false -> erlang:exit(Watcher, normal)
                    end;
                {'DOWN', Done, process, Worker, Reason} ->
                    case Here() of
                        true -> erlang:exit(Reason);
                        false -> erlang:exit(Watcher, normal)
                    end;
                {'DOWN', _, process, _, _} ->
                    erlang:exit(Worker, kill),
                    erlang:exit(Watcher, normal)
            after TimeoutMs ->
                erlang:exit(Worker, kill),
                case Here() of
                    true -> erlang:exit({beam_probe_deadline, TimeoutMs});
                    false -> erlang:exit(Watcher, normal)
                end
            end
    catch
        error:system_limit ->
            %% The node is at its process limit: no process to spare for
            %% the work, so this one does it, unwatched, as a plain rpc
            %% would (seen in a test: a node filled to three free slots
            %% lost them to its own short-lived processes).
            erlang:put('$beam_probe_ours', [Watcher | Connection]),
            Work()
    end.

%% Every process of the node but ours (see guard/3), rex collected, as
%% pmap/5 walks it: 'every' (the pids are read by the pass itself, so that
%% no list of them is held twice, and none at all on OTP 28+).
-spec others() -> every.
others() ->
    %% rex carries every call of ours: its heap holds our traffic (a
    %% helper's forms, ~12 KB a call) until it collects, and that would
    %% rank as the node's own (measured: rex 23% larger in proc-count
    %% memory than recon read it a moment before; 1.6 MB, first, on a bare
    %% OTP 27 node). So it is collected before anything is measured.
    case erlang:whereis(rex) of
        undefined -> ok;
        Rex -> erlang:garbage_collect(Rex)
    end,
    every.

%% A pass: Fun over slices of Source in Jobs processes of their own, so
%% that one pass runs on several schedulers at once. Source is a list of
%% pids, or 'every' for every process of the node but ours (see guard/3).
%% Each slice's result is folded, in slice order, into Acc0 by Fold(Result,
%% Acc), or with Fold = list kept as a list in slice order. Returns {Acc,
%% Count}: Count is the number of processes the slices held.
%%
%% What the node holds during a pass is bounded, whatever its size (issue
%% 39: a pass over 300,000 processes had raised the node by 96-288 MB):
%%   * the pids: on OTP 28+ none beyond a slice, walked with
%%     erlang:processes_iterator/0 and processes_next/1; before, the list
%%     of erlang:processes(), 16 bytes a process (the floor: nothing else
%%     enumerates processes), walked without a copy (our own processes are
%%     taken out of each slice, not out of the list: lists:subtract/2 on
%%     the whole list had held two for a moment);
%%   * the work in flight: at most InFlight pids across the workers, a
%%     slice each (128-2,048 pids). A slice's lists (process_info's
%%     answers, the zips, the matches) cost a worker ~1.5 KB a pid at the
%%     peak of its heap (measured: 12 MB a worker for slices of 8,192);
%%   * the results: Fold keeps what the caller keeps (a top N, a count,
%%     compressed chunks), in slice order as they are folded (at most Jobs
%%     results wait for an earlier slice).
%% A worker is given its next slice as soon as it answers, so no worker
%% waits for the slowest of a round.
%%
%% Jobs 0 means two workers per online scheduler: a worker spends most of
%% its pass waiting for the process it asked, and with two per scheduler
%% one is always ready to run (measured at 100,000 processes on 2
%% schedulers: 1 worker 248 ms, 2: 217 ms, 4: 151 ms, 8: 171 ms). Jobs is
%% clamped to four per online scheduler and to the processes there are:
%% more only costs memory (a --jobs of 100,000 once took a small node to
%% 357 MB).
%%
%% Why the workers live for the whole pass and are sent their slices: a
%% fun made by erl_eval is copied whole into each process spawned with it,
%% and copying flattens what it shares (the snapshot's fun was ~13,000
%% words shared and 1.15 million flat, measured), so a fresh process a
%% slice made a snapshot of 1M processes 2.6x slower.
%% Why processes: process_info(P, binary) on another process is a signal
%% that P must be scheduled to answer (about 1.5-2.5 us each, measured), so
%% one caller walking every process is bound to one scheduler; several
%% callers keep all of them busy.
%% Why an initial heap the size of a slice's lists: grown from the default
%% heap, the garbage collections that copy them cost more than the rest of
%% the pass besides process_info (measured: 340 ms against 60 ms over
%% 100,000 processes). 16 words a pid covers the live lists.
%% Why links: killing this process (guard/3) kills the workers with it.
%% This process traps exits meanwhile, so a worker's end is a message: a
%% failure fails the call. A worker that cannot be spawned (the node is at
%% its process limit) has its slices done here.
-spec pmap(fun((list()) -> R), list | fun((R, Acc) -> Acc), Acc,
           [pid()] | every, non_neg_integer()) ->
          {Acc | [R], non_neg_integer()}.
pmap(Fun, Fold, Acc0, Source, Jobs0) ->
    Schedulers = erlang:system_info(schedulers_online),
    Wanted = case Jobs0 of
                 0 -> 2 * Schedulers;
                 _ -> Jobs0
             end,
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               OursList -> OursList
           end,
    Iterates = Source =:= every andalso
        erlang:function_exported(erlang, processes_iterator, 0),
    Length = case Source of
                 every -> erlang:system_info(process_count);
                 _ -> erlang:length(Source)
             end,
    %% The walk's state: {list, Rest, Left} or {iterator, Iter, Buffer}.
    %% It is only ever an argument, never a variable of this function:
    %% erl_eval keeps a function's variables until it returns, and a
    %% variable bound to the pid list would hold all of it for the whole
    %% pass, where the list's walked part is garbage at once (measured at
    %% 1,000,000 processes: the list whole through the pass, 24 MB).
    %% The pids are read after the workers are spawned (they are ours,
    %% taken out of each slice as the iterator would meet them anyway).
    Walker = fun(every) when Iterates ->
                     {iterator, erlang:processes_iterator(), []};
                (every) ->
                     Recount = fun(All) -> {list, All, erlang:length(All)} end,
                     Recount(erlang:processes());
                (List) ->
                     {list, List, Length}
             end,
    Jobs = erlang:max(1, erlang:min(erlang:min(Wanted, 4 * Schedulers),
                                    Length)),
    SliceLength = erlang:max(128, erlang:min(2048, 4096 div Jobs)),
    %% The next slice, and the walk after it; none at the end. On OTP 28
    %% the iterator hands out the process table a block at a time
    %% ({Index, Pids}: ~4,000 pids on 28.0, measured), so a block is taken
    %% whole rather than one interpreted call a pid; any other shape is
    %% walked a pid at a time.
    Refill = fun Refill(Iter, Buffer, Count) when Count >= SliceLength ->
                     {Iter, Buffer};
                 Refill(Iter, Buffer, Count) ->
                     case erlang:processes_next(Iter) of
                         none ->
                             {none, Buffer};
                         {Pid, {Index, Block}} when erlang:is_integer(Index),
                                                    erlang:is_list(Block) ->
                             Refill({Index, []}, [[Pid | Block] | Buffer],
                                    Count + 1 + erlang:length(Block));
                         {Pid, Next} ->
                             Refill(Next, [[Pid] | Buffer], Count + 1)
                     end
             end,
    NextSlice = fun({list, [], _}) ->
                        none;
                   ({list, Rest, Left}) ->
                        Taken = erlang:min(SliceLength, Left),
                        {Slice, Tail} = lists:split(Taken, Rest),
                        {Slice, {list, Tail, Left - Taken}};
                   ({iterator, Iter, Held}) ->
                        {Iter1, Blocks} =
                            case Iter of
                                none -> {none, [Held]};
                                _ -> Refill(Iter, [Held], erlang:length(Held))
                            end,
                        case lists:append(lists:reverse(Blocks)) of
                            [] ->
                                none;
                            Pids ->
                                Taken = erlang:min(SliceLength,
                                                   erlang:length(Pids)),
                                {Slice, Tail} = lists:split(Taken, Pids),
                                {Slice, {iterator, Iter1, Tail}}
                        end
                end,
    Caller = erlang:self(),
    %% erl_eval funs keep only the variables they use: a worker holds Fun
    %% and Caller.
    Work = fun Work() ->
                   receive
                       {beam_probe_slice, Index, Slice} ->
                           Caller ! {beam_probe_done, erlang:self(), Index,
                                     Fun(Slice)},
                           %% What the slice left is garbage; a minor
                           %% collection would have promoted the slice's
                           %% lists to the old heap, which grows until a
                           %% full sweep (measured: 6.7 MB a snapshot
                           %% worker after slices of 1,024). Live now is
                           %% Fun alone, so this costs little.
                           erlang:garbage_collect(),
                           Work();
                       beam_probe_stop ->
                           ok
                   end
           end,
    Options = [link, {min_heap_size, 16 * SliceLength + 1000}],
    Trapping = erlang:process_flag(trap_exit, true),
    Workers = lists:map(fun(_) ->
                                try
                                    erlang:spawn_opt(Work, Options)
                                catch
                                    error:system_limit -> here
                                end
                        end,
                        lists:seq(1, Jobs)),
    %% Ours, and the workers: the iterator walks the table as it is, and
    %% would meet them.
    Mine = Ours ++ lists:filter(fun erlang:is_pid/1, Workers),
    Folding = case Fold of
                  list -> fun(Result, Acc) -> [Result | Acc] end;
                  _ -> Fold
              end,
    %% Results folded in slice order: Pending holds those that came
    %% before an earlier one, at most one a worker.
    Settle = fun Settle(Next, Pending, Acc) ->
                     case lists:keytake(Next, 1, Pending) of
                         {value, {_, Result}, Rest} ->
                             Folded = Folding(Result, Acc),
                             %% What the folds replaced is garbage, but a
                             %% minor collection promotes what is live at
                             %% its moment (the pid list, a map being
                             %% built) to the old heap, where what it
                             %% replaces stays until the old heap fills:
                             %% proc-window's map of 9 MB took 42-56 MB
                             %% (300,000 processes). A full collection
                             %% every 32 slices costs a copy of what is
                             %% live (~10 copies a pass at 300,000).
                             Next rem 32 =:= 31 andalso
                                 erlang:garbage_collect(),
                             Settle(Next + 1, Rest, Folded);
                         false ->
                             {Next, Pending, Acc}
                     end
             end,
    %% Give Worker the next slice (or do it here): Index counts slices,
    %% Count processes.
    Give = fun(Worker, Walk, Index, Count) ->
                   case NextSlice(Walk) of
                       none ->
                           {idle, Walk, Index, Count};
                       {Slice0, Walk1} ->
                           Slice = case Source of
                                       every -> lists:subtract(Slice0, Mine);
                                       _ -> Slice0
                                   end,
                           case Worker of
                               here ->
                                   Caller ! {beam_probe_done, here, Index,
                                             Fun(Slice)};
                               _ ->
                                   Worker ! {beam_probe_slice, Index, Slice}
                           end,
                           {busy, Walk1, Index + 1,
                            Count + erlang:length(Slice)}
                   end
           end,
    %% Each worker is given its first slice, then each one that answers
    %% its next.
    Loop = fun Loop(Walk, Index, Count, Busy, Folded, [Worker | Idle]) ->
                   case Give(Worker, Walk, Index, Count) of
                       {busy, Walk1, Index1, Count1} ->
                           Loop(Walk1, Index1, Count1, Busy + 1, Folded,
                                Idle);
                       {idle, Walk1, Index1, Count1} ->
                           Loop(Walk1, Index1, Count1, Busy, Folded, Idle)
                   end;
               Loop(_, _, Count, 0, {_, [], Acc}, []) ->
                   {Acc, Count};
               Loop(Walk, Index, Count, Busy, {Next, Pending, Acc}, []) ->
                   receive
                       {beam_probe_done, Worker, Done, Result} ->
                           Folded = Settle(Next, [{Done, Result} | Pending],
                                           Acc),
                           case Give(Worker, Walk, Index, Count) of
                               {busy, Walk1, Index1, Count1} ->
                                   Loop(Walk1, Index1, Count1, Busy, Folded,
                                        []);
                               {idle, Walk1, Index1, Count1} ->
                                   Loop(Walk1, Index1, Count1, Busy - 1,
                                        Folded, [])
                           end;
                       {'EXIT', Worker, Reason} when Reason =/= normal ->
                           case lists:member(Worker, Workers) of
                               true ->
                                   erlang:error({beam_probe_worker, Reason});
                               false ->
                                   Loop(Walk, Index, Count, Busy,
                                        {Next, Pending, Acc}, [])
                           end
                   end
           end,
    {Acc1, Scanned} = Loop(Walker(Source), 0, 0, 0, {0, [], Acc0}, Workers),
    %% Each worker ends, and its heap with it, before the caller goes on.
    lists:foreach(fun(here) ->
                          ok;
                     (Worker) ->
                          Worker ! beam_probe_stop,
                          receive
                              {'EXIT', Worker, _} -> ok
                          end
                  end,
                  Workers),
    erlang:process_flag(trap_exit, Trapping),
    %% The pid list and the pass's garbage go now, not at this process's
    %% next collection: what the caller does next (a snapshot's ancestors,
    %% describe/1) would otherwise run on a heap grown for the pass
    %% (measured: 40 MB after a snapshot's pass over 1,000,000 processes).
    erlang:garbage_collect(),
    case Fold of
        list -> {lists:reverse(Acc1), Scanned};
        _ -> {Acc1, Scanned}
    end.

%% [{Value, Pid}] for the processes of Pids still alive, in Pids order.
%% Attribute is any integer-valued process_info item, or binary_memory: the
%% summed sizes of the refc binaries the process references, or
%% binary_distinct: the same, each binary once. binary_memory is recon's
%% figure: process_info(P, binary) lists a binary once per reference (a
%% process that received one binary in 50 messages lists it 50 times), so
%% a queue holding 100 references to 2 binaries of 210 KB read 19.4 MB.
%% binary_distinct keeps one {Id, Size, RefCount} per Id (the Id is the
%% binary's address) with lists:ukeysort/2, a compiled call per process.
%% Unless Zeros, both leave out the processes that reference none (most
%% of them), so only the few holders are summed.
-spec values(atom(), [pid()], boolean()) -> pairs().
values(Attribute, Pids, Zeros) ->
    Binary = Attribute =:= binary_memory orelse Attribute =:= binary_distinct,
    Item = case Binary of
               true -> binary;
               false -> Attribute
           end,
    Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                          lists:duplicate(erlang:length(Pids), Item)),
    case Binary of
        true ->
            %% A process's list is as long as its references: a backlog of
            %% a million binary messages, once collected into its heap,
            %% lists a million (48 MB copied to us by process_info). So no
            %% list is copied again (issue 39 item 4): a match
            %% specification copies what it returns, and unzip3/1 makes
            %% three lists; together 323 MB for that one process (OTP 25,
            %% measured). Each list is taken from its {binary, List} by
            %% element/2 (a process gone, undefined, is an atom, which
            %% erlang:max/2 against {binary, []} turns into that), its sizes by
            %% a match specification that returns the sizes alone, and
            %% only {Sum, Pid} is returned by the one that keeps the
            %% processes alive (and, unless Zeros, referencing any).
            Count = erlang:length(Pids),
            Lists = lists:zipwith(fun erlang:element/2,
                                  lists:duplicate(Count, 2),
                                  lists:zipwith(fun erlang:max/2,
                                                lists:duplicate(
                                                  Count, {binary, []}),
                                                Infos)),
            Kept = case Attribute of
                       binary_distinct ->
                           lists:zipwith(fun lists:ukeysort/2,
                                         lists:duplicate(Count, 1), Lists);
                       binary_memory ->
                           Lists
                   end,
            %% Each binary is {Id, Size, RefCount}.
            Sizes = ets:match_spec_compile([{{'_', '$1', '_'}, [], ['$1']}]),
            Sums = lists:map(fun lists:sum/1,
                             lists:zipwith(fun ets:match_spec_run/2, Kept,
                                           lists:duplicate(Count, Sizes))),
            Holding = case Zeros of
                          false -> [{'=/=', '$3', []}];
                          true -> []
                      end,
            ets:match_spec_run(lists:zip3(Infos, Sums, Pids),
                               ets:match_spec_compile(
                                 [{{{binary, '$3'}, '$1', '$2'}, Holding,
                                   [{{'$1', '$2'}}]}]));
        false ->
            ets:match_spec_run(lists:zip(Infos, Pids),
                               ets:match_spec_compile(
                                 [{{{Item, '$1'}, '$2'}, [],
                                   [{{'$1', '$2'}}]}]))
    end.

%% The N largest of [{Value, Pid}], kept in input order. Ties at the N-th
%% value keep the last ones, as recon's reverse(keysort(...)) does; the
%% caller orders by value, then later input first.
-spec top(pairs(), non_neg_integer()) -> pairs().
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

%% The rows to show for [{Value, Pid}], in the same order: registered
%% name, current function and initial call of each; 'undefined' for a
%% process that has exited since. Also, for every release, the keys of
%% its dictionary that say what a process is: its label
%% ('$process_label', proc_lib:set_label/1 on OTP 27+), proc_lib's
%% '$initial_call' (proc_lib:init_p/5 says nothing), and process_name,
%% which RabbitMQ and others put there ({rabbit_amqqueue_process,
%% <<"lq.104">>}), each as a {{dictionary, Key}, Value} item.
%%
%% Where the node reads one dictionary key at a time (OTP 26.2+; badarg
%% before), those three keys are read alone (labels: true). Before, only
%% the whole dictionary can be had, and process_info(P, dictionary)
%% copies it whole and flat (shared subterms copied once per reference:
%% a 2.7 KB process gave a 6 MB copy, measured). Nothing tells its size
%% before the copy, but without sharing it lives on the process's heap,
%% so total_heap_size (read first, no copy) bounds it. So a dictionary is
%% copied only from a process whose heap is at most ?per copy (64 MiB:
%% a RabbitMQ queue's heap is 16-24 MB, its dictionary ~1 KB; a tester's
%% process held 317 MB), and only while the copies of this command have
%% cost less than the budget (256 MiB), each charged at most what its
%% copy can have been: the heap, or 16 times its erlang:external_size/1
%% where that is less. A term takes at most 16 bytes of memory for each
%% byte of its external format (a list of [], 16 bytes a cell against
%% NIL_EXT's 1; a list of small integers 8x): external_size alone read
%% 15 MB for a dictionary of 47 MB of small integers, and would have let
%% the budget be spent three times over. A queue's ~1 KB dictionary is
%% charged ~16 KB, so a broker's queues are all named. Not
%% erts_debug:flat_size/1, exact but in a module the node would load on
%% first use: loading it mid-command changed code_server's binaries
%% between proc-count's two reads of them (its distinct figure passed
%% its recon one on a fresh node). Nor the growth of our own heap
%% around the copy: ~70 MB for those 47 (the heap's next size). The copy takes
%% time too: 4-9 us for a queue's ~1 KB dictionary (the 24 MB fixture
%% and a real RabbitMQ 3.10.8 queue), 15-46 ms for that 47 MB one (2
%% cores). The three keys are taken out at once
%% (lists:keyfind/3) and the copy is garbage; after a large one this
%% process collects, so the node never holds two. Unlike inspect's
%% COPY_MOST (1M words, 8 MB), which keeps the whole dictionary on our
%% side to show it, a name keeps three small values, so the per-copy cap
%% admits a broker queue's heap. A dictionary that shares subterms can
%% still copy larger than its heap: a known limit, as for inspect.
%%
%% Every value kept (either way) is at most 1,024 bytes as
%% erlang:external_size/1 counts it (a name is a few dozen), else it is
%% left out: a label is shown on one line, and a process may put any
%% term there.
%%
%% The spent budget and the names copied are kept in this process's
%% dictionary: one command's calls (proc-count --all's chunks, serve's
%% three rankings, top's keeper from pass to pass) share them, so a
%% process is copied once; top's pass resets the budget each pass, and
%% keeps the names of live processes only. At most 10,000 are kept (past
%% it, only this call's): 3 KB each at most, ~200 bytes for a RabbitMQ
%% queue's.
%% top's filter matches them too. Never the mailbox.
%%
%% names: keys (read one at a time), copies (from the dictionary), and
%% unread: the pids left unnamed for their heap, with it in bytes, and
%% the figures the rule used.
-spec describe(pairs()) -> rows().
describe(Pairs) ->
    {Values, Pids} = lists:unzip(Pairs),
    Keys = ['$process_label', '$initial_call', process_name],
    Labels = try erlang:process_info(erlang:self(),
                                     {dictionary, '$initial_call'}) of
                 _ -> true
             catch
                 error:badarg -> false
             end,
    PerCopy = 64 * 1024 * 1024,
    Budget = 256 * 1024 * 1024,
    ValueMost = 1024,
    KeptMost = 10000,
    %% The heap in the same call (each process_info of another process
    %% is a signal it answers: 1.5-2.5 us): it bounds what a read copies.
    Items = [registered_name, current_function, initial_call,
             total_heap_size],
    Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                          lists:duplicate(erlang:length(Pids), Items)),
    Wordsize = erlang:system_info(wordsize),
    %% Everything per row below is a compiled call over the rows (zipwith,
    %% match specifications): an interpreted fun a row made
    %% proc-count --all of 100,000 processes take 20 s, against 2.3 s.
    Dup = fun(Term) -> lists:duplicate(erlang:length(Pids), Term) end,
    Run = fun(List, Spec) ->
                  ets:match_spec_run(List, ets:match_spec_compile(Spec))
          end,
    %% Values kept only when small; undefined stands for a key unset.
    %% (The specifications used a piece at a time are compiled once.)
    Small = ets:match_spec_compile(
              [{{'$1', '$2'}, [{'=<', '$2', ValueMost}], ['$1']},
               {'_', [], [undefined]}]),
    Bounded = fun(Vs) ->
                      ets:match_spec_run(
                        lists:zip(Vs, lists:map(fun erlang:external_size/1,
                                                Vs)),
                        Small)
              end,
    %% Each row's first three items and its three values (a tuple, or
    %% none), as one list of items.
    Join = fun(Firsts, Named) ->
                   Run(lists:zip(Firsts, Named),
                       [{{['$1', '$2', '$3'], {'$4', '$5', '$6'}}, [],
                         [['$1', '$2', '$3'
                           | [{{{const, {dictionary, Key}}, Var}}
                              || {Key, Var} <- lists:zip(
                                                 Keys, ['$4', '$5', '$6'])]
                          ]]},
                        {{'$1', '_'}, [], ['$1']}])
           end,
    %% A single key's value is copied whole too, however large (a
    %% process may put 300 MB under process_name): on 26.2+ the keys are
    %% read under the same budget, each row's only when its heap, which
    %% bounds the three values, fits what is left of it; no cap a copy
    %% below the budget's (the values are the copy, not the dictionary),
    %% and nothing kept from call to call (the keys are read afresh).
    Cap = case Labels of
              true -> Budget;
              false -> PerCopy
          end,
    {Described, Unread} =
        begin
                Known = case Labels =:= false andalso
                            erlang:get('$beam_probe_names') of
                            Map when erlang:is_map(Map) -> Map;
                            _ -> #{}
                        end,
                Spent0 = case erlang:get('$beam_probe_names_spent') of
                             Number when erlang:is_integer(Number) -> Number;
                             _ -> 0
                         end,
                Heaps = Run(Infos, [{['_', '_', '_', {'_', '$1'}], [],
                                     [{'*', '$1', Wordsize}]},
                                    {'_', [], [-1]}]),
                %% {Pid, Heap} of the rows alive and not known yet.
                ToRead = Run(lists:zip3(Pids, Heaps,
                                        lists:zipwith3(fun maps:get/3, Pids,
                                                       Dup(Known),
                                                       Dup(none))),
                             [{{'$1', '$2', none}, [{'>=', '$2', 0}],
                               [{{'$1', '$2'}}]}]),
                %% What a read asks, and the {Key, Value} list it gives.
                {Read, Dictionary} =
                    case Labels of
                        true ->
                            {[{dictionary, Key} || Key <- Keys],
                             ets:match_spec_compile(
                               [{[{{'_', '$1'}, '$2'}, {{'_', '$3'}, '$4'},
                                  {{'_', '$5'}, '$6'}], [],
                                 [[{{'$1', '$2'}}, {{'$3', '$4'}},
                                   {{'$5', '$6'}}]]},
                                {'_', [], [[]]}])};
                        false ->
                            {dictionary,
                             ets:match_spec_compile(
                               [{{dictionary, '$1'}, [], ['$1']},
                                {'_', [], [[]]}])}
                    end,
                %% A copy of at most 3 KB in the external format (what the
                %% three values kept may be: a RabbitMQ queue's whole
                %% dictionary is ~780 bytes) costs about what the row's
                %% other reads do, and is charged nothing: charged ~16 KB,
                %% proc-count --all of a broker of 17,000 queues spent the
                %% budget on them. The budget bounds the large copies.
                Charge = ets:match_spec_compile(
                           [{{'_', '$2'}, [{'=<', '$2', 3 * ValueMost}], [0]},
                            {{'$1', '$2'}, [{'<', '$1', {'*', 16, '$2'}}],
                             ['$1']},
                            {{'_', '$2'}, [], [{'*', 16, '$2'}]}]),
                Found = ets:match_spec_compile([{{'_', '$1'}, [], ['$1']},
                                                {'_', [], [undefined]}]),
                Past = ets:match_spec_compile([{{'_', '$1'},
                                                [{'>', '$1', Cap}],
                                                ['$_']}]),
                Within = ets:match_spec_compile([{{'_', '$1'},
                                                  [{'=<', '$1', Cap}],
                                                  ['$_']}]),
                %% The copies of [{Pid, Heap}], made at once: each row's
                %% values and what they cost, at most the heap or 16 times
                %% the external size.
                Copy = fun(Rows) ->
                               {CopyPids, CopyHeaps} = lists:unzip(Rows),
                               Dictionaries =
                                   ets:match_spec_run(
                                     lists:zipwith(
                                       fun erlang:process_info/2, CopyPids,
                                       lists:duplicate(
                                         erlang:length(CopyPids),
                                         Read)),
                                     Dictionary),
                               Costs = ets:match_spec_run(
                                         lists:zip(
                                           CopyHeaps,
                                           lists:map(
                                             fun erlang:external_size/1,
                                             Dictionaries)),
                                         Charge),
                               Count = erlang:length(Dictionaries),
                               [Label, First, Name] =
                                   [Bounded(ets:match_spec_run(
                                              lists:zipwith3(
                                                fun lists:keyfind/3,
                                                lists:duplicate(Count, Key),
                                                lists:duplicate(Count, 1),
                                                Dictionaries),
                                              Found))
                                    || Key <- Keys],
                               {lists:zip(CopyPids,
                                          lists:zip3(Label, First, Name)),
                                lists:sum(Costs)}
                       end,
                %% A piece of 1,024 rows at a time: copied together when
                %% their heaps, which bound their copies, sum to 16 MiB
                %% at most and fit the budget; else one at a time, each
                %% while it fits. Left: rows past the cap or the budget.
                Pieces = fun Pieces([], Spent, Got, Left) ->
                                 {Spent, Got, Left};
                             Pieces(Rest, Spent, Got, Left) ->
                                 {Piece, Tail} =
                                     lists:split(erlang:min(
                                                   1024, erlang:length(Rest)),
                                                 Rest),
                                 Over = ets:match_spec_run(Piece, Past),
                                 Under = ets:match_spec_run(Piece, Within),
                                 {_, UnderHeaps} = lists:unzip(Under),
                                 Sum = lists:sum(UnderHeaps),
                                 {Spent1, Got1, Left1} =
                                     case Sum =< 16777216
                                         andalso Spent + Sum =< Budget of
                                         true ->
                                             {Pairs1, Cost1} = Copy(Under),
                                             {Spent + Cost1, [Pairs1 | Got],
                                              Over ++ Left};
                                         false ->
                                             lists:foldl(
                                               fun({_, Heap} = Row,
                                                   {SpentRow, GotRow,
                                                    LeftRow})
                                                     when SpentRow + Heap
                                                          =< Budget ->
                                                       {PairsRow, CostRow} =
                                                           Copy([Row]),
                                                       %% Freed now, a copy
                                                       %% of up to 64 MiB;
                                                       %% not a small one: a
                                                       %% collection a row
                                                       %% copies all we hold
                                                       %% (--all's chunk)
                                                       %% each time.
                                                       CostRow > 1048576
                                                           andalso erlang:garbage_collect(),
                                                       {SpentRow + CostRow,
                                                        [PairsRow | GotRow],
                                                        LeftRow};
                                                  (Row, {SpentRow, GotRow,
                                                         LeftRow}) ->
                                                       {SpentRow, GotRow,
                                                        [Row | LeftRow]}
                                               end,
                                               {Spent, Got, Over ++ Left},
                                               Under)
                                     end,
                                 Pieces(Tail, Spent1, Got1, Left1)
                         end,
                {Spent2, Got2, Left2} = Pieces(ToRead, Spent0, [], []),
                erlang:put('$beam_probe_names_spent', Spent2),
                Fresh = maps:from_list(lists:append(Got2)),
                Named = lists:zipwith3(fun maps:get/3, Pids,
                                       Dup(maps:merge(Known, Fresh)),
                                       Dup(none)),
                Kept = maps:merge(Known, Fresh),
                Labels orelse
                    erlang:put('$beam_probe_names',
                               case maps:size(Kept) > KeptMost of
                                   true -> Fresh;
                                   false -> Kept
                               end),
                Firsts = Run(Infos, [{['$1', '$2', '$3', '_'], [],
                                      [['$1', '$2', '$3']]},
                                     {'_', [], [undefined]}]),
                {Join(Firsts, Named), lists:reverse(Left2)}
        end,
    #{values => Values,
      pids => Pids,
      infos => Described,
      labels => Labels,
      names => case Labels of
                   true -> keys;
                   false -> copies
               end,
      unread => #{rows => Unread,
                  per_copy => Cap,
                  budget => Budget}}.

%% For each of Pids, the summed sizes of the refc binaries it references,
%% each binary once (binary_distinct in values/3): shown beside recon's
%% binary_memory for the rows a ranking shows; 0 for a process gone.
-spec distinct([pid()]) -> [non_neg_integer()].
distinct(Pids) ->
    Count = erlang:length(Pids),
    Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                          lists:duplicate(Count, binary)),
    %% No list copied but by ukeysort/2 (see values/3: a row may list a
    %% million references).
    Lists = lists:zipwith(fun erlang:element/2, lists:duplicate(Count, 2),
                          lists:zipwith(fun erlang:max/2,
                                        lists:duplicate(Count, {binary, []}),
                                        Infos)),
    Unique = lists:zipwith(fun lists:ukeysort/2,
                           lists:duplicate(Count, 1), Lists),
    Sizes = ets:match_spec_compile([{{'_', '$1', '_'}, [], ['$1']}]),
    lists:map(fun lists:sum/1,
              lists:zipwith(fun ets:match_spec_run/2, Unique,
                            lists:duplicate(Count, Sizes))).

%% What the node holds, not what we do: erlang:memory() without this
%% process's own heap (erl_eval's garbage grows it between two reads, by 5
%% MB at 100k processes). With Wait, read once the memory of exited
%% workers is freed: a heap freed on a scheduler other than the one that
%% allocated it is handed back to that one, which frees it only when it
%% next runs (ERTS's delayed deallocation): 1.5-2 ms after the workers'
%% 'DOWN' on OTP 28, and 7-41 MB of exited workers were still counted when
%% read at once (measured at 100k-500k processes). So wait until the
%% processes' memory has not fallen for 3 ms running, 50 ms at most.
-spec settled(boolean()) -> memory().
settled(Wait) ->
    Settle = fun Settle(Last, Steady, Left) when Steady < 3, Left > 0 ->
                     receive
                     after 1 ->
                         Now = erlang:memory(processes),
                         case Now < Last of
                             true -> Settle(Now, 0, Left - 1);
                             false -> Settle(Last, Steady + 1, Left - 1)
                         end
                     end;
                 Settle(_, _, _) ->
                     ok
             end,
    case Wait of
        true -> Settle(erlang:memory(processes), 0, 50);
        false -> ok
    end,
    {memory, Own} = erlang:process_info(erlang:self(), memory),
    lists:map(fun({Kind, Bytes}) when Kind =:= total; Kind =:= processes;
                                      Kind =:= processes_used ->
                      {Kind, Bytes - Own};
                 (Other) ->
                      Other
              end,
              erlang:memory()).

%% A slice's Values(Attribute, Slice, true), split by erlang:phash2/2 of
%% the pid into Parts partitions, each compressed: a tuple of Parts
%% binaries of [{Value, Pid}] in slice order (proc_window/10 joins two
%% passes a partition at a time). Made here, where nothing else is bound:
%% a fun made inside a helper holds every parameter that helper uses
%% (erl_eval keeps the variables its function uses), and each worker gets
%% its own flat copy, describe/1's and pmap/5's clauses among them.
-spec partitioned(fun(), atom(), pos_integer()) ->
          fun(([pid()]) -> tuple()).
partitioned(Values, Attribute, Parts) ->
    Empty = erlang:term_to_binary([]),
    fun(Slice) ->
            Pairs = Values(Attribute, Slice, true),
            {_, Pids} = lists:unzip(Pairs),
            Many = erlang:length(Pids),
            %% Each pair as [Part | Pair], grouped by its head, its tail
            %% kept, in slice order (maps:groups_from_list/3, OTP 25+):
            %% one compiled pass, where a match specification a part had
            %% cost a pass over the slice for each.
            Groups = maps:groups_from_list(
                       fun erlang:hd/1, fun erlang:tl/1,
                       lists:zipwith(fun erlang:'++'/2,
                                     lists:zipwith(fun lists:duplicate/2,
                                                   lists:duplicate(Many, 1),
                                                   lists:zipwith(
                                                     fun erlang:phash2/2, Pids,
                                                     lists:duplicate(Many,
                                                                     Parts))),
                                     Pairs)),
            erlang:list_to_tuple(
              lists:map(fun(Part) ->
                                case Groups of
                                    #{Part := Group} ->
                                        erlang:term_to_binary(
                                          Group, [{compressed, 1}]);
                                    _ ->
                                        Empty
                                end
                        end,
                        lists:seq(0, Parts - 1)))
    end.

%% The process a user named (proc-info, trace-gc): Target is {pid,
%% "<0.1.0>"} or {names, ["Name", ...]}, the registered names it may be (an
%% Elixir alias is tried with and without its "Elixir." prefix), looked up
%% with list_to_existing_atom/1, so no atom is ever created. not_a_pid for
%% text that is no pid, undefined for a name nobody holds.
-spec resolve({pid, string()} | {names, [string()]}) ->
          pid() | not_a_pid | undefined.
resolve({pid, Text}) ->
    try erlang:list_to_pid(Text)
    catch error:badarg -> not_a_pid
    end;
resolve({names, Names}) ->
    Known = lists:filtermap(
              fun(Name) ->
                      try erlang:list_to_existing_atom(Name) of
                          Atom ->
                              case erlang:whereis(Atom) of
                                  undefined -> false;
                                  Found -> {true, Found}
                              end
                      catch error:badarg -> false
                      end
              end,
              Names),
    case Known of
        [First | _] -> First;
        [] -> undefined
    end.

%% Run the guarded expression Form on every node of Names at once
%% (erpc:multicall), with BeamProbeWatch bound to {process, self(), Ours}:
%% each node's guard watches this call, which the attached node's own
%% guard ends when beam-probe goes, and leaves Ours (this call's processes
%% and our connection's) out of what it reports: on the attached node they
%% are among the node's processes.
%%
%% Harmless to the cluster, by rule:
%%
%%   * Names are binaries, and only nodes this node is connected to now
%%     are asked (this node itself included). A name that is no atom here
%%     names no connected node: making it one would plant an atom, which
%%     is never freed. A name not connected is never dialled: erpc would
%%     connect, and net_kernel looks a host up itself, inside net_kernel
%%     (inet_gethost_native): 1,000 unresolvable names kept a node from
%%     accepting connections for ~90 s, and global then disconnected every
%%     member (measured on a 22-node cluster). Its reply is
%%     {error, {beam_probe, not_connected}}.
%%   * Form is built (encoded/5) so that a member replies with the bytes of
%%     its answer, never the term: this node passes them through without
%%     decoding, so no atom of a member's (a name registered there alone)
%%     is ever made here.
%%   * MaxBytes bounds the replies passed on, in all: a member over it on
%%     its own answered {beam_probe_oversize, Size} already; one that no
%%     longer fits beside the replies before it is
%%     {error, {beam_probe, {crowded, Size}}}, for beam-probe to ask again
%%     in a smaller group. One node's large answer never hides the others'.
%%
%% Replies in Names' order, as erpc:multicall gives them.
-spec fan_out([binary()], erl_parse:abstract_expr(), [{atom(), term()}],
              timeout(), pos_integer()) -> [{ok, term()} | {atom(), term()}].
fan_out(Names, Form, Bindings, TimeoutMs, MaxBytes) ->
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               List -> List
           end,
    %% Ours is [Watcher, Worker | Connection] (guard/3): the last are our
    %% connection's processes, which live as long as it does; a member's
    %% holder of a large answer (encoded/5) watches them.
    Watching = orddict:store(
                 'BeamProbeWatch', {process, erlang:self(), Ours},
                 orddict:store('BeamProbeConnection',
                               lists:nthtail(erlang:min(2, erlang:length(Ours)),
                                             Ours),
                               Bindings)),
    Connected = [erlang:node() | erlang:nodes(connected)],
    Known = lists:map(
              fun(Name) ->
                      try erlang:binary_to_existing_atom(Name, utf8) of
                          Node ->
                              case lists:member(Node, Connected) of
                                  true -> {node, Node};
                                  false -> not_connected
                              end
                      catch
                          error:badarg -> not_connected
                      end
              end,
              Names),
    Asked = [Node || {node, Node} <- Known],
    Replies = erpc:multicall(Asked, erl_eval, expr,
                             [Form, Watching, none, none, value], TimeoutMs),
    Place = fun Place([], _, _) ->
                    [];
                Place([not_connected | Rest], Got, Left) ->
                    [{error, {beam_probe, not_connected}}
                     | Place(Rest, Got, Left)];
                Place([_ | Rest], [{ok, Bytes} | Got], Left)
                  when erlang:is_binary(Bytes),
                       erlang:byte_size(Bytes) > Left ->
                    [{error, {beam_probe, {crowded, erlang:byte_size(Bytes)}}}
                     | Place(Rest, Got, Left)];
                Place([_ | Rest], [{ok, Bytes} = Reply | Got], Left)
                  when erlang:is_binary(Bytes) ->
                    [Reply | Place(Rest, Got, Left - erlang:byte_size(Bytes))];
                Place([_ | Rest], [Reply | Got], Left) ->
                    %% An error, or a size said instead of an answer: a
                    %% few hundred bytes from a node of ours. Anything
                    %% larger is a node that does not answer as ours do
                    %% (its term, not bytes): only its size crosses.
                    Size = erlang:external_size(Reply),
                    case Size =< erlang:min(4096, Left) of
                        true ->
                            [Reply | Place(Rest, Got, Left - Size)];
                        false ->
                            [{error, {beam_probe, {unread, Size}}}
                             | Place(Rest, Got, Left)]
                    end
            end,
    Place(Known, Replies, MaxBytes).

%% On a member of a fan-out: Work()'s value as the bytes of its external
%% term format (compressed: rankings shrink severalfold, and snapshot
%% chunks, already compressed, cost little more), or why not. Whatever
%% Work() raises is encoded too, as {beam_probe_failed, Class, Reason}, so
%% that the entry node decodes nothing of a member's.
%%
%% Over MaxBytes (what one frame of the entry's reply may carry), the
%% bytes stay here, in a process of their own, for beam-probe to fetch a
%% piece at a time (piece/4, each piece a fan-out to this node alone), and
%% {beam_probe_held, Holder, Size} crosses instead: a large node's answer
%% streams through the entry rather than ending as a row. The holder
%% watches our connection's processes on the entry node (Connection), so
%% it ends when we go, and ends after the last piece or IdleMs without a
%% request. Over MostBytes, only the size crosses:
%% {beam_probe_oversize, Size}.
-spec encoded(fun(() -> term()), pos_integer(), [pid() | port()],
              pos_integer(), timeout()) ->
          binary() | {beam_probe_oversize, non_neg_integer()} |
          {beam_probe_held, pid(), non_neg_integer()}.
encoded(Work, MaxBytes, Connection, MostBytes, IdleMs) ->
    Value = try
                Work()
            catch
                Class:Reason -> {beam_probe_failed, Class, Reason}
            end,
    Bytes = erlang:term_to_binary(Value, [{compressed, 1}]),
    Size = erlang:byte_size(Bytes),
    Hold = fun Hold() ->
                   receive
                       {beam_probe_piece, From, Ref, Offset, Length}
                         when Offset >= 0, Length >= 0,
                              Offset + Length =< Size ->
                           From ! {Ref, erlang:binary_part(Bytes, Offset,
                                                           Length)},
                           case Offset + Length < Size of
                               true -> Hold();
                               false -> ok
                           end;
                       {'DOWN', _, process, _, _} ->
                           ok
                   after IdleMs ->
                       ok
                   end
           end,
    if
        Size =< MaxBytes ->
            Bytes;
        Size =< MostBytes ->
            Holder = erlang:spawn(
                       fun() ->
                               lists:foreach(
                                 fun(Ours) ->
                                         erlang:monitor(process, Ours)
                                 end,
                                 [P || P <- Connection, erlang:is_pid(P),
                                       erlang:node(P) =/= erlang:node()]),
                               Hold()
                       end),
            {beam_probe_held, Holder, Size};
        true ->
            {beam_probe_oversize, Size}
    end.

%% A piece of what a holder of encoded/5 holds: Length bytes from Offset,
%% or why not ({beam_probe_gone, Reason} for a holder that ended).
-spec piece(pid(), non_neg_integer(), non_neg_integer(), timeout()) ->
          binary() | {beam_probe_gone, term()}.
piece(Holder, Offset, Length, WaitMs) ->
    Ref = erlang:monitor(process, Holder),
    Holder ! {beam_probe_piece, erlang:self(), Ref, Offset, Length},
    receive
        {Ref, Bytes} ->
            erlang:demonitor(Ref, [flush]),
            Bytes;
        {'DOWN', Ref, process, Holder, Reason} ->
            {beam_probe_gone, Reason}
    after WaitMs ->
        {beam_probe_gone, timeout}
    end.
