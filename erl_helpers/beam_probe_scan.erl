%% What beam-probe runs on the node it inspects.
%%
%% This module is never compiled or loaded on the target. beam-probe sends
%% the text of one function at a time; the target's own erl_scan and
%% erl_parse read it and erl_eval runs it. So, by rule:
%%
%%   * only stock OTP modules are called, always as Module:Function;
%%   * no function here calls another function of this module;
%%   * per-process work is done by stock compiled functions taking external
%%     funs (lists:zipwith(fun erlang:process_info/2, ...)), never by a fun
%%     written here, because erl_eval interprets a fun for every element
%%     (about 1.4x the cost of recon's compiled loop over a million
%%     processes, measured). erlang:max/2 against a neutral value of the
%%     expected shape absorbs the 'undefined' of a process that died.
%%
%% The module compiles, so erlc checks the syntax (the test suite does).
-module(beam_probe_scan).

-export([bin_leak/1, proc_count/2, describe/1]).

%% Count every process's refc binary references, garbage-collect only the
%% processes that hold any (one that holds none cannot free any), count
%% again. At most MaxGc processes are collected, those holding most first.
%% Returns {Scanned, Holders, Collected, MemoryBefore, MemoryAfter,
%%          [{Pid, CountBefore, CountAfter}]} for the collected processes.
bin_leak(MaxGc) ->
    %% A fun bound once: erl_eval interprets its few calls per use, while the
    %% per-process work inside them stays compiled.
    CountBinaries =
        fun(Pids) ->
                Len = erlang:length(Pids),
                Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                                      lists:duplicate(Len, binary)),
                Safe = lists:zipwith(fun erlang:max/2, Infos,
                                     lists:duplicate(Len, {binary, []})),
                lists:map(fun erlang:length/1,
                          lists:zipwith(fun erlang:element/2,
                                        lists:duplicate(Len, 2), Safe))
        end,
    Pids = erlang:processes(),
    Scanned = erlang:length(Pids),
    Counts = CountBinaries(Pids),
    Holds = lists:zipwith(fun erlang:'>'/2, Counts,
                          lists:duplicate(Scanned, 0)),
    Holders = proplists:get_all_values(true,
                                       lists:zip(Holds,
                                                 lists:zip(Counts, Pids))),
    Chosen = lists:sublist(lists:reverse(lists:sort(Holders)), MaxGc),
    {Before, Victims} = lists:unzip(Chosen),
    MemoryBefore = erlang:memory(),
    lists:foreach(fun erlang:garbage_collect/1, Victims),
    MemoryAfter = erlang:memory(),
    After = CountBinaries(Victims),
    {Scanned, erlang:length(Holders), erlang:length(Victims), MemoryBefore,
     MemoryAfter, lists:zip3(Victims, Before, After)}.

%% The N processes with the largest Attribute: any integer-valued
%% process_info item, or binary_memory (the summed sizes of the refc
%% binaries a process references, counted for binary holders only).
%% Returns {Scanned, [{Pid, Value}]}: every process strictly above the
%% N-th largest value, then enough of those equal to it to make N.
proc_count(Attribute, N) ->
    Pids = erlang:processes(),
    Scanned = erlang:length(Pids),
    Item = case Attribute of
               binary_memory -> binary;
               _ -> Attribute
           end,
    Neutral = case Attribute of
                  binary_memory -> {binary, []};
                  _ -> {Attribute, 0}
              end,
    Infos = lists:zipwith(fun erlang:process_info/2, Pids,
                          lists:duplicate(Scanned, Item)),
    Safe = lists:zipwith(fun erlang:max/2, Infos,
                         lists:duplicate(Scanned, Neutral)),
    Raw = lists:zipwith(fun erlang:element/2,
                        lists:duplicate(Scanned, 2), Safe),
    {Candidates, Values} =
        case Attribute of
            binary_memory ->
                Holds = lists:zipwith(fun erlang:'>'/2,
                                      lists:map(fun erlang:length/1, Raw),
                                      lists:duplicate(Scanned, 0)),
                Held = proplists:get_all_values(true,
                                                lists:zip(Holds,
                                                          lists:zip(Pids, Raw))),
                {HeldPids, HeldLists} = lists:unzip(Held),
                Triples = lists:map(fun lists:unzip3/1, HeldLists),
                Sizes = lists:zipwith(fun erlang:element/2,
                                      lists:duplicate(erlang:length(Triples), 2),
                                      Triples),
                {HeldPids, lists:map(fun lists:sum/1, Sizes)};
            _ ->
                {Pids, Raw}
        end,
    Count = erlang:length(Values),
    Sorted = lists:sort(Values),
    Threshold = case Count of
                    0 -> 0;
                    _ -> lists:nth(erlang:max(1, Count - N + 1), Sorted)
                end,
    Pairs = lists:zip(Candidates, Values),
    Above = proplists:get_all_values(true,
                                     lists:zip(lists:zipwith(fun erlang:'>'/2,
                                                             Values,
                                                             lists:duplicate(Count, Threshold)),
                                               Pairs)),
    Equal = proplists:get_all_values(true,
                                     lists:zip(lists:zipwith(fun erlang:'=:='/2,
                                                             Values,
                                                             lists:duplicate(Count, Threshold)),
                                               Pairs)),
    {Scanned, Above ++ lists:sublist(Equal, erlang:max(0, N - erlang:length(Above)))}.

%% Name and location of a few processes, for display: registered name,
%% current function, initial call. 'undefined' for a process that died.
%% Never the dictionary or the mailbox.
describe(Pids) ->
    lists:zipwith(fun erlang:process_info/2, Pids,
                  lists:duplicate(erlang:length(Pids),
                                  [registered_name, current_function,
                                   initial_call])).
