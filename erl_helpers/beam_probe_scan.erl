%% The commands of recon's leak hunt, run on the node beam-probe inspects:
%% bin_leak, proc_count (and --all), proc_window, proc_info, and check's
%% health, each a short composition of the mechanics in beam_probe_lib.erl,
%% which arrive as funs. The rules at the top of beam_probe_lib.erl hold.
-module(beam_probe_scan).

-export([bin_leak/10, proc_count/9, proc_count_all/11, proc_window/10,
         proc_info/2, health/8]).

-type memory() :: beam_probe_lib:memory().
-type rows() :: beam_probe_lib:rows().


%% recon's bin_leak: count every process's refc binary references, collect
%% only the processes that hold any (one that holds none cannot free any),
%% count again. At most MaxGc processes are collected, those holding most
%% first; DryRun collects none and says how many would be. Rows: the N
%% largest falls, most first, processes that died meanwhile left out,
%% each with the bytes it still holds, each binary once (Distinct,
%% distinct/1): recon's fall is a count of references, and says nothing
%% of what is left (issue 38).
-spec bin_leak(pos_integer(), non_neg_integer(), boolean(),
               non_neg_integer(), fun(), fun(), fun(), fun(), fun(),
               fun()) ->
          #{scanned := non_neg_integer(),
            holders := non_neg_integer(),
            collected := non_neg_integer(),
            would_collect := non_neg_integer(),
            memory_before := memory(),
            memory_after := memory(),
            rows := rows()}.
bin_leak(N, MaxGc, DryRun, Jobs, Pmap, Top, Describe, Distinct, Others,
         Settled) ->
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
    %% Memory is read before the counting workers exist, and after the
    %% collections once their heaps are freed (settled/1).
    MemoryBefore = Settled(true),
    %% The holders counted, and only the MaxGc holding most kept, slice
    %% after slice in process order (Top keeps its input's order, so the
    %% MaxGc best of the kept best and the rest are the MaxGc best of
    %% all). Each slice's holders are kept as they come, and cut to the
    %% MaxGc best only once more than twice that many are held, so a
    %% holder is copied a few times at most: joined to the kept at every
    %% slice (Kept ++ Holders), every holder kept so far was copied once
    %% a slice, and with no --max-gc (all kept) a pass over 600,000
    %% holders took 4.1-6.0 s and +264 MB, against 2.3-2.6 s and +164-181
    %% MB before issue 39 (OTP 25, 2 cores).
    Keep = fun(Chunks) -> Top(lists:append(lists:reverse(Chunks)), MaxGc) end,
    {{HolderCount, Held, _}, Scanned} =
        Pmap(CountHolders,
             fun(Holders, {Count, Chunks, Size}) ->
                     Many = erlang:length(Holders),
                     case Size + Many > 2 * MaxGc of
                         true ->
                             {Count + Many, [Keep([Holders | Chunks])],
                              erlang:min(MaxGc, Size + Many)};
                         false ->
                             {Count + Many, [Holders | Chunks], Size + Many}
                     end
             end,
             {0, [], 0}, Others(), Jobs),
    Chosen = Keep(Held),
    {Before, Victims} = lists:unzip(Chosen),
    Summary = #{scanned => Scanned,
                holders => HolderCount,
                would_collect => erlang:length(Victims),
                memory_before => MemoryBefore},
    case DryRun of
        true ->
            Summary#{collected => 0,
                     memory_after => MemoryBefore,
                     rows => Describe([])};
        false ->
            After = lists:append(erlang:element(
                                   1, Pmap(Collect, list, [], Victims, Jobs))),
            MemoryAfter = Settled(true),
            Deltas = ets:match_spec_run(
                       lists:zip3(After, Before, Victims),
                       ets:match_spec_compile(
                         [{{'$1', '$2', '$3'}, [{'>=', '$1', 0}],
                           [{{{'-', '$1', '$2'}, '$3'}}]}])),
            %% keysort is stable: reversed first, equal falls list the later
            %% process first, as recon's reverse(keysort(...)) does.
            Rows = Describe(lists:sublist(lists:keysort(1,
                                                        lists:reverse(Deltas)),
                                          N)),
            Summary#{collected => erlang:length(Victims),
                     memory_after => MemoryAfter,
                     rows => Rows#{distinct =>
                                       Distinct(maps:get(pids, Rows))}}
    end.

%% recon's proc_count: the N processes with the largest Attribute. Each
%% slice keeps its own top N, then the top N of those; rows in process
%% order (the caller orders them by value, the later process first). By
%% binary_memory, recon's figure (a binary once per reference) ranks, and
%% the rows carry each process's distinct bytes beside it (Distinct,
%% distinct/1), so that no process is shown holding more than the node
%% has.
-spec proc_count(atom(), pos_integer(), non_neg_integer(),
                 fun(), fun(), fun(), fun(), fun(), fun()) ->
          #{scanned := non_neg_integer(), rows := rows()}.
