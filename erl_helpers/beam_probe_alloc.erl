%% What `beam-probe alloc` (and check's allocator figures) ask the node:
%% leak or fragmentation, recon_alloc's question, from outside.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl. Nothing here walks the processes: one read of
%% erlang:system_info({allocator, Type}) per allocator type, folded on the
%% node, so the reply is a few hundred bytes whatever the number of
%% schedulers (the raw data is ~35 KB on 2 schedulers and ~0.7 MB on 64,
%% one instance per scheduler and type).
-module(beam_probe_alloc).

-export([alloc/3, types/0, rss/0]).

%% Eight numbers per kind of carrier, summed over the type's instances:
%% [Blocks, BlocksMax, BlockBytes, BlockBytesMax,
%%  Carriers, CarriersMax, CarrierBytes, CarrierBytesMax]
%% Current values and the maxima each instance has seen (their sum is an
%% upper bound: the instances did not peak at once).
-type counters() :: [non_neg_integer()].
-type figures() :: #{type := atom(),
                     instances := non_neg_integer(),
                     mbcs := counters(),
                     mbcs_pool := counters(),
                     sbcs := counters()}.
-type report() :: #{types := [figures()],
                    memory_total := non_neg_integer(),
                    rss := binary() | undefined,
                    mseg_hits := non_neg_integer(),
                    mseg_calls := non_neg_integer(),
                    wordsize := pos_integer(),
                    raw := binary() | none}.

%% Every alloc_util allocator type the node runs (a disabled one answers
%% 'false' and is left out), literal_alloc included (recon_alloc leaves it
%% out). Used and allocated come from the same read of each type, so used
%% never exceeds allocated (recon_alloc reads them apart: recon#55).
-spec types() -> [figures()].
types() ->
    Current = fun({_, C}) -> C;
                 ({_, C, _, _}) -> C;
                 (_) -> 0
              end,
    Max = fun({_, C}) -> C;
             ({_, _, _, M}) -> M;
             (_) -> 0
          end,
    Get = fun(Key, List) ->
                  case lists:keyfind(Key, 1, List) of
                      false -> {Key, 0};
                      Found -> Found
                  end
          end,
    %% One kind of carrier of one instance. Its blocks are listed per
    %% allocator type (OTP 23+): a pooled carrier may hold another type's.
    Section = fun(Props) ->
                      Blocks = case Get(blocks, Props) of
                                   {blocks, PerType} when is_list(PerType) ->
                                       [Counters || {_, Counters} <- PerType];
                                   _ ->
                                       []
                               end,
                      Of = fun(Key) -> [Get(Key, Cs) || Cs <- Blocks] end,
                      Carriers = Get(carriers, Props),
                      Size = Get(carriers_size, Props),
                      [lists:sum([Current(C) || C <- Of(count)]),
                       lists:sum([Max(C) || C <- Of(count)]),
                       lists:sum([Current(C) || C <- Of(size)]),
                       lists:sum([Max(C) || C <- Of(size)]),
                       Current(Carriers), Max(Carriers),
                       Current(Size), Max(Size)]
              end,
    Add = fun(A, B) -> lists:zipwith(fun erlang:'+'/2, A, B) end,
    Fold = fun(Type, Instances) ->
                   Props = [P || {instance, _, P} <- Instances],
                   Of = fun(Kind) ->
                                lists:foldl(Add, lists:duplicate(8, 0),
                                            [Section(S) || P <- Props,
                                                           {K, S} <- P,
                                                           K =:= Kind])
                        end,
                   #{type => Type,
                     instances => erlang:length(Props),
                     mbcs => Of(mbcs),
                     mbcs_pool => Of(mbcs_pool),
                     sbcs => Of(sbcs)}
           end,
    [Fold(Type, Instances)
     || Type <- erlang:system_info(alloc_util_allocators),
        Instances <- [erlang:system_info({allocator, Type})],
        is_list(Instances)].

%% The VmRSS line of the node's own /proc/self/status ("123456 kB"), read
%% by prim_file (no file server involved); 'undefined' off Linux.
-spec rss() -> binary() | undefined.
rss() ->
    case prim_file:read_file("/proc/self/status") of
        {ok, Status} ->
            case binary:split(Status, <<"VmRSS:">>) of
                [_, After] -> erlang:hd(binary:split(After, <<"\n">>));
                _ -> undefined
            end;
        _ ->
            undefined
    end.

%% The allocator report; with Raw, also every type's full
%% system_info({allocator, Type}) and mseg_alloc's, as one compressed
%% term_to_binary, for offline study. Types and Rss are types/0 and rss/0.
-spec alloc(boolean(), fun(), fun()) -> report().
alloc(Raw, Types, Rss) ->
    %% mseg_alloc's segment cache: hits of all its calls, summed over its
    %% instances (a call count is {Name, GigaCalls, Calls}).
    Mseg = case erlang:system_info({allocator, mseg_alloc}) of
               Instances when is_list(Instances) ->
                   [{Hits, Giga * 1000000000 + Ones}
                    || {instance, _, Props} <- Instances,
                       {memkind, Kind} <- Props,
                       {status, Status} <- Kind,
                       {cache_hits, Hits} <- Status,
                       {calls, Calls} <- Kind,
                       {mseg_alloc, Giga, Ones} <- Calls];
               _ ->
                   []
           end,
    {Hits, Calls} = lists:unzip(Mseg),
    Everything = fun() ->
                         Named = [mseg_alloc
                                  | erlang:system_info(alloc_util_allocators)],
                         erlang:term_to_binary(
                           [{Type, erlang:system_info({allocator, Type})}
                            || Type <- Named],
                           [{compressed, 6}])
                 end,
    #{types => Types(),
      memory_total => erlang:memory(total),
      rss => Rss(),
      mseg_hits => lists:sum(Hits),
      mseg_calls => lists:sum(Calls),
      wordsize => erlang:system_info(wordsize),
      raw => case Raw of
                 true -> Everything();
                 false -> none
             end}.
