%% What `beam-probe ets` (and check's top_ets_memory) ask the node: its
%% largest ETS tables.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl. The pass over every table is compiled calls
%% (ets:info/2 through lists:zipwith, a match specification to drop the
%% tables that vanished meanwhile, whose info is 'undefined'); only the N
%% chosen tables are described, with their owners.
-module(beam_probe_ets).

-export([largest/2, top_memory/0]).

-type table() :: #{id := ets:tid() | atom(),
                   info := [{atom(), term()}],
                   owner := [{atom(), term()}] | undefined}.
-type report() :: #{tables := non_neg_integer(),
                    total_words := non_neg_integer(),
                    wordsize := pos_integer(),
                    largest := [table()]}.

%% The N largest tables by Sort (memory, in words, or size, in objects),
%% largest first, each with its full ets:info/1 and its owner's name and
%% group inputs (registered_name, initial_call, and where the node has
%% them, label and the single dictionary key '$initial_call': never the
%% whole dictionary).
-spec largest(pos_integer(), memory | size) -> report().
largest(N, Sort) ->
    All = ets:all(),
    Live = fun(Item) ->
                   Values = lists:zipwith(fun ets:info/2, All,
                                          lists:duplicate(erlang:length(All),
                                                          Item)),
                   ets:match_spec_run(lists:zip(Values, All),
                                      ets:match_spec_compile(
                                        [{{'$1', '_'}, [{is_integer, '$1'}],
                                          ['$_']}]))
           end,
    Ranked = lists:sublist(lists:reverse(lists:sort(Live(Sort))), N),
    {Words, _} = lists:unzip(Live(memory)),
    Supported = fun(Item) ->
                        try erlang:process_info(erlang:self(), Item) of
                            _ -> [Item]
                        catch
                            error:badarg -> []
                        end
                end,
    Items = [registered_name, initial_call]
        ++ Supported(label) ++ Supported({dictionary, '$initial_call'}),
    %% The label and the single key are copied whole, however large (any
    %% process may put any term there): read only from an owner whose
    %% heap, which bounds them, is within 64 MiB (beam_probe_lib's
    %% describe/1 cap a copy), and kept only up to 1,024 bytes each, as
    %% every name (a 16 KB '$initial_call' was printed whole as the
    %% owner's group).
    Wordsize = erlang:system_info(wordsize),
    Owned = fun(Owner) ->
                    case erlang:process_info(Owner, total_heap_size) of
                        {total_heap_size, Heap}
                          when Heap * Wordsize =< 64 * 1024 * 1024 ->
                            case erlang:process_info(Owner, Items) of
                                undefined ->
                                    undefined;
                                Got ->
                                    [Pair || {_, Value} = Pair <- Got,
                                             erlang:external_size(Value)
                                                 =< 1024]
                            end;
                        {total_heap_size, _} ->
                            erlang:process_info(
                              Owner, [registered_name, initial_call]);
                        undefined ->
                            undefined
                    end
            end,
    Describe = fun(Table) ->
                       case ets:info(Table) of
                           undefined ->
                               [];
                           Info ->
                               {owner, Owner} = lists:keyfind(owner, 1, Info),
                               [#{id => Table,
                                  info => Info,
                                  owner => Owned(Owner)}]
                       end
               end,
    #{tables => erlang:length(All),
      total_words => lists:sum(Words),
      wordsize => erlang:system_info(wordsize),
      largest => lists:append([Describe(Table) || {_, Table} <- Ranked])}.

%% The memory of the largest table, in bytes (0 without tables).
-spec top_memory() -> non_neg_integer().
top_memory() ->
    All = ets:all(),
    Words = lists:zipwith(fun ets:info/2, All,
                          lists:duplicate(erlang:length(All), memory)),
    %% A table gone meanwhile answers 'undefined', which would sort above
    %% every number.
    lists:max([0 | lists:filter(fun erlang:is_integer/1, Words)])
        * erlang:system_info(wordsize).