proc_count(Attribute, N, Jobs, Pmap, Values, Top, Describe, Distinct,
           Others) ->
    %% Each slice's top N is kept, in process order, and the kept cut to
    %% their top N once more than 2N are held, so the node holds at most
    %% 3N rows, not a top a slice. (Cut at every slice, a top of 10,000
    %% sorted ~11,000 values a slice: proc-count memory 10000 over
    %% 300,000 processes took 1.61-1.64 s, against 1.25-1.29 s before
    %% issue 39; OTP 25, 2 cores.)
    Keep = fun(Chunks) -> Top(lists:append(lists:reverse(Chunks)), N) end,
    {{Held, _}, Scanned} =
        Pmap(fun(Slice) -> Top(Values(Attribute, Slice, false), N) end,
             fun(SliceTop, {Chunks, Size}) ->
                     Many = erlang:length(SliceTop),
                     case Size + Many > 2 * N of
                         true ->
                             {[Keep([SliceTop | Chunks])],
                              erlang:min(N, Size + Many)};
                         false ->
                             {[SliceTop | Chunks], Size + Many}
                     end
             end,
             {[], 0}, Others(), Jobs),
    Best = Keep(Held),
    Rows = Describe(Best),
    #{scanned => Scanned,
      rows => case Attribute of
                  binary_memory ->
                      Rows#{distinct => Distinct(maps:get(pids, Rows))};
                  _ ->
                      Rows
              end}.

%% Every process ranked by Attribute, largest first (equal values: the
%% later process first, as recon orders them), sent to Sink as
%% {Tag, self(), Rows} in chunks of Chunk rows (by binary_memory, with
%% their distinct bytes, as proc_count/9). Flow control: the next
%% chunk goes only when Sink answers {Tag, more}, so neither rex nor
%% beam-probe ever holds the whole ranking; no answer within WaitMs ends
%% the call.
-spec proc_count_all(pid(), reference(), atom(), pos_integer(), timeout(),
                     non_neg_integer(), fun(), fun(), fun(), fun(), fun()) ->
          #{scanned := non_neg_integer(), sent := non_neg_integer()}.
proc_count_all(Sink, Tag, Attribute, Chunk, WaitMs, Jobs, Pmap, Values,
               Describe, Distinct, Others) ->
    %% Made first: an erl_eval fun holds the variables bound before it
    %% that its function uses, and each worker gets it flat (made after
    %% Send, 19,518 words; first, 1,333).
    Read = fun(Slice) -> Values(Attribute, Slice, false) end,
    Show = fun(Rows) ->
                   Described = Describe(Rows),
                   case Attribute of
                       binary_memory ->
                           Described#{distinct =>
                                          Distinct(maps:get(pids,
                                                            Described))};
                       _ ->
                           Described
                   end
           end,
    %% The ranking is only ever an argument, never a variable: erl_eval
    %% keeps a function's variables until it returns, and bound here the
    %% slices' lists, their join and the ranking had all stayed whole
    %% until the last chunk was taken, where the rows sent are garbage at
    %% once (see pmap/5's walk).
    Rank = fun({PairLists, Scanned}) ->
                   {lists:reverse(lists:keysort(1, lists:append(PairLists))),
                    Scanned}
           end,
    Send = fun Send({[], Scanned}, Sent) ->
                   #{scanned => Scanned, sent => Sent};
               Send({Rest, Scanned}, Sent) ->
                   Rows = lists:sublist(Rest, Chunk),
                   Many = erlang:length(Rows),
                   %% noconnect: were beam-probe gone, a plain send
                   %% would make the node connect back to it.
                   erlang:send(Sink, {Tag, erlang:self(), Show(Rows)},
                               [noconnect]),
                   receive
                       {Tag, more} ->
                           Send({lists:nthtail(Many, Rest), Scanned},
                                Sent + Many)
                   after WaitMs ->
                       erlang:exit(beam_probe_no_reader)
                   end
           end,
    Send(Rank(Pmap(Read, list, [], Others(), Jobs)), 0).

%% recon's proc_window: the largest increases of Attribute over Millis
%% milliseconds: two passes. Unlike recon, a process born or dead inside
%% the window is not given its absolute value as a delta: those are
%% counted and listed apart (born: value at the end; dead: value at the
%% start). The dead, gone before they could be described, as two columns.
%%
%% What the node holds is bounded (issue 39: two lists and two maps of
%% every process had cost +227-325 MB at 300,000 processes; one map of
%% the first pass, joined as the second was folded, +73 MB). Each pass
%% keeps, per slice, its {Value, Pid} pairs split by erlang:phash2/2 of
%% the pid into Parts partitions of ~8,192 processes (at most 64), each
%% compressed
%% (Reader, made by partitioned/3: ~3.6 bytes a process, measured at
%% 300,000). The passes are then joined a partition at a time: its
%% first-pass pairs as a map, its second-pass pairs looked up in it
%% (compiled maps:get/3), what the map holds and the second pass had not
%% the dead; each partition's tops join the tops before them. So the
%% node holds both passes compressed, and one partition's pairs (at
%% 300,000 processes, 2 cores: partitions of 32,768 peaked at +27 MB on
%% OTP 25; of 16,384 at +22-23 MB on 25 and +29 MB on 28; of 8,192 at
%% +23 MB on 28).
%% Rows are a top N in partition order, then the second pass's process
%% order: at ties at the N-th value, any of the tied processes.
-spec proc_window(atom(), pos_integer(), pos_integer(), non_neg_integer(),
                  fun(), fun(), fun(), fun(), fun(), fun()) ->
          #{scanned_first := non_neg_integer(),
            scanned_last := non_neg_integer(),
            rows := rows(),
            born_count := non_neg_integer(),
            born := rows(),
            dead_count := non_neg_integer(),
            dead := #{values := [integer()], pids := [pid()]}}.
