%% What `beam-probe watch` asks the node for, once per sample.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl (stock modules only; the functions it needs from
%% there, pmap/3, others/0, top/2 and settled/1, and beam_probe_alloc's
%% rss/0, arrive as funs).
%%
%% Without a collection a sample reads counters only: erlang:memory(),
%% statistics(garbage_collection), four counts and their limits, the
%% allocators' sizes and the node's /proc/self/status. None of it walks
%% the processes, so its cost does not grow with their number; the one
%% part that grows with the schedulers is the allocator fold (one instance
%% per scheduler and allocator).
-module(beam_probe_watch).

-export([sample/8]).

-type gc() :: none | holders | all.
-type sample() :: #{memory := [{atom(), non_neg_integer()}],
                    gc_count := non_neg_integer(),
                    gc_words_reclaimed := non_neg_integer(),
                    process_count := non_neg_integer(),
                    process_limit := pos_integer(),
                    port_count := non_neg_integer(),
                    port_limit := pos_integer(),
                    atom_count := non_neg_integer(),
                    atom_limit := pos_integer(),
                    ets_count := non_neg_integer(),
                    ets_limit := pos_integer(),
                    alloc_used := non_neg_integer(),
                    alloc_allocated := non_neg_integer(),
                    rss := binary() | undefined,
                    wordsize := pos_integer(),
                    collected := non_neg_integer(),
                    gc_us := non_neg_integer(),
                    sample_us := non_neg_integer()}.

%% One sample, after the collection Gc asks for:
%%   none    - nothing is collected;
%%   holders - the processes that hold refc binaries (bin_leak's filter:
%%             one that holds none cannot free any), at most MaxGc of them,
%%             those holding most first;
%%   all     - every process.
%% Collections are synchronous (erlang:garbage_collect/1), from pmap's
%% slices at once, each slice one compiled lists:foreach. Not the
%% {async, Ref} form: its answers must then be received one by one by
%% interpreted code, and counting them with message_queue_len does not
%% work, since answers not yet fetched by a receive are not counted (a
%% wait on it never ended at 100k processes). Measured at 100k processes
%% on 2 cores: 126-135 ms in slices, 145 ms async from one process.
%% The memory is read once the workers' heaps are freed (settled/1), and
%% without this process's own heap.
-spec sample(gc(), non_neg_integer(), non_neg_integer(), fun(), fun(),
             fun(), fun(), fun()) -> sample().
