%% An in-node reference implementation of recon's bin_leak/1 and
%% proc_count/2, written here from their documented behaviour, for tests and
%% benchmarks only. It is compiled code running inside the node, the way
%% recon runs, and is the yardstick beam-probe's answers and speed are held
%% to.
-module(beam_probe_reference).

-export([bin_leak/1, proc_count/2, alloc_sums/0]).

%% For each process: its binary references, a GC, the references again.
%% The N processes whose count fell most, as {Pid, -Freed}.
bin_leak(N) ->
    Deltas = [{Pid, freed(Pid)} || Pid <- processes()],
    Top = lists:sublist(lists:reverse(lists:keysort(2, Deltas)), N),
    [{Pid, -Freed} || {Pid, Freed} <- Top].

freed(Pid) ->
    case process_info(Pid, binary) of
        {binary, Before} ->
            erlang:garbage_collect(Pid),
            case process_info(Pid, binary) of
                {binary, After} -> length(Before) - length(After);
                undefined -> 0
            end;
        undefined ->
            0
    end.

%% The N processes with the largest Attribute, as {Pid, Value}. A process
%% that is gone, or exiting (processes/0 lists those too), is left out, as
%% recon_lib:proc_attrs/2 leaves it out: counted as 0, the processes of a
%% call that had just answered took the last places of a zero-valued tail.
proc_count(Attribute, N) ->
    Values = [{Pid, Value} || Pid <- processes(),
                              {ok, Value} <- [value(Pid, Attribute)]],
    lists:sublist(lists:reverse(lists:keysort(2, Values)), N).

value(Pid, binary_memory) ->
    case process_info(Pid, binary) of
        {binary, Bins} -> {ok, lists:sum([Size || {_, Size, _} <- Bins])};
        undefined -> gone
    end;
value(Pid, Attribute) ->
    case process_info(Pid, Attribute) of
        {Attribute, Value} -> {ok, Value};
        undefined -> gone
    end.

%% Per allocator type, {Type, Used, Allocated} in bytes, from
%% erlang:system_info({allocator_sizes, Type}) (another view than the one
%% beam-probe folds): block sizes and carrier sizes of every instance's
%% mbcs, mbcs_pool and sbcs.
alloc_sums() ->
    [{Type, sum(Sizes, size), sum(Sizes, carriers_size)}
     || Type <- erlang:system_info(alloc_util_allocators),
        Sizes <- [erlang:system_info({allocator_sizes, Type})],
        is_list(Sizes)].

sum(Instances, Key) ->
    lists:sum([current(Counter)
               || {instance, _, Kinds} <- Instances,
                  {Kind, Props} <- Kinds,
                  lists:member(Kind, [mbcs, mbcs_pool, sbcs]),
                  Counter <- counters(Key, Props)]).

counters(size, Props) ->
    [C || {blocks, PerType} <- Props, is_list(PerType),
          {_, Cs} <- PerType, C <- Cs, element(1, C) =:= size];
counters(carriers_size, Props) ->
    [C || C <- Props, element(1, C) =:= carriers_size].

current({_, C}) -> C;
current({_, C, _, _}) -> C.