proc_window(Attribute, N, Millis, Jobs, Pmap, Values, Top, Describe,
            Others, Reader) ->
    %% Partitions of ~8,192 processes (a partition's join holds ~3 MB of
    %% lists), at most 64: each slice compresses a binary a partition.
    Parts = erlang:min(64, erlang:system_info(process_count) div 8192 + 1),
    Read = Reader(Values, Attribute, Parts),
    {Firsts, First} = Pmap(Read, list, [], Others(), Jobs),
    receive
    after Millis ->
        ok
    end,
    {Lasts, Last} = Pmap(Read, list, [], Others(), Jobs),
    Swap = ets:match_spec_compile([{{'$1', '$2'}, [], [{{'$2', '$1'}}]}]),
    %% Over {End, Start | none, Pid}: the born, and the deltas.
    Newly = ets:match_spec_compile([{{'$1', none, '$3'}, [],
                                     [{{'$1', '$3'}}]}]),
    Grown = ets:match_spec_compile([{{'$1', '$2', '$3'}, [{is_integer, '$2'}],
                                     [{{{'-', '$1', '$2'}, '$3'}}]}]),
    %% One pass's pairs of one partition, in slice order: a compiled
    %% inflate a slice.
    Part = fun(Slices, Index) ->
                   lists:append(
                     lists:map(fun erlang:binary_to_term/1,
                               lists:zipwith(fun erlang:element/2,
                                             lists:duplicate(
                                               erlang:length(Slices), Index),
                                             Slices)))
           end,
    %% One partition: its first pass as a map, its second pass's pairs
    %% looked up in it; what the map holds and the second pass had not,
    %% the dead.
    Join = fun(Index, {Deltas, Born, BornCount, Dead, DeadCount}) ->
                   Start = maps:from_list(
                             ets:match_spec_run(Part(Firsts, Index), Swap)),
                   {Ends, Pids} = lists:unzip(Part(Lasts, Index)),
                   Many = erlang:length(Pids),
                   Joined = lists:zip3(Ends,
                                       lists:zipwith3(
                                         fun maps:get/3, Pids,
                                         lists:duplicate(Many, Start),
                                         lists:duplicate(Many, none)),
                                       Pids),
                   New = ets:match_spec_run(Joined, Newly),
                   Gone = ets:match_spec_run(
                            maps:to_list(maps:without(Pids, Start)), Swap),
                   Result = {Top(Deltas ++ ets:match_spec_run(Joined, Grown),
                                 N),
                             Top(Born ++ New, N),
                             BornCount + erlang:length(New),
                             Top(Dead ++ Gone, N),
                             DeadCount + erlang:length(Gone)},
                   %% This partition's pairs and map are garbage now.
                   erlang:garbage_collect(),
                   Result
           end,
    {Deltas, Born, BornCount, Dead, DeadCount} =
        lists:foldl(Join, {[], [], 0, [], 0}, lists:seq(1, Parts)),
    #{scanned_first => First,
      scanned_last => Last,
      rows => Describe(Deltas),
      born_count => BornCount,
      born => Describe(Born),
      dead_count => DeadCount,
      dead => maps:from_list(lists:zip([values, pids],
                                       erlang:tuple_to_list(
                                         lists:unzip(Dead))))}.

