%% What `beam-probe serve` asks a node for, once per Prometheus scrape.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_lib.erl (stock modules only; the functions it needs from
%% there and beam_probe_alloc's rss/0 arrive as funs).
%%
%% vm/1 is the default scrape: counters and limits only, the figures
%% prometheus.erl's VM collectors export. Nothing in it walks the
%% processes, so its cost does not grow with their number; the part that
%% grows with the schedulers is the allocator read (one instance per
%% scheduler and allocator type), the same read `watch` makes.
%%
%% top/8 is the opt-in `module=top` scrape: one pass over the processes
%% (pmap's slices) ranking them by memory, binary_memory and message
%% queue length at once, as three proc-count runs would, plus the
%% reductions of the largest binary holders, for the exporter's estimate
%% of binary memory held by processes that do not run.
-module(beam_probe_metrics).

-export([vm/1, top/8]).

-type vm() :: #{memory := [{atom(), non_neg_integer()}],
                system := [{atom(), term()}],
                statistics := [{atom(), term()}],
                dets_tables := non_neg_integer(),
                our_processes := non_neg_integer(),
                our_ports := non_neg_integer(),
                allocators := #{types := [atom()],
                                counts := [non_neg_integer()],
                                instances := [non_neg_integer()],
                                mbcs := [list()],
                                mbcs_pool := [list()],
                                sbcs := [list()]},
                rss := binary() | undefined,
                scrape_us := non_neg_integer()}.

%% The VM's figures. system_info items a node may not know (an old
%% release, or logical_processors off Linux) answer 'unknown', which the
%% exporter leaves out. DETS tables are counted from dets_registry, the
%% DETS server's own table, only where the server runs: dets:all/0 would
%% start it on a node that never used DETS (measured on OTP 25). Our
%% own processes and our connection's port (guard/3 keeps them) are
%% counted so the exporter can leave them out: they are not the node's.
%%
%% The allocators: one system_info({allocator, Type}) per type, each
%% instance's carriers trimmed to what the series need (carriers and
%% carriers_size, current and maximum, and the blocks per type) by
%% compiled calls: lists:keyfind/3 and a compiled match specification
%% applied through lists:zipwith/3, never a fun of ours per instance. The
%% interpreted fold that beam_probe_alloc:types/1 makes cost 4.5 ms a
%% scrape on 2 schedulers, 3.5x a whole `watch` sample (measured); one
%% instance per scheduler and type, so it grows with the schedulers. The
%% exporter sums the blocks.
-spec vm(fun()) -> vm().
vm(Rss) ->
    Started = erlang:monotonic_time(microsecond),
    Info = fun(Item) ->
                   try
                       erlang:system_info(Item)
                   catch
                       error:badarg -> unknown
                   end
           end,
    System = [{Item, Info(Item)}
              || Item <- [process_count, process_limit, port_count,
                          port_limit, atom_count, atom_limit, ets_count,
                          ets_limit, schedulers, schedulers_online,
                          dirty_cpu_schedulers, dirty_cpu_schedulers_online,
                          dirty_io_schedulers, logical_processors,
                          logical_processors_available,
                          logical_processors_online, thread_pool_size,
                          wordsize, time_correction, otp_release,
                          version]],
    {{input, Input}, {output, Output}} = erlang:statistics(io),
    {Switches, _} = erlang:statistics(context_switches),
    {Gcs, Words, _} = erlang:statistics(garbage_collection),
    {Reductions, _} = erlang:statistics(reductions),
    {Runtime, _} = erlang:statistics(runtime),
    {Wall, _} = erlang:statistics(wall_clock),
    Statistics = [{bytes_received, Input},
                  {bytes_output, Output},
                  {context_switches, Switches},
                  {gcs, Gcs},
                  {words_reclaimed, Words},
                  {reductions, Reductions},
                  {runtime_ms, Runtime},
                  {wall_clock_ms, Wall},
                  {run_queue, erlang:statistics(run_queue)},
                  %% The normal run queues, then the dirty CPU and the
                  %% dirty I/O queue.
                  {run_queue_lengths, erlang:statistics(run_queue_lengths_all)}],
    Dets = case ets:info(dets_registry, size) of
               undefined -> 0;
               Size -> Size
           end,
    %% Each match specification compiled once a scrape, not once a type
    %% (compiling them for each of ten types was 2 ms of the 4).
    Trim = ets:match_spec_compile(
             [{{'$1', '$2', '_', '$3'},
               [{'orelse', {'=:=', '$1', carriers},
                 {'=:=', '$1', carriers_size}}],
               [{{'$1', '$2', '$3'}}]},
              {{'$1', '$2'},
               [{'orelse', {'=:=', '$1', carriers},
                 {'=:=', '$1', carriers_size}}],
               [{{'$1', '$2', '$2'}}]},
              {{blocks, '$1'}, [{is_list, '$1'}], [{{blocks, '$1'}}]}]),
    Second = ets:match_spec_compile([{{'_', '$1'}, [], ['$1']},
                                     {false, [], [{const, []}]}]),
    Instance = ets:match_spec_compile([{{instance, '$1', '$2'}, [],
                                        [{{'$1', '$2'}}]}]),
    %% Of each instance's properties, those of one kind of carrier,
    %% trimmed ({Name, Current, LastMax, Max} or {Name, Current} become
    %% {Name, Current, Max}; the blocks per type stay as they are).
    Kind = fun(Key, Props) ->
                   Count = erlang:length(Props),
                   Found = lists:zipwith3(fun lists:keyfind/3,
                                          lists:duplicate(Count, Key),
                                          lists:duplicate(Count, 1),
                                          Props),
                   lists:zipwith(fun ets:match_spec_run/2,
                                 ets:match_spec_run(Found, Second),
                                 lists:duplicate(Count, Trim))
           end,
    %% Every type's instances in one list, each call below made once for
    %% all of them: a loop over the types made by erl_eval cost 2.3 ms of
    %% interpretation on 2 schedulers (ten types), more than the rest.
    Read = ets:match_spec_run(
             [{Alloc, erlang:system_info({allocator, Alloc})}
              || Alloc <- erlang:system_info(alloc_util_allocators)],
             ets:match_spec_compile([{{'_', '$1'}, [{is_list, '$1'}],
                                      ['$_']}])),
    {Types, PerType} = lists:unzip(Read),
    PerTypeInstances = lists:zipwith(fun ets:match_spec_run/2, PerType,
                                     lists:duplicate(erlang:length(PerType),
                                                     Instance)),
    {Numbers, Props} = lists:unzip(lists:append(PerTypeInstances)),
    Allocators = #{types => Types,
                   counts => lists:map(fun erlang:length/1,
                                       PerTypeInstances),
                   instances => Numbers,
                   mbcs => Kind(mbcs, Props),
                   mbcs_pool => Kind(mbcs_pool, Props),
                   sbcs => Kind(sbcs, Props)},
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               List -> List
           end,
    #{memory => erlang:memory(),
      system => System,
      statistics => Statistics,
      dets_tables => Dets,
      our_processes => erlang:length(lists:filter(fun erlang:is_pid/1, Ours)),
      our_ports => erlang:length(lists:filter(fun erlang:is_port/1, Ours)),
      allocators => Allocators,
      rss => Rss(),
      scrape_us => erlang:monotonic_time(microsecond) - Started}.