sample(Gc, MaxGc, Jobs, Pmap, Others, Top, Settled, Rss) ->
    Collect = fun(Pids) ->
                      erlang:element(
                        2, Pmap(fun(Slice) ->
                                        lists:foreach(
                                          fun erlang:garbage_collect/1, Slice)
                                end,
                                fun(_, Acc) -> Acc end, ok, Pids, Jobs))
              end,
    GcStarted = erlang:monotonic_time(microsecond),
    Collected =
        case Gc of
            none ->
                0;
            holders ->
                %% Only the MaxGc holding most are kept, slice after
                %% slice in process order: each slice's holders as they
                %% come, cut to the MaxGc best once more than twice that
                %% many are held (as bin_leak/10 does: joined at every
                %% slice, the kept were copied once a slice, quadratic
                %% with no --max-gc).
                Keep = fun(Chunks) ->
                               Top(lists:append(lists:reverse(Chunks)), MaxGc)
                       end,
                {{Held, _}, _} =
                    Pmap(fun(Pids) ->
                                 Infos = lists:zipwith(
                                           fun erlang:process_info/2,
                                           Pids,
                                           lists:duplicate(
                                             erlang:length(Pids),
                                             binary)),
                                 ets:match_spec_run(
                                   lists:zip(Infos, Pids),
                                   ets:match_spec_compile(
                                     [{{{binary, '$1'}, '$2'},
                                       [{'=/=', '$1', []}],
                                       [{{{length, '$1'}, '$2'}}]}]))
                         end,
                         fun(Holders, {Chunks, Size}) ->
                                 Many = erlang:length(Holders),
                                 case Size + Many > 2 * MaxGc of
                                     true ->
                                         {[Keep([Holders | Chunks])],
                                          erlang:min(MaxGc, Size + Many)};
                                     false ->
                                         {[Holders | Chunks], Size + Many}
                                 end
                         end,
                         {[], 0}, Others(), Jobs),
                {_, Victims} = lists:unzip(Keep(Held)),
                Collect(Victims);
            all ->
                Collect(Others())
        end,
    Started = erlang:monotonic_time(microsecond),
    Memory = Settled(Gc =/= none),
    {GcCount, WordsReclaimed, _} = erlang:statistics(garbage_collection),
    %% Used and allocated, folded over every alloc_util allocator (those
    %% disabled answer 'false'), every instance, and its mbcs, sbcs and
    %% mbcs_pool carriers, from one read of each allocator, so used never
    %% exceeds allocated (recon_alloc reads them apart: recon#55);
    %% literal_alloc counts too (recon_alloc leaves it out). Counters are
    %% {Name, Current} or {Name, Current, LastMax, Max}. Each level is
    %% taken apart by a compiled match specification: an interpreted fold
    %% over the counters cost 4-5 ms a sample on 2 schedulers (measured),
    %% and there is one instance per scheduler.
    Select = fun(List, Spec) ->
                     ets:match_spec_run(List, ets:match_spec_compile(Spec))
             end,
    Instances = lists:append(
                  Select([erlang:system_info({allocator_sizes, Allocator})
                          || Allocator <-
                                 erlang:system_info(alloc_util_allocators)],
                         [{'$1', [{is_list, '$1'}], ['$1']}])),
    Carriers = lists:append(
                 Select(lists:append(
                          Select(Instances,
                                 [{{instance, '_', '$1'}, [], ['$1']}])),
                        [{{mbcs, '$1'}, [], ['$1']},
                         {{sbcs, '$1'}, [], ['$1']},
                         {{mbcs_pool, '$1'}, [], ['$1']}])),
    Current = [{{'$1', '$2'}, [], ['$2']},
               {{'$1', '$2', '_', '_'}, [], ['$2']}],
    Allocated = lists:sum(
                  Select(Select(Carriers,
                                [{'$1',
                                  [{'=:=', {element, 1, '$1'}, carriers_size}],
                                  ['$1']}]),
                         Current)),
    Counters = lists:append(
                 Select(lists:append(Select(Carriers,
                                            [{{blocks, '$1'}, [], ['$1']}])),
                        [{{'_', '$1'}, [], ['$1']}])),
    Used = lists:sum(
             Select(Select(Counters,
                           [{'$1', [{'=:=', {element, 1, '$1'}, size}],
                             ['$1']}]),
                    Current)),
    %% Our own processes and our connection's port (guard/3 keeps them)
    %% are not the node's: counted out, as scans and snapshots leave them
    %% out, so every command gives one count.
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [];
               List -> List
           end,
    OurProcesses = erlang:length(lists:filter(fun erlang:is_process_alive/1,
                                              lists:filter(fun erlang:is_pid/1,
                                                           Ours))),
    OurPorts = erlang:length(lists:filter(fun erlang:is_port/1, Ours)),
    #{memory => Memory,
      gc_count => GcCount,
      gc_words_reclaimed => WordsReclaimed,
      process_count => erlang:system_info(process_count) - OurProcesses,
      process_limit => erlang:system_info(process_limit),
      port_count => erlang:system_info(port_count) - OurPorts,
      port_limit => erlang:system_info(port_limit),
      atom_count => erlang:system_info(atom_count),
      atom_limit => erlang:system_info(atom_limit),
      ets_count => erlang:system_info(ets_count),
      ets_limit => erlang:system_info(ets_limit),
      alloc_used => Used,
      alloc_allocated => Allocated,
      rss => Rss(),
      wordsize => erlang:system_info(wordsize),
      collected => Collected,
      gc_us => Started - GcStarted,
      sample_us => erlang:monotonic_time(microsecond) - Started}.