%% One process, the way recon:info/1 groups it, without the dictionary and
%% the mailbox; plus the count and summed size of its refc binary
%% references (recon's figure) and the size of its binaries, each once
%% (one binary received in 50 messages is 50 references), and
%% the pids of other nodes it refers to as this node prints them (the
%% first number of <5.81.0> is this node's own index for that node).
%% Target is as resolve/1 takes it, and Resolve is resolve/1 as a fun.
-spec proc_info({pid, string()} | {names, [string()]}, fun()) ->
          #{pid := pid(),
            items := [{atom(), term()}],
            binary_count := non_neg_integer(),
            binary_memory := non_neg_integer(),
            binary_distinct := non_neg_integer(),
            pid_texts := [{pid(), string()}]} |
          {error, not_a_pid | no_such_name | {other_node, node()} |
                  {not_alive, pid()}}.
proc_info(Target, Resolve) ->
    Pid = Resolve(Target),
    Items = [registered_name, group_leader, status,
             links, monitors, monitored_by, trap_exit,
             initial_call, current_function, current_stacktrace,
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
                    %% The sizes alone, by a match specification: a
                    %% backlog of a million binary messages lists a
                    %% million references, and unzip3/1 made three lists
                    %% of them, twice (issue 39 item 4).
                    SizeOf = ets:match_spec_compile(
                               [{{'_', '$1', '_'}, [], ['$1']}]),
                    Sizes = ets:match_spec_run(Binaries, SizeOf),
                    Distinct = ets:match_spec_run(
                                 lists:ukeysort(1, Binaries), SizeOf),
                    Monitors = proplists:get_value(monitors, Info, []),
                    Named = lists:flatten(
                              [proplists:get_value(links, Info, []),
                               proplists:get_value(monitored_by, Info, []),
                               proplists:get_value(group_leader, Info, []),
                               proplists:get_all_values(process, Monitors)]),
                    Remote = lists:filter(
                               fun(P) ->
                                       erlang:is_pid(P) andalso
                                           erlang:node(P) =/= erlang:node()
                               end,
                               Named),
                    #{pid => Pid,
                      items => Info,
                      binary_count => erlang:length(Binaries),
                      binary_memory => lists:sum(Sizes),
                      binary_distinct => lists:sum(Distinct),
                      pid_texts => lists:zip(Remote,
                                             lists:map(fun erlang:pid_to_list/1,
                                                       Remote))}
            end
    end.

%% What `beam-probe check` measures on one node: erlang:memory(), the
%% process count, atom count and limit, the most refc binary bytes one
%% process holds (each binary once: binary_distinct in values/3; recon's
%% figure counted a binary per reference, and check printed 472.1 MiB on
%% a node of 110.5 MiB of binaries) and the longest message queue; the allocators' figures, the
%% node's RSS and its largest ETS table (beam_probe_alloc's types/0 and
%% rss/0 and beam_probe_ets's top_memory/0, passed as funs).
%%
%% The two maxima name their processes (issue 38: an engineer paged for
%% a 900 MiB holder had to run another command to learn who): each
%% slice's largest {Value, Pid} (pids compare after values), the largest
%% of those, and the (at most two) holders described by describe/1 as
%% every table's rows are. A maximum of 0 names nothing.
-spec health(non_neg_integer(), fun(), fun(), fun(), fun(), fun(), fun(),
             fun()) ->
          #{memory := memory(),
            process_count := non_neg_integer(),
            atom_count := non_neg_integer(),
            atom_limit := non_neg_integer(),
            top_binary_memory := non_neg_integer(),
            max_queue := non_neg_integer(),
            holders := rows(),
            allocators := [map()],
            rss := binary() | undefined,
            top_ets_memory := non_neg_integer()}.
health(Jobs, Pmap, Values, Others, Allocators, Rss, TopEts, Describe) ->
    Largest = fun(Pairs) -> lists:max([{0, none} | Pairs]) end,
    {Tops, Scanned} =
        Pmap(fun(Slice) ->
                     [Largest(Values(binary_distinct, Slice, false)),
                      Largest(Values(message_queue_len, Slice, false))]
             end,
             fun(SliceTops, Kept) ->
                     lists:zipwith(fun erlang:max/2, SliceTops, Kept)
             end,
             [{0, none}, {0, none}], Others(), Jobs),
    #{memory => erlang:memory(),
      %% Every process but ours, as every command counts them.
      process_count => Scanned,
      atom_count => erlang:system_info(atom_count),
      atom_limit => erlang:system_info(atom_limit),
      top_binary_memory => erlang:element(1, lists:nth(1, Tops)),
      max_queue => erlang:element(1, lists:nth(2, Tops)),
      %% Rows in the order of the two figures, a figure of 0 left out.
      holders => Describe([Pair || {Value, _} = Pair <- Tops, Value > 0]),
      allocators => Allocators(),
      rss => Rss(),
      top_ets_memory => TopEts()}.