%% The N largest processes by memory, by refc binary bytes (each binary
%% once) and by message queue length, from one pass in pmap's slices,
%% each slice ranking its own (values/3 and top/2 are compiled calls per
%% slice), described as proc-count describes its rows. Holders: the Holders largest binary
%% holders with their reductions, by which the exporter tells from one
%% scrape to the next which of them did not run.
-spec top(pos_integer(), non_neg_integer(), non_neg_integer(), fun(), fun(),
          fun(), fun(), fun()) ->
          #{scanned := non_neg_integer(),
            memory := beam_probe_lib:rows(),
            binary_memory := beam_probe_lib:rows(),
            message_queue_len := beam_probe_lib:rows(),
            holders := [{non_neg_integer(), pid(), term()}],
            scan_us := non_neg_integer()}.
top(N, Holders, Jobs, Pmap, Values, Top, Describe, Others) ->
    Started = erlang:monotonic_time(microsecond),
    %% Each slice's four tops join those of the slices before it, in
    %% process order: the node holds four tops, not four a slice.
    Limits = [N, N, N, Holders],
    {[MemoryTop, BinaryTop, QueueTop, HeldTop], Scanned} =
        Pmap(fun(Slice) ->
                     %% Each binary once (binary_distinct), as top
                     %% ranks: recon's per-reference sum showed one
                     %% RabbitMQ queue at 928.6 GiB on a node of 1.1 GiB
                     %% (issue 38).
                     Binary = Values(binary_distinct, Slice, false),
                     [Top(Values(memory, Slice, true), N),
                      Top(Binary, N),
                      Top(Values(message_queue_len, Slice, true), N),
                      Top(Binary, Holders)]
             end,
             fun(SliceTops, Kept) ->
                     lists:zipwith3(fun(Mine, Before, Limit) ->
                                            Top(Before ++ Mine, Limit)
                                    end,
                                    SliceTops, Kept, Limits)
             end,
             [[], [], [], []], Others(), Jobs),
    {HeldBytes, HeldPids} = lists:unzip(HeldTop),
    Reductions = lists:zipwith(fun erlang:process_info/2, HeldPids,
                               lists:duplicate(erlang:length(HeldPids),
                                               reductions)),
    #{scanned => Scanned,
      memory => Describe(MemoryTop),
      binary_memory => Describe(BinaryTop),
      message_queue_len => Describe(QueueTop),
      holders => lists:zip3(HeldBytes, HeldPids, Reductions),
      scan_us => erlang:monotonic_time(microsecond) - Started}.
