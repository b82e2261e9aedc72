%% What `beam-probe inspect` asks the node: which part of one process's
%% state, dictionary or mailbox holds its memory, and which family of keys
%% of one table does. Sizes and shapes only: a value is never sent back,
%% only its kind, its size, and keys short enough to name it (state holds
%% passwords).
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_lib.erl. The walk of a state runs *inside* the target, in
%% the fun that sys's replace_state request applies to it: the state is
%% never copied out (sys:get_state would copy all of it into the caller,
%% on a node that may be short of memory). The fun measures, sends its
%% small summary to our worker, and throws, which leaves a gen_server's
%% and a gen_statem's state as it was (sys documents it) and a gen_event
%% handler's too (gen_event catches per handler).
%%
%% The walk is interpreted (erl_eval, ~5-11 us a term here), so it visits
%% at most Budget terms and stops at a deadline; a container with more
%% elements than its share of the budget is sampled (evenly for tuples
%% and lists, the first entries in a map's hash order), its sizes
%% extrapolated, and the answer says so. Sizes come from the layout of
%% each term (a tuple is 1 + N words, a cons 2, a map 4 + 2N words up to
%% 32 keys and ~3.75 words a key above, measured) and from
%% erts_debug:flat_size/1 on leaves only, so no call of ours takes time in
%% proportion to the whole (flat_size never yields, and on a term that
%% shares subterms it takes exponential time).
-module(beam_probe_inspect).

-export([walker/1, process/5, table/3]).

-type step() :: {elem, pos_integer()} | {field, atom(), pos_integer()}
              | {key, term()} | keys | {list, pos_integer()} | list | env.
-type tree() :: #{kind := term(),
                  count := non_neg_integer(),
                  words := non_neg_integer(),
                  binary := non_neg_integer(),
                  children := [{step(), tree()}],
                  others := #{count := non_neg_integer(),
                              words := non_neg_integer(),
                              binary := non_neg_integer()}}.
%% A pinned binary group: the path pattern of the slices (map keys other
%% than atoms and list positions summarised), their count, the bytes they
%% use and the bytes they keep alive.
-type pin() :: {[step()], non_neg_integer(), non_neg_integer(),
                non_neg_integer()}.
-type walk() :: #{tree := tree(), pins := [pin()],
                  sampled := boolean(), late := boolean()}.
-type options() :: #{depth := non_neg_integer(),
                     width := pos_integer(),
                     budget := pos_integer(),
                     walk_ms := pos_integer(),
                     wait_ms := pos_integer(),
                     mailbox_most := non_neg_integer(),
                     copy_most := non_neg_integer(),
                     binaries_most := non_neg_integer()}.
-type inspector() :: fun((tuple()) -> term()).

%% The inspector: a named fun whose argument is a request tuple led by
%% the operation's name, dispatched through a map of one fun per
%% operation (the ways tried, measured, are in docs/CONTRIBUTING.md).
%%
%% Requests made from outside the walker:
%%   {measure, Term, Budget, DeadlineMs} -> walk()
%%   {inside, ReplyTo, Ref, Budget, DeadlineMs, Kind} -> the fun for
%%       sys's replace_state: the state's parts and, once, the dictionary
%%       measured where they are, each sent to ReplyTo as {Ref, self(),
%%       Part, walk(), none, 0}, then {Ref, self(), paused, none, none,
%%       Microseconds} (a failure as {Ref, self(), failed, {Class,
%%       Reason, Where}, none, Microseconds}); then it throws. It
%%       measures nothing when ReplyTo is gone or the deadline has passed
%%       (a late system message, after we gave up).
%%   {dictionary, Entries, Budget, DeadlineMs} -> walk()
%%   {objects, [{Key, Object}], Keypos, Acc} -> a table chunk's tally
-spec walker(options()) -> inspector().
walker(Options) ->
    #{depth := Depth, width := Width} = Options,
    %% Compiled match specifications do the per-element work of a
    %% container in one compiled pass each (ets:match_spec_run/2), as
    %% lists:map/2 does with the BIFs. erl_eval keeps its bindings in an
    %% orddict on OTP 25 and merges them after every case: a clause with
    %% thirty variables cost ~1 ms a container (measured), so the walk
    %% is many small clauses, each with few variables, and elements are
    %% never visited one at a time by interpreted code.
    Ms = fun ets:match_spec_compile/1,
    Nested = fun(V) -> [{'orelse', {is_tuple, V}, {is_map, V},
                         {is_function, V},
                         {'andalso', {is_list, V}, {'=/=', V, []}}}]
             end,
    %% A leaf as itself, a container as 0 (whose flat_size is 0): so
    %% erts_debug:flat_size/1 is never applied to a container, whose flat
    %% size may be far larger than what it holds (shared subterms), and
    %% its time with it.
    LeafOnly = Ms([{'$1', Nested('$1'), [0]}, {'$1', [], ['$1']}]),
    %% The binaries among {J, P, Value} (J the ordinal in the sample, P
    %% the position): binary:referenced_byte_size/1 is applied to them
    %% alone (OTP 27 gives 256 for a literal <<>>).
    Binaries = Ms([{{'$1', '$2', '$3'}, [{is_binary, '$3'}],
                    [{{'$1', '$2', '$3'}}]}]),
    Third = Ms([{{'_', '_', '$1'}, [], ['$1']}]),
    FirstTwo = Ms([{{'$1', '$2', '_'}, [], [{{'$1', '$2'}}]}]),
    %% Over {{J, P}, Size, Referenced}: binaries up to 64 bytes live on
    %% the heap (flat_size counts them), larger ones off it; OTP's rule
    %% for a slice worth copying: it keeps alive more than twice its own
    %% size.
    OffHeap = Ms([{{{'$1', '_'}, '_', '$3'}, [{'>', '$3', 64}],
                   [{{'$1', '$3'}}]}]),
    Pinned = Ms([{{{'_', '$1'}, '$2', '$3'},
                  [{'>', '$3', 64}, {'>', '$3', {'*', 2, '$2'}}],
                  [{{'$1', '$2', '$3'}}]}]),
    %% The ordinals of the containers among {J, Value}: never the
    %% containers themselves, as ets:match_spec_run/2 copies what it
    %% returns into the caller's heap (a whole subterm, in the target).
    Containers = Ms([{{'$1', '$2'}, Nested('$2'), ['$1']}]),
    Bytes = Ms([{'$1', [], [{'*', '$1', 8}]}]),
    PinnedRows = Ms([{{'$1', '$2', '$3'},
                      [{'>', '$3', 64}, {'>', '$3', {'*', 2, '$2'}}],
                      ['$_']}]),
    %% Counts shared by every walk of one request, the target's and our
    %% worker's (a counters reference names the same counters wherever
    %% it is copied on the node): 1, words sized by size_shared so far;
    %% 2, parts not measured in full; 3, when a gen_event's first handler
    %% was walked (system time, ms); 4, handlers not walked at all.
    Meter = case Options of
                #{meter := Given} -> Given;
                _ -> counters:new(4, [])
            end,
    Config = {Depth, Width, LeafOnly, Binaries, Third, FirstTwo, OffHeap,
              Pinned, Containers, Bytes, PinnedRows,
              maps:get(shared_most, Options, 0), Meter,
              maps:get(list_most, Options, 1000000)},
    %% Each operation is a fun (Inspect, Config, Request); no variable
    %% inside one may share a name with one above (erl_eval would take it
    %% as bound), and each is made again below with no bindings at all.
    %%
    %% A walk gives {Tree, Pins, Left, Sampled, Late}. Tree is {Kind,
    %% Count, Words, Binary, Children, Others}, children (the Width
    %% largest, Others the rest) down to Depth levels. Left is what
    %% remains of the budget of terms: a container takes as many
    %% children as its share allows (a map entry is worth eight terms,
    %% any other child four; a small tuple, a pair or a short record, is
    %% taken whole: sampling one of a pair misses half), and each nested
    %% container at most its fair share of what its elder siblings left.
    Ops = #{
          walk =>
              fun(Inspect, _, {walk, [_ | _] = T, Level, Left, Path,
                               Deadline}) ->
                  Inspect({container, T, Level, Left, Path, Deadline});
                 (Inspect, _, {walk, T, Level, Left, Path, Deadline})
                when erlang:is_tuple(T); erlang:is_map(T) ->
                  Inspect({container, T, Level, Left, Path, Deadline});
                 (Inspect, _, {walk, T, Level, Left, Path, Deadline})
                when erlang:is_function(T) ->
                  Inspect({walk_fun, erlang:fun_info(T, type), T, Level, Left,
                           Path, Deadline});
                 (Inspect, _, {walk, T, _, Left, Path, _}) ->
                  Inspect({leaf, T, Left, Path})
              end,
          walk_fun =>
              fun(Inspect, _, {walk_fun, {type, local}, T, Level, Left, Path,
                               Deadline}) ->
                  Inspect({container, T, Level, Left, Path, Deadline});
                 (Inspect, _, {walk_fun, _, T, _, Left, Path, _}) ->
                  Inspect({leaf, T, Left, Path})
              end,
          %% A term alone that is no container (a root, an external fun).
          leaf =>
              fun(Inspect, _, {leaf, T, Left, Path}) ->
                  {_, W, B, Pins, _, _} =
                      Inspect({leaves, [T], [1], Path, root}),
                  {{Inspect({kind, T}), 0, W, B, [], {0, 0, 0}}, Pins, Left - 1,
                   false, false}
              end,
          %% A container costs 16 terms of the budget (walking one takes
          %% ~0.5-1 ms of erl_eval on OTP 25 here, a leaf ~1 us in the
          %% compiled passes), and samples at most as many elements as
          %% what is left, 4,096 at most; a small tuple (a pair, a short
          %% record) is taken whole: sampling one of a pair misses half.
          container =>
              fun(Inspect, _, {container, T, Level, Left, Path, Deadline}) ->
                      {N, Own} = Inspect({shape, T}),
                      K = Inspect({k, erlang:monotonic_time(millisecond)
                                   > Deadline, Left, N, erlang:is_map(T)}),
                      Inspect({sample, K, T, N, Own, Level, Left - 48, Path,
                               Deadline})
              end,
          %% A map's entries are taken one by one (maps:next/1 through
          %% erl_eval), so a map samples a quarter as many, 1,024 at most.
          k =>
              fun(_, _, {k, true, _, _, _}) -> late;
                 (_, _, {k, _, Left, _, _}) when Left < 48 -> 0;
                 (_, _, {k, _, Left, N, true}) ->
                      erlang:min(N, erlang:max(erlang:min(N, 4),
                                               erlang:min(256,
                                                          (Left - 48) div 4)));
                 (_, _, {k, _, Left, N, false}) ->
                      erlang:min(N, erlang:max(erlang:min(N, 4),
                                               erlang:min(1024, Left - 48)))
              end,
          %% The sampled children, as groups {Values, Positions, Spec}; a
          %% map's keys and values are two groups whose positions are the
          %% entries'. Spec names their steps ({step, Spec, Position}).
          sample =>
              fun(Inspect, Cfg, {sample, late, T, N, Own, _, Left, _, _}) ->
                  counters:add(erlang:element(13, Cfg), 2, 1),
                  {{Inspect({kind, T}), N, Own, 0, [], {N, 0, 0}}, #{}, Left,
                   N > 0, true};
                 (Inspect, _, {sample, 0, T, N, Own, _, Left, _, _}) ->
                  %% The part's kind says when its words are its own only.
                  {Words, Kind} = Inspect({rest, T, Own}),
                  {{Kind, N, Words, 0, [], {N, 0, 0}}, #{}, Left, N > 0,
                   false};
                 (Inspect, _, {sample, K, T, N, Own, Level, Left, Path,
                               Deadline})
                when erlang:is_map(T) ->
                  {Keys, Values} = Inspect({entries, K >= N, T, K}),
                  Idx = lists:seq(1, erlang:length(Keys)),
                  Inspect({groups, T, N, Own, Level, Left, Path, Deadline,
                           [{Keys, Idx, keys}, {Values, Idx, {values, Keys}}]});
                 (Inspect, _, {sample, K, T, N, Own, Level, Left, Path,
                               Deadline})
                when erlang:is_tuple(T) ->
                  Stride = erlang:max(1, N div K),
                  Idx = lists:seq(1, erlang:min(N, Stride * K), Stride),
                  Inspect({groups, T, N, Own, Level, Left, Path, Deadline,
                           [{Inspect({elements, Stride, T, Idx}), Idx,
                             Inspect({tuple_spec, erlang:element(1, T), N})}]});
                 (Inspect, _, {sample, K, T, N, Own, Level, Left, Path,
                               Deadline})
                when erlang:is_list(T) ->
                  %% An improper list (Own 0) is read cell by cell.
                  {Values, Idx} = Inspect({list_sample, Own > 0 andalso N > K,
                                           T, K, N}),
                  Inspect({groups, T, N, Own, Level, Left, Path, Deadline,
                           [{Values, Idx, list}]});
                 (Inspect, _, {sample, K, T, N, Own, Level, Left, Path,
                               Deadline}) ->
                  {env, Env} = erlang:fun_info(T, env),
                  Values = lists:sublist(Env, K),
                  Inspect({groups, T, N, Own, Level, Left, Path, Deadline,
                           [{Values, lists:seq(1, erlang:length(Values)),
                             env}]})
              end,
          %% The budget is spent: the rest of this part is sized by
          %% erts_debug:size_shared/1 (C, never yields, linear in what
          %% the part holds, shared subterms once: at most the heap; 78-86
          %% ms on a heap of 10.7M words, the tester measured), while
          %% the request's calls of it have sized fewer than shared_most
          %% words (0 for a heap over it): so at most twice shared_most
          %% in all. Else the part is not measured in full: only its own
          %% words count, its kind is {not_measured, Kind}, and the answer
          %% says so.
          rest =>
              fun(Inspect, Cfg, {rest, T, Own}) ->
                  Sized = counters:get(erlang:element(13, Cfg), 1),
                  case Sized < erlang:element(12, Cfg) of
                      true ->
                          Words0 = erts_debug:size_shared(T),
                          counters:add(erlang:element(13, Cfg), 1, Words0),
                          {Words0, Inspect({kind, T})};
                      false ->
                          counters:add(erlang:element(13, Cfg), 2, 1),
                          {Own, {not_measured, Inspect({kind, T})}}
                  end
              end,
          entries =>
              fun(_, _, {entries, true, T, _}) ->
                  lists:unzip(maps:to_list(T));
                 (Inspect, _, {entries, false, T, K}) ->
                  Inspect({next, maps:next(maps:iterator(T)), K, [], []})
              end,
          next =>
              fun(Inspect, _, {next, {Key, Value, More}, Left, Keys, Values})
                when Left > 0 ->
                  Inspect({next, maps:next(More), Left - 1, [Key | Keys],
                           [Value | Values]});
                 (_, _, {next, _, _, Keys, Values}) ->
                  {lists:reverse(Keys), lists:reverse(Values)}
              end,
          elements =>
              fun(_, _, {elements, 1, T, Idx}) ->
                  lists:sublist(erlang:tuple_to_list(T), erlang:length(Idx));
                 (_, _, {elements, _, T, Idx}) ->
                  [erlang:element(I, T) || I <- Idx]
              end,
          tuple_spec =>
              fun(_, _, {tuple_spec, Tag, N}) when erlang:is_atom(Tag), N > 1 ->
                  {field, Tag};
                 (_, _, {tuple_spec, _, _}) ->
                  elem
              end,
          %% A list's sample, {Values, Positions}: all of it, or its first
          %% K cells when improper; else K elements of its N (N is at most
          %% list_most) in 16 runs spread evenly, each taken and skipped
          %% in compiled code (lists:sublist/2, lists:nthtail/2): one
          %% interpreted step a run. One a sampled element made 2.4M
          %% words of garbage on the target's heap at the default budget
          %% (erl_eval leaves ~2,500 words a call), enough to make a
          %% large young heap collect.
          list_sample =>
              fun(Inspect, _, {list_sample, true, T, K, N}) ->
                  Runs = erlang:min(16, K),
                  Inspect({runs, T, 0, Runs, K div Runs, N div Runs, [],
                           []});
                 (Inspect, _, {list_sample, false, T, K, _}) ->
                  Values = Inspect({every, 1, T, K, K}),
                  {Values, lists:seq(1, erlang:length(Values))}
              end,
          runs =>
              fun(_, _, {runs, _, _, 0, _, _, Values, Idx}) ->
                  {lists:append(lists:reverse(Values)),
                   lists:append(lists:reverse(Idx))};
                 (Inspect, _, {runs, T, At, Runs, Len, Gap, Values, Idx}) ->
                  Run = lists:sublist(T, Len),
                  Inspect({runs, case Runs > 1 of
                                     true -> lists:nthtail(Gap, T);
                                     false -> []
                                 end, At + Gap, Runs - 1, Len, Gap,
                           [Run | Values],
                           [lists:seq(At + 1, At + erlang:length(Run))
                            | Idx]})
              end,
          %% The first K cells (compiled when the list is proper).
          every =>
              fun(Inspect, _, {every, 1, T, K, _}) ->
                  try lists:sublist(T, K)
                  catch error:_ -> Inspect({cells_of, T, K, []})
                  end
              end,
          cells_of =>
              fun(Inspect, _, {cells_of, [H | T], K, Acc}) when K > 0 ->
                  Inspect({cells_of, T, K - 1, [H | Acc]});
                 (_, _, {cells_of, _, _, Acc}) ->
                  lists:reverse(Acc)
              end,
          %% A child's step on show, and in a pin's path (map keys other
          %% than atoms and list positions summarised there).
          step =>
              fun(_, _, {step, {field, Tag}, P}) -> {field, Tag, P};
                 (_, _, {step, elem, P}) -> {elem, P};
                 (_, _, {step, list, P}) -> {list, P};
                 (_, _, {step, Spec, _}) -> Spec
              end,
          pin =>
              fun(_, _, {pin, list, _}) -> list;
                 (Inspect, _, {pin, {values, Keys}, P}) ->
                  Inspect({pin_key, lists:nth(P, Keys)});
                 (_, _, {pin, root, _}) -> root;
                 (Inspect, _, {pin, Spec, P}) -> Inspect({step, Spec, P})
              end,
          pin_key =>
              fun(_, _, {pin_key, Key}) when erlang:is_atom(Key) -> {key, Key};
                 (_, _, {pin_key, _}) -> {key, '_'}
              end,
          %% Each group measured, then put together: sums extrapolated from
          %% the sample to all N elements; at a level on show, the Width
          %% largest elements (a map's key and value together) as children.
          groups =>
              fun(Inspect, _, {groups, T, N, Own, Level, Left, Path, Deadline,
                               Groups}) ->
                  Share = Left div erlang:length(Groups),
                  Inspect({assemble, T, N, Own, Level, Left,
                           [Inspect({group, Group, Level, Share, Path,
                                     Deadline})
                            || Group <- Groups],
                           erlang:length(erlang:element(2, erlang:hd(Groups)))})
              end,
          assemble =>
              fun(Inspect, Cfg, {assemble, T, N, Own, Level, Left, Measured,
                                 Taken}) ->
                  Factor = Inspect({factor, N, Taken}),
                  {W, B, Pins, Used, Sampled, Late} =
                      lists:foldl(fun({W1, B1, P1, U1, S1, L1, _},
                                      {W0, B0, P0, U0, S0, L0}) ->
                                          {W0 + W1, B0 + B1,
                                           Inspect({merge, P0, P1}), U0 + U1,
                                           S0 orelse S1, L0 orelse L1}
                                  end, {0, 0, #{}, 0, Taken < N,
                                        false}, Measured),
                  Top = Inspect({top, Level < erlang:element(1, Cfg),
                                 [S || {_, _, _, _, _, _, S} <- Measured]}),
                  {TW, TB} = lists:foldl(fun({_, {_, _, W1, B1, _, _}}, {W0,
                                                                         B0}) ->
                                                 {W0 + W1, B0 + B1}
                                         end, {0, 0}, Top),
                  {{Inspect({kind_at, Level =< erlang:element(1, Cfg), T}), N,
                    Own + W * Factor, B * Factor, Top,
                    {N - erlang:length(Top), W * Factor - TW, B * Factor - TB}},
                   Inspect({scale, Factor, Pins}), Left - Used, Sampled, Late}
              end,
          factor =>
              fun(_, _, {factor, _, 0}) -> 1.0;
                 (_, _, {factor, N, Taken}) -> N / Taken
              end,
          scale =>
              fun(_, _, {scale, 1.0, Pins}) -> Pins;
                 (_, _, {scale, Factor, Pins}) ->
                  maps:map(fun(_, {C, U, R}) ->
                                   {C * Factor, U * Factor, R * Factor}
                           end, Pins)
              end,
          kind_at =>
              fun(Inspect, _, {kind_at, true, T}) -> Inspect({kind, T});
                 (_, _, {kind_at, false, _}) -> container
              end,
          %% One group: {Words, Binary, Pins, Used, Sampled, Late,
          %% Shown}: its leaves in compiled passes, its containers walked
          %% one by one, as many as one per 32 terms of the group's
          %% share (16 for the container, the rest for its elements),
          %% spread evenly, their sums extrapolated to all of them;
          %% Shown, at a level on show, what the ranking needs.
          group =>
              fun(Inspect, _, {group, {Values, Idx, Spec}, Level, Left,
                               Path, Deadline}) ->
                  Inspect({grouping, Inspect({leaves, Values, Idx, Path,
                                              Spec}),
                           Values, Idx, Spec, Level, Left, Path, Deadline})
              end,
          %% A group of leaves alone (most are: a record of scalars, a
          %% pair) is done in one step more: each call of erl_eval costs
          %% ~2-8 KB of garbage in the target.
          grouping =>
              fun(_, Cfg, {grouping, {_, LW, LB, Pins0, [], _}, _, _, _,
                           Level, _, _, _})
                when Level >= erlang:element(1, Cfg) ->
                  {LW, LB, Pins0, 0, false, false, none};
                 (Inspect, _, {grouping, {Aligned, LW, LB, Pins0, [], Ranks},
                               Values, Idx, Spec, _, _, _, _}) ->
                  {LW, LB, Pins0, 0, false, false,
                   Inspect({shown, true, Spec, Values, Idx, Aligned, Ranks,
                            []})};
                 (Inspect, _, {grouping, {Aligned, LW, LB, Pins0, Inner,
                                          Ranks},
                               Values, Idx, Spec, Level, Left, Path,
                               Deadline}) ->
                  IdxT = erlang:list_to_tuple(Idx),
                  ValuesT = erlang:list_to_tuple(Values),
                  Chosen = [{erlang:element(J, IdxT),
                             erlang:element(J, ValuesT)}
                            || J <- Inspect({spread, Inner,
                                             erlang:max(erlang:min(
                                                          erlang:length(Inner),
                                                          2),
                                                        Left div 96)})],
                  Inspect({grouped, Level, Spec, Values, Idx, Aligned, LW, LB,
                           Pins0, Ranks,
                           Inspect({factor, erlang:length(Inner),
                                    erlang:length(Chosen)}),
                           erlang:length(Chosen) < erlang:length(Inner),
                           Inspect({nested, Chosen, Spec, Level, Left, Path,
                                    Deadline,
                                    erlang:max(1, erlang:length(Chosen)),
                                    {[], #{}, 0, false, false}})})
              end,
          grouped =>
              fun(Inspect, Cfg, {grouped, Level, Spec, Values, Idx, Aligned,
                                 LW, LB,
                                 Pins0, Ranks, Factor, Skipped,
                                 {Walked, Pins, Spent, Sampled, Late}}) ->
                      {LW + Factor * lists:sum([W || {_, W, _, _} <- Walked]),
                       LB + Factor * lists:sum([B || {_, _, B, _} <- Walked]),
                       Inspect({merge, Pins0, Inspect({scale, Factor, Pins})}),
                       Spent, Skipped orelse Sampled, Late,
                       Inspect({shown, Level < erlang:element(1, Cfg), Spec,
                                Values, Idx, Aligned, Ranks, Walked})}
              end,
          spread =>
              fun(_, _, {spread, List, K}) when erlang:length(List) =< K ->
                      List;
                 (_, _, {spread, List, K}) ->
                      Step = erlang:length(List) div K,
                      [Item || {I, Item} <- lists:zip(
                                               lists:seq(1, erlang:length(
                                                              List)),
                                               List),
                               I rem Step =:= 0]
              end,
          %% The leaves among Values (positions Idx): {[{Words, Binary,
          %% Position}] aligned with Values (0, 0 for a container), words,
          %% binary bytes, pins, [{Position, Container}], held aligned}.
          %% The leaves among Values (positions Idx) in compiled passes:
          %% {{Words as a tuple by ordinal J (0 for a container), #{J =>
          %% off-heap bytes}}, words, off-heap bytes, pins, [{Position,
          %% Container}], [{Held, J}] for ranking}.
          leaves =>
              fun(Inspect, Cfg, {leaves, Values, Idx, Path, Spec}) ->
                  Words = lists:map(fun erts_debug:flat_size/1,
                                    ets:match_spec_run(
                                      Values, erlang:element(3, Cfg))),
                  Js = lists:seq(1, erlang:length(Values)),
                  Rows = Inspect({binary_rows, lists:zip3(Js, Idx, Values)}),
                  Off = ets:match_spec_run(Rows, erlang:element(7, Cfg)),
                  Held = ets:match_spec_run(Words,
                                            erlang:element(10, Cfg)),
                  ByJ = erlang:list_to_tuple(Words),
                  {{ByJ, maps:from_list(Off)},
                   lists:sum(Words),
                   lists:sum([B || {_, B} <- Off]),
                   Inspect({pins, ets:match_spec_run(
                                    Rows, erlang:element(8, Cfg)),
                            Spec, Path, #{}}),
                   ets:match_spec_run(lists:zip(Js, Values),
                                      erlang:element(9, Cfg)),
                   lists:zip(Held, Js)
                   ++ [{erlang:element(J, ByJ) * 8 + B, J}
                       || {J, B} <- Off]}
              end,
          pins =>
              fun(_, _, {pins, [], _, _, Acc}) ->
                  Acc;
                 (Inspect, _, {pins, [{P, Size, Ref} | More], Spec, Path,
                               Acc}) ->
                  Inspect({pins, More, Spec, Path,
                           Inspect({merge, Acc,
                                    #{Inspect({pin_path, Inspect({pin, Spec,
                                                                  P}),
                                               Path}) => {1, Size, Ref}}})})
              end,
          pin_path =>
              fun(_, _, {pin_path, root, Path}) -> Path;
                 (_, _, {pin_path, Step, Path}) -> [Step | Path]
              end,
          nested =>
              fun(_, _, {nested, [], _, _, _, _, _, _, {Walked, Pins, Spent,
                                                        S, L}}) ->
                  {Walked, Pins, Spent, S, L};
                 (Inspect, _, {nested, [{P, Child} | More], Spec, Level, Left,
                               Path,
                       Deadline, Rest, Acc}) ->
                  Share = erlang:max(1, Left div Rest),
                  Inspect({nested_one, Inspect({walk, Child, Level + 1, Share,
                                                Inspect({pin_path,
                                                         Inspect({pin, Spec,
                                                                  P}),
                                                         Path}),
                                                Deadline}),
                           P, Share, More, Spec, Level, Left, Path, Deadline,
                           Rest, Acc})
              end,
          nested_one =>
              fun(Inspect, _, {nested_one, {{_, _, W, B, _, _} = Tree, P1, L2,
                                            S1, C1}, P,
                       Share, More, Spec, Level, Left, Path, Deadline, Rest,
                       {Walked, P0, Spent, S0, C0}}) ->
                  Inspect({nested, More, Spec, Level, Left - (Share - L2), Path,
                           Deadline, Rest - 1,
                           {[{P, W, B, Tree} | Walked], Inspect({merge, P0,
                                                                 P1}),
                            Spent + Share - L2, S0 orelse S1, C0 orelse C1}})
              end,
          %% What a group on show keeps for the ranking: its leaves'
          %% held bytes aligned with Values (compiled), and the walked
          %% containers by their ordinal J in Values.
          shown =>
              fun(_, _, {shown, false, _, _, _, _, _, _}) ->
                      none;
                 (_, _, {shown, true, Spec, Values, Idx, Aligned, Ranks,
                         Walked}) ->
                      Ordinal = maps:from_list(
                                  lists:zip(Idx, lists:seq(
                                                   1, erlang:length(Idx)))),
                      {Spec, Values, Idx, Aligned, Ranks,
                       maps:from_list([{maps:get(P, Ordinal),
                                        {W * 8 + B, Tree}}
                                       || {P, W, B, Tree} <- Walked])}
              end,
          %% The Width largest elements, ranked by what they hold (a map's
          %% key and value together) in compiled passes, each {Step,
          %% Tree}; only those shown are looked at one by one.
          top =>
              fun(_, _, {top, false, _}) ->
                      [];
                 (Inspect, Cfg, {top, true,
                                 [{keys, Keys, _, {KeyWords, KeyOff},
                                   _, KeyWalked},
                                  {_, Values, _, {Words, Off}, _,
                                   Walked}]}) ->
                      %% A map entry holds its key and its value.
                      Sums = erlang:list_to_tuple(
                               lists:zipwith(
                                 fun erlang:'+'/2,
                                 ets:match_spec_run(
                                   erlang:tuple_to_list(KeyWords),
                                   erlang:element(10, Cfg)),
                                 ets:match_spec_run(
                                   erlang:tuple_to_list(Words),
                                   erlang:element(10, Cfg)))),
                      Extra = [{erlang:element(J, Sums)
                                + maps:get(J, KeyOff, 0)
                                + maps:get(J, Off, 0)
                                + Inspect({walked_held, J, KeyWalked})
                                + Inspect({walked_held, J, Walked}), J}
                               || J <- lists:usort(maps:keys(KeyOff)
                                                   ++ maps:keys(Off)
                                                   ++ maps:keys(KeyWalked)
                                                   ++ maps:keys(Walked))],
                      [{{key, Inspect({short, lists:nth(J, Keys)})},
                        Inspect({add, Inspect({tree_at, J, Values,
                                               {Words, Off}, Walked}),
                                 Inspect({tree_at, J, Keys,
                                          {KeyWords, KeyOff},
                                          KeyWalked})})}
                       || {H, J} <- Inspect({best,
                                             lists:zip(
                                               erlang:tuple_to_list(Sums),
                                               lists:seq(1, erlang:tuple_size(
                                                              Sums)))
                                             ++ Extra,
                                             erlang:element(2, Cfg)}),
                          H > 0];
                 (Inspect, Cfg, {top, true,
                                 [{Spec, Values, Idx, Leaf, Ranking,
                                   Walked}]}) ->
                      [{Inspect({step, Spec, lists:nth(J, Idx)}),
                        Inspect({tree_at, J, Values, Leaf, Walked})}
                       || {H, J} <- Inspect({best,
                                             Ranking
                                             ++ [{H0, J0}
                                                 || {J0, {H0, _}}
                                                        <- maps:to_list(
                                                             Walked)],
                                             erlang:element(2, Cfg)}),
                          H > 0]
              end,
          %% The Width largest {Held, J}, each J once (a container's
          %% leaf entry is 0, its walked entry what it holds; a map
          %% entry's key may be both).
          best =>
              fun(_, _, {best, Candidates, Width0}) ->
                      lists:sublist(
                        lists:reverse(
                          lists:sort(
                            lists:ukeysort(
                              2, lists:reverse(lists:sort(Candidates))))),
                        Width0)
              end,
          walked_held =>
              fun(_, _, {walked_held, J, Walked}) ->
                      case Walked of
                          #{J := {H, _}} -> H;
                          _ -> 0
                      end
              end,
          tree_at =>
              fun(Inspect, _, {tree_at, J, Values, {Words, Off},
                               Walked}) ->
                      case Walked of
                          #{J := {_, Tree}} ->
                              Tree;
                          _ ->
                              {Inspect({kind, lists:nth(J, Values)}), 0,
                               erlang:element(J, Words),
                               maps:get(J, Off, 0), [], {0, 0, 0}}
                      end
              end,
          %% A map entry on show: its value's tree, with its key's bytes.
          add =>
              fun(_, _, {add, {Kind, C, W, B, Ch, O},
                         {_, _, KW, KB, _, _}}) ->
                      {Kind, C, W + KW, B + KB, Ch, O}
              end,
          kind =>
              fun(_, _, {kind, Term}) when erlang:is_map(Term) ->
                  case Term of
                      #{'__struct__' := S} when erlang:is_atom(S) -> {struct,
                                                                      S};
                      _ -> map
                  end;
                 (_, _, {kind, Term}) when erlang:is_tuple(Term),
                                         erlang:tuple_size(Term) > 1,
                                         erlang:is_atom(erlang:element(1,
                                                                       Term)) ->
                  {record, erlang:element(1, Term)};
                 (_, _, {kind, Term}) ->
                  if erlang:is_tuple(Term) -> tuple;
                     erlang:is_list(Term) -> list;
                     erlang:is_binary(Term) -> binary;
                     erlang:is_bitstring(Term) -> bitstring;
                     erlang:is_atom(Term) -> atom;
                     erlang:is_integer(Term) -> integer;
                     erlang:is_float(Term) -> float;
                     erlang:is_pid(Term) -> pid;
                     erlang:is_port(Term) -> port;
                     erlang:is_reference(Term) -> reference;
                     erlang:is_function(Term) -> 'fun';
                     true -> other
                  end
              end,
          %% A container's element count and its own words: its header and
          %% slots; what its elements point to is theirs.
          shape =>
              fun(_, _, {shape, Term}) when erlang:is_tuple(Term) ->
                  N = erlang:tuple_size(Term),
                  {N, 1 + N};
                 (_, _, {shape, Term}) when erlang:is_map(Term) ->
                  N = erlang:map_size(Term),
                  case N =< 32 of
                      true -> {N, 4 + 2 * N};
                      false -> {N, erlang:round(3.75 * N)}
                  end;
                 (Inspect, Cfg, {shape, Term}) when erlang:is_list(Term) ->
                  %% Never length/1 of a whole list: it is as slow as the
                  %% list is long whatever the budget (a list of a 320 MB
                  %% state paused its process 290-580 ms with the
                  %% sampling's nthtail). Counted to list_most cells in
                  %% compiled code (lists:nthtail/2 allocates nothing);
                  %% a longer list is measured over its first list_most
                  %% cells, and the answer says it was not measured in
                  %% full.
                  Most = erlang:element(14, Cfg),
                  try lists:nthtail(Most, Term) of
                      [] ->
                          {Most, 2 * Most};
                      _ ->
                          counters:add(erlang:element(13, Cfg), 2, 1),
                          {Most, 2 * Most}
                  catch
                      error:_ ->
                          try erlang:length(Term) of
                              N -> {N, 2 * N}
                          catch
                              %% An improper list: its cells, counted to
                              %% ten thousand.
                              error:badarg -> {Inspect({cells, Term, 0}), 0}
                          end
                  end;
                 (_, _, {shape, Term}) when erlang:is_function(Term) ->
                  {env, Env} = erlang:fun_info(Term, env),
                  {erlang:length(Env), 5 + erlang:length(Env)}
              end,
          merge =>
              fun(_, _, {merge, A, B}) ->
                  maps:fold(fun(K, {C, U, R}, Acc) ->
                                    case Acc of
                                        #{K := {C0, U0, R0}} ->
                                            Acc#{K => {C0 + C, U0 + U, R0 + R}};
                                        _ ->
                                            Acc#{K => {C, U, R}}
                                    end
                            end, A, B)
              end,
          %% A key short enough to name a part: an atom, a small integer,
          %% a printable binary's or string's first 16 characters, or a
          %% tuple of at most 4 of these ({user, 42}); an element that is
          %% itself a tuple is named by its kind ({record, resource} for
          %% a RabbitMQ #resource{}), so a key is never nested deeper
          %% than that; anything else by its kind.
          short =>
              fun(_, _, {short, Key}) when erlang:is_atom(Key) ->
                  Key;
                 (_, _, {short,
                         Key}) when erlang:is_integer(Key), Key > -1000000000,
                                         Key < 1000000000 ->
                  Key;
                 (_, _, {short, Key}) when erlang:is_binary(Key) ->
                  %% The first 16 bytes of a printable key: enough to name
                  %% most keys (user:42, a path, a module); a token kept
                  %% as a key shows its first 16 characters at most.
                  Cut = erlang:binary_part(
                          Key, 0, erlang:min(16, erlang:byte_size(Key))),
                  case io_lib:printable_unicode_list(
                         erlang:binary_to_list(Cut)) of
                      true -> {binary, Cut, erlang:byte_size(Key)};
                      false -> {kind, binary}
                  end;
                 (_, _, {short, Key}) when erlang:is_list(Key) ->
                  %% An improper list ([$h, $i | 3]) is named by its kind:
                  %% lists:sublist/2 and length/1 fail on its tail (a
                  %% table keyed by one ended inspect in a function_clause).
                  try lists:sublist(Key, 16) of
                      Cut ->
                          case io_lib:printable_unicode_list(Cut) of
                              true -> {string, Cut, erlang:length(Key)};
                              false -> {kind, list}
                          end
                  catch
                      error:_ -> {kind, list}
                  end;
                 (Inspect, _, {short, Key}) when erlang:is_tuple(Key),
                                         erlang:tuple_size(Key) =< 4 ->
                  {tuple, [case erlang:is_tuple(Item) of
                               true -> {kind, Inspect({kind, Item})};
                               false -> Inspect({short, Item})
                           end || Item <- erlang:tuple_to_list(Key)]};
                 (Inspect, _, {short, Key}) ->
                  {kind, Inspect({kind, Key})}
              end,
          cells =>
              fun(Inspect, _, {cells, [_ | T], C}) when C < 10000 ->
                  Inspect({cells, T, C + 1});
                 (_, _, {cells, _, C}) ->
                  C
              end,
          %% The tree as maps, sizes as integers, for the reply.
          plain =>
              fun(Inspect, _, {plain, {Kind, Count, W, B, Children, {ON, OW,
                                                                     OB}}}) ->
                  #{kind => Kind, count => Count,
                    words => erlang:round(W), binary => erlang:round(B),
                    children => [{Step, Inspect({plain, T})}
                                 || {Step, T} <- Children],
                    others => #{count => ON, words => erlang:round(OW),
                                binary => erlang:round(OB)}}
              end,
          measure =>
              fun(Inspect, Cfg, {measure, Term, Budget, Deadline}) ->
                  Before = counters:get(erlang:element(13, Cfg), 2),
                  {Tree, Pins, _, Sampled, Late} =
                      Inspect({walk, Term, 0, Budget, [], Deadline}),
                  #{tree => Inspect({plain, Tree}),
                    pins => [{lists:reverse(P), erlang:round(C),
                              erlang:round(U),
                              erlang:round(R)}
                             || {P, {C, U, R}} <- maps:to_list(Pins)],
                    sampled => Sampled, late => Late,
                    unmeasured => counters:get(erlang:element(13, Cfg), 2)
                        - Before}
              end,
          %% The dictionary by key, as a map (its cells' worth of words,
          %% made for the walk) when it has at most 10,000 keys, else as
          %% the list it is.
          dictionary =>
              fun(Inspect, _, {dictionary, Entries, Budget, Deadline}) ->
                  case erlang:length(Entries) =< 10000 of
                      true -> Inspect({measure, maps:from_list(Entries), Budget,
                                       Deadline});
                      false -> Inspect({measure, Entries, Budget, Deadline})
                  end
              end,
          inside =>
              fun(Inspect, _, {inside, ReplyTo, Ref, Budget, Deadline, Kind,
                               Dict, PauseMs}) ->
                  fun(State) ->
                          Here = erlang:is_process_alive(ReplyTo) andalso
                              erlang:monotonic_time(millisecond) < Deadline
                              andalso Inspect({due, Kind, PauseMs}),
                          case Here of
                              true ->
                                  Inspect({walk_inside, ReplyTo, Ref, Budget,
                                           Deadline, Kind, Dict, State});
                              false ->
                                  ok
                          end,
                          erlang:throw(beam_probe_inspected)
                  end
              end,
          %% A gen_event calls the fun once per handler: the handlers are
          %% walked for PauseMs of the manager's time from the first,
          %% the rest counted and left (2,000 handlers at 64 terms each
          %% held a manager 5.2-5.9 s, and a gen_event:call timed out).
          due =>
              fun(_, Cfg, {due, gen_event, PauseMs}) ->
                  Now = erlang:system_time(millisecond),
                  First = counters:get(erlang:element(13, Cfg), 3),
                  if First =:= 0 ->
                          counters:put(erlang:element(13, Cfg), 3, Now),
                          true;
                     Now - First < PauseMs ->
                          true;
                     true ->
                          counters:add(erlang:element(13, Cfg), 4, 1),
                          false
                  end;
                 (_, _, {due, _, _}) ->
                  true
              end,
          %% The walk where the state is; a failure of ours is reported
          %% by its class, its reason's first atom and where, never its
          %% terms (they may hold the state's values).
          walk_inside =>
              fun(Inspect, _, {walk_inside, ReplyTo, Ref, Budget, Deadline,
                               Kind, Dict, State}) ->
                  Started = erlang:monotonic_time(microsecond),
                  try
                      %% The parts, each its own walk: a gen_event calls
                      %% this fun once per handler; a gen_statem's
                      %% {State, Data} is two parts, as its docs name
                      %% them, each with half the budget.
                      Parts = case {Kind, State} of
                                  {gen_event, {Module, Id, Handler}} ->
                                      [{{handler, Module,
                                         Inspect({short, Id})}, Handler,
                                        Budget}];
                                  {gen_statem, {StateName, Data}} ->
                                      [{statem_state, StateName,
                                        erlang:max(1, Budget div 2)},
                                       {statem_data, Data,
                                        erlang:max(1, Budget div 2)}];
                                  _ ->
                                      [{state, State, Budget}]
                              end,
                      [ReplyTo ! {Ref, erlang:self(), Part,
                                  Inspect({measure, Term, Share, Deadline}),
                                  none, 0}
                       || {Part, Term, Share} <- Parts],
                      %% The dictionary is read where it is: get/0 makes
                      %% the list's cells, not copies of its entries; once
                      %% (not for each of a gen_event's handlers), and
                      %% only when it has few keys (Dict is read): get/0
                      %% of a million keys stalled a scheduler 61-112 ms
                      %% and grew the process from 317 to 575 MB.
                      case {Kind, Dict} of
                          {gen_event, _} ->
                              ok;
                          {_, skip} ->
                              ok;
                          _ ->
                              ReplyTo ! {Ref, erlang:self(), dictionary,
                                         Inspect({dictionary, erlang:get(),
                                                  erlang:max(1,
                                                             Budget div 4),
                                                  Deadline}),
                                         none, 0}
                      end,
                      ReplyTo ! {Ref, erlang:self(), paused, none, none,
                                 erlang:monotonic_time(microsecond)
                                 - Started}
                  catch
                      Class:Reason:Stack ->
                          ReplyTo ! {Ref, erlang:self(), failed,
                                     {Class, Inspect({reason, Reason}),
                                      [{M, F, A} || {M, F, A0, _} <- Stack,
                                                    A <- [Inspect({arity,
                                                                   A0})]]},
                                     none,
                                     erlang:monotonic_time(microsecond)
                                     - Started}
                  end
              end,
          reason =>
              fun(_, _, {reason, R}) when erlang:is_atom(R) -> R;
                 (_, _, {reason, R}) when erlang:is_tuple(R),
                                          erlang:tuple_size(R) > 0,
                                          erlang:is_atom(erlang:element(1,
                                                                        R)) ->
                  erlang:element(1, R);
                 (_, _, {reason, _}) -> other
              end,
          arity =>
              fun(_, _, {arity, A}) when erlang:is_list(A) -> erlang:length(A);
                 (_, _, {arity, A}) -> A
              end,
          %% A chunk of a table's {Key, Object} pairs, in compiled
          %% passes but for one step an object: its words
          %% (erts_debug:flat_size/1 of our copy: a table stores objects
          %% flat, so it is linear), its key family, its binaries three
          %% levels down (a slice stored in a table keeps its whole binary
          %% alive). Acc is {#{Family => {Count, Words, Binary,
          %% PinCount, PinBytes, PinReferenced}}, the Width largest as
          %% {Held, ShortKey, Family, Words, Binary}, the most words of
          %% one object so far} (the walk sizes its next batch by it).
          objects =>
              fun(Inspect, Cfg, {objects, Pairs, Keypos,
                                 {Families0, Top0, Most0}}) ->
                      {Keys, Objs} = lists:unzip(Pairs),
                      Js = lists:seq(1, erlang:length(Objs)),
                      Words = lists:map(fun erts_debug:flat_size/1,
                                        Objs),
                      {Off, Pins} = Inspect({object_binaries,
                                             lists:zip(Js, Objs), 3,
                                             #{}, []}),
                      Fams = Inspect({families, Keys, Objs, Keypos}),
                      Families =
                          Inspect({tally, lists:zip3(Fams, Words, Js),
                                   Off, Families0}),
                      WordsT = erlang:list_to_tuple(Words),
                      Held = lists:zip(
                               ets:match_spec_run(
                                 Words, erlang:element(10, Cfg)), Js)
                          ++ [{erlang:element(J, WordsT) * 8 + B, J}
                              || {J, B} <- maps:to_list(Off)],
                      Best = Inspect({best, Held,
                                      erlang:element(2, Cfg)}),
                      KeysT = erlang:list_to_tuple(Keys),
                      FamsT = erlang:list_to_tuple(Fams),
                      Top = [{H, Inspect({short, erlang:element(J, KeysT)}),
                              erlang:element(J, FamsT),
                              erlang:element(J, WordsT),
                              maps:get(J, Off, 0)}
                             || {H, J} <- Best],
                      {Inspect({pin_tally, Pins, FamsT, Families}),
                       lists:sublist(lists:reverse(lists:sort(Top0 ++ Top)),
                                     erlang:element(2, Cfg)),
                       lists:max([Most0 | Words])}
              end,
          %% The binaries among [{J, P, Value}] as [{{J, P}, Size,
          %% Referenced}].
          binary_rows =>
              fun(_, Cfg, {binary_rows, Triples}) ->
                  Found = ets:match_spec_run(Triples, erlang:element(4, Cfg)),
                  Binaries = ets:match_spec_run(Found, erlang:element(5, Cfg)),
                  lists:zip3(ets:match_spec_run(Found, erlang:element(6, Cfg)),
                             lists:map(fun erlang:byte_size/1, Binaries),
                             lists:map(fun binary:referenced_byte_size/1,
                                       Binaries))
              end,
          %% Binaries among [{J, Term}], Levels down: {#{J => off-heap
          %% bytes}, [{J, Size, Referenced}] pinned}. Each level's
          %% containers give their elements (a list its first 1,000).
          object_binaries =>
              fun(_, _, {object_binaries, [], _, Off, Pins}) ->
                      {Off, Pins};
                 (_, _, {object_binaries, _, 0, Off, Pins}) ->
                      {Off, Pins};
                 (Inspect, Cfg, {object_binaries, Items, Levels, Off0,
                                 Pins0}) ->
                      Rows = Inspect({binary_rows,
                                      [{J, 0, V} || {J, V} <- Items]}),
                      Off = lists:foldl(fun({J, B}, Acc) ->
                                                Acc#{J => maps:get(J, Acc, 0)
                                                          + B}
                                        end, Off0,
                                        ets:match_spec_run(
                                          Rows, erlang:element(7, Cfg))),
                      Pins = [{J, S, R}
                              || {{J, _}, S, R} <- ets:match_spec_run(
                                                     Rows,
                                                     erlang:element(11, Cfg))]
                          ++ Pins0,
                      {Owners, Terms} = lists:unzip(Items),
                      OwnersT = erlang:list_to_tuple(Owners),
                      TermsT = erlang:list_to_tuple(Terms),
                      Next = lists:append(
                               [Inspect({elements_of,
                                         erlang:element(K, OwnersT),
                                         erlang:element(K, TermsT)})
                                || K <- ets:match_spec_run(
                                          lists:zip(lists:seq(
                                                      1, erlang:length(Terms)),
                                                    Terms),
                                          erlang:element(9, Cfg))]),
                      Inspect({object_binaries, Next, Levels - 1, Off, Pins})
              end,
          elements_of =>
              fun(_, _, {elements_of, J, T}) when erlang:is_tuple(T) ->
                      Items = erlang:tuple_to_list(T),
                      lists:zip(lists:duplicate(erlang:length(Items),
                                                J), Items);
                 (_, _, {elements_of, J, T}) when erlang:is_map(T) ->
                      Items = maps:values(T) ++ maps:keys(T),
                      lists:zip(lists:duplicate(erlang:length(Items),
                                                J), Items);
                 (Inspect, _, {elements_of, J, T}) when erlang:is_list(T) ->
                      Items = Inspect({every, 1, T, 1000, 1000}),
                      lists:zip(lists:duplicate(erlang:length(Items),
                                                J), Items);
                 (_, _, {elements_of, _, _}) ->
                      []
              end,
          %% Key families aligned with Keys: a tuple key's first element,
          %% else a record's tag (keypos > 1), else the key's type.
          families =>
              fun(Inspect, _, {families, Keys, Objs, Keypos}) ->
                      [Inspect({family, K, O, Keypos})
                       || {K, O} <- lists:zip(Keys, Objs)]
              end,
          tally =>
              fun(_, _, {tally, Rows, Off, Families0}) ->
                      lists:foldl(
                        fun({F, W, J}, Acc) ->
                                {C0, W0, B0, PC, PU, PR} =
                                    maps:get(F, Acc, {0, 0, 0, 0, 0, 0}),
                                Acc#{F => {C0 + 1, W0 + W,
                                           B0 + maps:get(J, Off, 0),
                                           PC, PU, PR}}
                        end, Families0, Rows)
              end,
          pin_tally =>
              fun(_, _, {pin_tally, Pins, FamsT, Families0}) ->
                      lists:foldl(
                        fun({J, S, R}, Acc) ->
                                F = erlang:element(J, FamsT),
                                {C0, W0, B0, PC, PU, PR} =
                                    maps:get(F, Acc),
                                Acc#{F => {C0, W0, B0, PC + 1,
                                           PU + S, PR + R}}
                        end, Families0, Pins)
              end,
          family =>
              fun(Inspect, _, {family, Key, Object, Keypos}) ->
                  if erlang:is_tuple(Key), erlang:tuple_size(Key) > 0 ->
                          {tuple, Inspect({short_family, erlang:element(1,
                                                                        Key)})};
                     Keypos > 1, erlang:is_atom(erlang:element(1, Object)) ->
                          {record, erlang:element(1, Object)};
                     true ->
                          {type, Inspect({kind, Key})}
                  end
              end,
          short_family =>
              fun(_, _, {short_family, First}) when erlang:is_atom(First) ->
                  First;
                 (_, _, {short_family, First}) when erlang:is_integer(First),
                                                  First > -1000, First < 1000 ->
                  First;
                 (Inspect, _, {short_family, First}) ->
                  {kind, Inspect({kind, First})}
              end
    },
    Dispatch = fun Inspect(Request) ->
                       (maps:get(erlang:element(1, Request), Ops))(
                         Inspect, Config, Request)
               end,
    %% erl_eval keeps every binding around a fun in it, and looks them
    %% up in an orddict on OTP 25: made here, each operation would carry
    %% the dozen above (23 us a call measured, 6 us without). So each is
    %% made again from its clauses with no binding at all, and the
    %% dispatcher with Ops and Cfg alone.
    Clean = fun(Name, F) ->
                    {fun_data, _, Clauses} = erl_eval:fun_data(F),
                    {value, Made, _} =
                        erl_eval:expr({'fun', 1, {clauses, Clauses}},
                                      erl_eval:new_bindings()),
                    _ = Name,
                    Made
            end,
    CleanOps = maps:map(Clean, Ops),
    {named_fun_data, Bound, Self, Clauses} = erl_eval:fun_data(Dispatch),
    [OpsName] = [Name || {Name, Value} <- Bound, Value =:= Ops],
    [ConfigName] = [Name || {Name, Value} <- Bound, Value =:= Config],
    {value, Inspector, _} =
        erl_eval:expr({named_fun, 1, Self, Clauses},
                      erl_eval:add_binding(
                        OpsName, CleanOps,
                        erl_eval:add_binding(ConfigName, Config,
                                             erl_eval:new_bindings()))),
    Inspector.

%% One process: its state measured where it is (gen_server, gen_statem,
%% gen_event handlers, and what is built on them: supervisors, Elixir's
%% GenServer and Agent), its dictionary, and its mailbox when short.
%%
%% Only a process that reads system messages is sent one: a plain
%% receive loop would keep it in its mailbox forever, a leak of ours. What
%% the process runs decides it, never a try: started by proc_lib (a
%% function, init_p/5, or a fun, init_p/3), waiting in a gen module's
%% loop; hibernating only where what it wakes into is known (a gen_event
%% or a supervisor, which run OTP's loop alone; on OTP 28 gen_server and
%% gen_statem hibernate in a loop function of theirs, so erlang:hibernate/3
%% there is a loop of the process's own; before 28 it cannot be told).
%% Any other process has its dictionary and mailbox read from outside
%% (they are copied into our worker, so only when the process is at most
%% CopyMost words and the dictionary short) and the reason its loop
%% state cannot be read.
%%
%% Nor is a process sent anything when the request would harm it: one
%% whose max_heap_size has no room for what the walk adds to its heap
%% (it would be killed), one whose cap counts shared binaries (no room
%% is enough: see SharedCap below), or one whose young heap is large and
%% would be collected because of us (see Room below).
%%
%% The system message's reply goes to a process that has already exited
%% (gen_event replies with every handler's state: that copy is dropped
%% unmade), and a statistics request behind it, answered with a small
%% term, says that the walk is done: the target handles its system
%% messages in order. Past WaitMs we stop waiting; what is left in the
%% target's mailbox then finds our worker gone and measures nothing.
-spec process({pid, string()} | {names, [string()]}, fun(),
              fun((options()) -> inspector()),
              fun(([{integer(), pid()}]) -> map()), options()) ->
          #{pid := pid(),
            info := [{atom(), term()}],
            kind := gen_server | gen_statem | gen_event | plain,
            why := atom(),
            limits := #{atom() => non_neg_integer()},
            parts := [{term(), walk()}],
            mailbox := walk() | {too_long, non_neg_integer()}
                     | {too_large, non_neg_integer()},
            dictionary := walk() | none | {too_large, non_neg_integer()}
                        | {too_many, non_neg_integer()}
                        | {keys_unknown, pos_integer()},
            pause_us := non_neg_integer(),
            timed_out := boolean() | exited,
            handlers := #{total := non_neg_integer(),
                          skipped := non_neg_integer()} | none,
            records := [{atom(), [atom()]}],
            binary_distinct := non_neg_integer() | unknown,
            binaries := #{references := non_neg_integer(),
                          count := non_neg_integer(),
                          bytes := non_neg_integer(),
                          alone := non_neg_integer(),
                          largest := [non_neg_integer()]}
                      | {too_large, non_neg_integer()} | unknown,
            started := atom(),
            behaviours := [atom()],
            named := [{atom(), term()}],
            wordsize := pos_integer()} |
          {error, not_a_pid | no_such_name | {other_node, node()} |
                  {not_alive, pid()} | ours}.
process(Target, Resolve, Walker, Describe, Options) ->
    #{budget := Budget, walk_ms := WalkMs, wait_ms := WaitMs,
      mailbox_most := MailboxMost, copy_most := CopyMost,
      binaries_most := BinariesMost, width := Width} = Options,
    Pid = Resolve(Target),
    Items = [registered_name, initial_call, current_function,
             current_stacktrace, message_queue_len, memory, total_heap_size,
             heap_size, max_heap_size, garbage_collection_info],
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               List -> List
           end,
    Info = case Pid of
               _ when not erlang:is_pid(Pid) -> Pid;
               _ when erlang:node(Pid) =/= erlang:node() -> other_node;
               _ ->
                   case lists:member(Pid, Ours) of
                       true -> ours;
                       false -> erlang:process_info(Pid, Items)
                   end
           end,
    case Info of
        not_a_pid ->
            {error, not_a_pid};
        undefined when not erlang:is_pid(Pid) ->
            {error, no_such_name};
        other_node ->
            {error, {other_node, erlang:node(Pid)}};
        undefined ->
            {error, {not_alive, Pid}};
        ours ->
            {error, ours};
        _ ->
            {total_heap_size, Heap} = lists:keyfind(total_heap_size, 1, Info),
            Wordsize = erlang:system_info(wordsize),
            Meter = counters:new(4, []),
            %% A part past the budget is sized by erts_debug:size_shared/1
            %% while the request's calls of it have sized under 2M words
            %% (16 MB), in a process of at most that heap: each call is at
            %% most the heap, so 4M words in all (~30 ms at the 7.5 ns a
            %% word the tester measured). A larger process's parts past the
            %% budget are said not measured. A list is counted to a
            %% thousand cells a term of the budget (1M at 1,000: a few ms
            %% of compiled code).
            Inspect = Walker(Options#{shared_most =>
                                          case Heap =< 2097152 of
                                              true -> 2097152;
                                              false -> 0
                                          end,
                                      meter => Meter,
                                      list_most => erlang:max(10000,
                                                              Budget * 1000)}),
            {message_queue_len, Queue} =
                lists:keyfind(message_queue_len, 1, Info),
            {memory, Memory} = lists:keyfind(memory, 1, Info),
            {current_stacktrace, Stack} =
                lists:keyfind(current_stacktrace, 1, Info),
            {current_function, Current} =
                lists:keyfind(current_function, 1, Info),
            {initial_call, Initial} = lists:keyfind(initial_call, 1, Info),
            {max_heap_size, Cap} = lists:keyfind(max_heap_size, 1, Info),
            {garbage_collection_info, Gc} =
                lists:keyfind(garbage_collection_info, 1, Info),
            Gci = fun(GcKey) -> proplists:get_value(GcKey, Gc, 0) end,
            Deadline = erlang:monotonic_time(millisecond) + WalkMs,
            %% How many keys the dictionary has, from outside and without a
            %% copy: its table lies outside the heap, a word a key
            %% (measured on OTP 25: 760 bytes of a process's memory are
            %% outside its heap with no key, ~10.5 MB with a million; each
            %% waiting message adds ~88 bytes). An estimate, high rather
            %% than low. Up to 16,384 keys the dictionary is read (get/0
            %% inside, or a copy from outside: a list of 32K words).
            %% Waiting messages are not taken off: their size varies (a
            %% small one ~88 bytes, and taking 96 each hid a key a
            %% message: the review's 150,000 keys behind 250,000 messages
            %% were estimated at none, and copied), so with a queue the
            %% estimate only says "few" when even the queue's memory
            %% counted as keys stays under the bound; past it the count
            %% is unknown and the dictionary is not read.
            Keys = erlang:max(0, (Memory - Heap * Wordsize - 1024)
                              div Wordsize),
            TooMany = case Queue of
                          0 -> {too_many, Keys};
                          _ -> {keys_unknown, Queue}
                      end,
            %% Copying from outside: the dictionary (plain processes; OTP
            %% 25 to 26.1 also to tell a hibernating process's kind and
            %% find its callback module, copied once for both) and the
            %% mailbox.
            Dictionary =
                fun() ->
                        Copy = Heap =< CopyMost andalso Keys =< 16384
                            andalso erlang:process_info(Pid, dictionary),
                        case Copy of
                            {dictionary, D} -> D;
                            undefined -> [];
                            false when Heap > CopyMost -> {too_large, Heap};
                            false -> TooMany
                        end
                end,
            {FirstRead, Copied} =
                try erlang:process_info(Pid, {dictionary, '$initial_call'}) of
                    {{dictionary, '$initial_call'}, Call} -> {Call, unread};
                    _ -> {undefined, unread}
                catch
                    error:badarg ->
                        case Dictionary() of
                            D when erlang:is_list(D) ->
                                {proplists:get_value('$initial_call', D), D};
                            Refused ->
                                {undefined, Refused}
                        end
                end,
            %% The keys that name it ('$process_label', '$initial_call',
            %% process_name, as RabbitMQ names a queue): from the
            %% dictionary copied above, else as every command reads them
            %% for the rows it shows (beam_probe_lib's describe/1: a key at
            %% a time on OTP 26.2+; before, a copy only from a heap of at
            %% most 64 MiB, three small values kept, the copy garbage at
            %% once). A value is kept only up to 1,024 bytes (external).
            %% Where that would copy, only under the bound on keys above
            %% (a dictionary of a million keys is a heap of 60 MB, under
            %% describe's cap: its copy raised the node 97 MB).
            Named =
                case Copied of
                    _ when Copied =/= unread, Keys > 16384 ->
                        [];
                    _ when erlang:is_list(Copied) ->
                        [{Key, Value}
                         || Key <- ['$process_label', '$initial_call',
                                    process_name],
                            {_, Value} <- [lists:keyfind(Key, 1, Copied)],
                            erlang:external_size(Value) =< 1024];
                    _ ->
                        case Describe([{0, Pid}]) of
                            #{infos := [Described]}
                              when erlang:is_list(Described) ->
                                [{Key, Value}
                                 || {{dictionary, Key}, Value} <- Described,
                                    Value =/= undefined];
                            _ ->
                                []
                        end
                end,
            FirstCall = case FirstRead of
                            undefined ->
                                proplists:get_value('$initial_call', Named);
                            _ ->
                                FirstRead
                        end,
            %% Waiting for a message in a gen module's loop: a function
            %% named loop... of gen_server, gen_statem (their receive, and
            %% gen_server:loop_hibernate/4 where OTP 28 hibernates), or
            %% gen_event:fetch_msg/6. Only the current function counts: a
            %% process running a callback (a gen frame below it) or
            %% handling another system message may never come back to
            %% its loop, and our request would stay in its mailbox.
            InLoop =
                fun({M, F, _}) when M =:= gen_server; M =:= gen_statem ->
                        lists:prefix("loop", erlang:atom_to_list(F));
                   ({gen_event, fetch_msg, _}) ->
                        true;
                   (_) ->
                        false
                end,
            Behaviours =
                fun(Module) when erlang:is_atom(Module) ->
                        try Module:module_info(attributes) of
                            Attributes ->
                                lists:append(
                                  proplists:get_all_values(behaviour,
                                                           Attributes)
                                  ++ proplists:get_all_values(behavior,
                                                              Attributes))
                        catch
                            _:_ -> []
                        end;
                   (_) ->
                        []
                end,
            Kinds = [{gen_server, gen_server}, {supervisor, gen_server},
                     {'Elixir.GenServer', gen_server},
                     {'Elixir.Supervisor', gen_server},
                     {gen_statem, gen_statem}, {gen_event, gen_event}],
            Release = try erlang:list_to_integer(
                            erlang:system_info(otp_release))
                      catch error:badarg -> 0
                      end,
            %% Hibernating in erlang:hibernate/3: what it wakes into is
            %% not shown (its stack is gone, its current function is
            %% hibernate/3 whoever called it). A gen_event manager or a
            %% supervisor runs OTP's loop alone: known. A process started
            %% by its module's init/1, of a gen_server or gen_statem
            %% module, may hibernate into a loop of that module's own (a
            %% system message would stay, the tester saw): on OTP 28
            %% their own hibernation shows as loop_hibernate, so
            %% hibernate/3 is such a loop; before, it cannot be told.
            Hibernating =
                fun({gen_event, init_it, 6}) ->
                        {gen_event, gen};
                   ({supervisor, _, 1}) ->
                        {gen_server, gen};
                   ({Module, init, 1}) ->
                        case [K || {B, K} <- Kinds,
                                   lists:member(B, Behaviours(Module))] of
                            [_ | _] when Release >= 28 ->
                                {plain, hibernating_own};
                            [_ | _] ->
                                {plain, hibernating_loop};
                            [] ->
                                {plain, hibernating}
                        end;
                   (undefined) ->
                        {plain, hibernating_unknown};
                   (_) ->
                        {plain, hibernating}
                end,
            ProcLib = Initial =:= {proc_lib, init_p, 5}
                orelse Initial =:= {proc_lib, init_p, 3},
            {Kind, Why} =
                case Current of
                    _ when not ProcLib ->
                        {plain, not_proc_lib};
                    {erlang, hibernate, 3} ->
                        Hibernating(FirstCall);
                    {Module, _, _} ->
                        case InLoop(Current) of
                            true -> {Module, gen};
                            false when Module =:= sys ->
                                {plain, busy_system};
                            false ->
                                case [M || {M, _, _, _} <- Stack,
                                           M =:= gen_server
                                               orelse M =:= gen_statem
                                               orelse M =:= gen_event] of
                                    [_ | _] -> {plain, busy_callback};
                                    [] -> {plain, not_in_gen_loop}
                                end
                        end;
                    _ ->
                        {plain, not_in_gen_loop}
                end,
            MemoryWords = Memory div Wordsize,
            Mailbox =
                if Queue > MailboxMost -> {too_long, Queue};
                   MemoryWords > CopyMost -> {too_large, Memory};
                   true ->
                        case erlang:process_info(Pid, messages) of
                            {messages, Messages} ->
                                Inspect({measure, Messages, Budget,
                                         Deadline});
                            undefined ->
                                {too_long, 0}
                        end
                end,
            %% The refc binaries the process refers to, from outside and
            %% whatever its loop (a walk counts a binary once per
            %% reference: a thousand slices of one binary are a thousand
            %% times it): process_info(P, binary), a list of {Id, Size,
            %% Refc} as long as its references. Each reference is a
            %% ProcBin on its heap (6 words on OTP 25, a BinRef and its
            %% sub-binary 8 on 27 and 28), so the list has at most
            %% total_heap_size / 6 entries, and its copy is 6 words an
            %% entry (measured on OTP 25, 2 cores: 5,936 references copied
            %% in 0.1-0.3 ms, 109,864 in 4-8 ms, 345,285 in 14-22 ms). So
            %% it is read from a heap of at most BinariesMost words (4M,
            %% 32 MB: a broker's queue, 16-24 MB, is read), and only
            %% figures come back, made in compiled passes (a comprehension
            %% here is erl_eval's, ~5 us an element): the count, the bytes
            %% with each binary once, the largest few, and the bytes of
            %% those whose reference count is 1 (held by this process
            %% alone). Each binary once: the list goes into a set table of
            %% ours, keyed by Id, and is garbage once the fun that read it
            %% returns (erl_eval keeps a binding to the end of its
            %% function). lists:ukeysort/2 instead grew our worker to 75
            %% MB for 300,000 references, the set to 31 MB (twice as
            %% slow: 0.4 s, ours, not the process's).
            %% The heap is read again just before the list: the first
            %% read, at the start, comes before the dictionary and the
            %% mailbox are copied and measured (up to the deadline), and a
            %% busy process may grow past the bound meanwhile. Between the
            %% two calls it runs for microseconds at most.
            HeapNow = case erlang:process_info(Pid, total_heap_size) of
                          {total_heap_size, Now} -> Now;
                          undefined -> 0
                      end,
            Binaries =
                case erlang:max(Heap, HeapNow) =< BinariesMost of
                    false ->
                        {too_large, erlang:max(Heap, HeapNow)};
                    true ->
                        Set = ets:new(binary, [set, private]),
                        Listed =
                            (fun() ->
                                     case erlang:process_info(Pid, binary) of
                                         {binary, References} ->
                                             ets:insert(Set, References),
                                             erlang:length(References);
                                         undefined ->
                                             unknown
                                     end
                             end)(),
                        erlang:garbage_collect(),
                        Summed =
                            case Listed of
                                unknown ->
                                    unknown;
                                _ ->
                                    (fun() ->
                                             Sizes = ets:select(
                                                       Set, [{{'_', '$1', '_'},
                                                              [], ['$1']}]),
                                             #{references => Listed,
                                               count => ets:info(Set, size),
                                               bytes => lists:sum(Sizes),
                                               alone => lists:sum(
                                                          ets:select(
                                                            Set,
                                                            [{{'_', '$1', 1},
                                                              [], ['$1']}])),
                                               largest => lists:sublist(
                                                            lists:reverse(
                                                              lists:sort(
                                                                Sizes)), 5)}
                                     end)()
                            end,
                        ets:delete(Set),
                        erlang:garbage_collect(),
                        Summed
                end,
            Distinct = case Binaries of
                           #{bytes := DistinctBytes} -> DistinctBytes;
                           _ -> unknown
                       end,
            %% A gen_event calls the fun once per handler: the budget is
            %% the whole manager's, shared among its handlers (a handler
            %% given less than a container's 48 terms is sized in one
            %% call, or said not measured), and the handlers are walked
            %% for at most a tenth of a millisecond a term of the budget
            %% (100 ms at 1,000).
            Handlers =
                case Why =:= gen andalso Kind =:= gen_event andalso
                    (catch gen:call(Pid, erlang:self(), which_handlers,
                                    1000)) of
                    {ok, HandlerList} when erlang:is_list(HandlerList) ->
                        erlang:length(HandlerList);
                    _ ->
                        0
                end,
            Ref = erlang:make_ref(),
            Me = erlang:self(),
            DictRead = case Keys =< 16384 of
                           true -> read;
                           false -> skip
                       end,
            %% Room: what the request adds to the target's heap. Our fun
            %% arrives as a heap fragment of FunWords (~30,000), and the
            %% collections it and the walk bring on size the heaps for
            %% what the process holds then, garbage and all, old and new
            %% at once while they copy. Measured on OTP 25, 27 and 28,
            %% gen_servers capped with kill: a list just collected (all of
            %% it young) lived from a cap of 171-197K words with a
            %% 1,598-word heap, 451K with 75K, 1.68M with 318K (OTP 28,
            %% whose first system message collects in full: 307-358K
            %% with 610 at a budget of 1,000); states fresh from their
            %% making, most of them old, were killed far higher: a tuple
            %% of 20,000 lists (833K words old, 202K young) at 3.94M, a
            %% gb_tree (1.0M old, 374K young) at 4.08M, a map of 1,000
            %% slices (11K old, 4K young) at 443K; and a process of a few
            %% words needs a heap size or two more than our fragment at
            %% any budget past 50 (123K words at 10, 274-323K from 50 to
            %% 5,000, on 25 and 28 alike). So it takes 4 times its old
            %% heap, 7 times its young data and our fragment, 128K words,
            %% and 400 words a term of the budget (binaries' pins cost
            %% the most). A cap with room for fewer terms than asked has
            %% the walk's budget cut to fit; with room for under 50, the
            %% process is left alone, with the figures.
            FunWords = erts_debug:flat_size(
                         Inspect({inside, Me, Ref, 1, Deadline, Kind,
                                  DictRead, 100})),
            Young = Gci(heap_size) + Gci(stack_size) + Gci(mbuf_size),
            Fixed = 4 * Gci(old_heap_block_size) + 7 * (Young + FunWords)
                + 131072
                + case Cap of
                      #{include_shared_binaries := true} ->
                          Gci(bin_vheap_size) + Gci(bin_old_vheap_size);
                      _ ->
                          0
                  end,
            CapWords = case Cap of
                           #{size := CapSize} when CapSize > 0 ->
                               case maps:get(kill, Cap, true) orelse
                                   maps:get(error_logger, Cap, true) of
                                   true -> CapSize;
                                   false -> none
                               end;
                           _ ->
                               none
                       end,
            %% ignore_cap (never set by beam-probe) lets a measurement
            %% find where a capped process is killed, to check this rule.
            WalkBudget = case {maps:get(ignore_cap, Options, false),
                               CapWords} of
                       {true, _} -> Budget;
                       {_, none} -> Budget;
                       _ -> erlang:min(Budget, (CapWords - Fixed) div 400)
                   end,
            Share = erlang:max(1, WalkBudget div erlang:max(1, Handlers)),
            PauseMs = erlang:max(100, WalkBudget div 10),
            Fun = Inspect({inside, Me, Ref, Share, Deadline, Kind,
                           DictRead, PauseMs}),
            %% A young heap without room for our fragment and the walk's
            %% garbage is collected because of us, and a minor collection
            %% copies its live data: 320 MB of it took 366 ms and as much
            %% memory again on the node (the tester's; a walk at the
            %% default budget made a 286 MB young heap with 6.3 MB free
            %% collect here, 265 ms). The walk's garbage, measured (a
            %% list, a map, a gb_tree): ~58K words at a budget of 10,
            %% 0.9-1.1M at 1,000, 3.4-6.9M at 10,000; taken as 64K and
            %% 1,280 words a term. Over 2M words (16 MB) of young data,
            %% the process is left alone.
            Collects = Gci(heap_block_size) - Gci(heap_size)
                - Gci(stack_size) < FunWords + 65536 + 1280 * WalkBudget
                andalso Gci(heap_size) > 2097152,
            %% A cap that counts shared binaries (include_shared_binaries:
            %% kept by OTP 27 and 28; OTP 25 accepts the key and drops it,
            %% so its caps never count them) counts each reference to an
            %% off-heap binary at the whole binary's size, and the walk
            %% makes references (the terms it copies and keeps while it
            %% sizes them): the review's gen_server holding 20,001 80-byte
            %% slices of one 4 MB binary was killed on OTP 28 at ten times
            %% the need the rule above states (and at a cap of 8M words in
            %% tests/test_inspect_round5.py). No figure is known to bound
            %% it, so such a process is left alone, with its figures.
            SharedCap = CapWords =/= none andalso
                maps:get(include_shared_binaries, Cap, false) =:= true
                andalso not maps:get(ignore_cap, Options, false),
            {Why2, Limits} =
                if Why =/= gen ->
                        {Why, #{}};
                   SharedCap ->
                        {shared_binaries,
                         #{cap => CapWords,
                           binaries => Gci(bin_vheap_size)
                               + Gci(bin_old_vheap_size)}};
                   WalkBudget < 50, WalkBudget < Budget ->
                        {capped, #{cap => CapWords,
                                   need => Fixed + 400 * Budget,
                                   least => Fixed + 400 * 50,
                                   heap => Heap, fun_words => FunWords}};
                   Collects ->
                        {young_heap, #{young => Gci(heap_size)}};
                   WalkBudget < Budget ->
                        {gen, #{cap => CapWords, budget => WalkBudget,
                                need => Fixed + 400 * Budget}};
                   true ->
                        {gen, #{}}
                end,
            %% '$initial_call' only as a module's name (what names a
            %% broker's process: rabbit_prequeue), where it was read.
            Started = case FirstCall of
                          {StartModule, _, _} when erlang:is_atom(StartModule) ->
                              StartModule;
                          _ ->
                              undefined
                      end,
            %% And the behaviours that module declares (a hibernating
            %% process's loop, when its stack is gone: RabbitMQ's queues
            %% declare gen_server2), a few atoms.
            %% Only of a module the node has loaded: asking another
            %% would make the node search its code path and load it.
            Declared = case Started =/= undefined andalso
                           erlang:module_loaded(Started) of
                           true ->
                               lists:sublist(
                                 [B || B <- Behaviours(Started),
                                       erlang:is_atom(B)], 8);
                           false ->
                               []
                       end,
            Base = #{pid => Pid, info => Info, kind => Kind, why => Why2,
                     limits => Limits, binary_distinct => Distinct,
                     binaries => Binaries, started => Started,
                     behaviours => Declared, named => Named,
                     mailbox => Mailbox, records => [], handlers => none,
                     wordsize => Wordsize},
            case Why2 of
                gen ->
                    Fence = erlang:make_ref(),
                    {Gone, Watch} = erlang:spawn_monitor(erlang, is_atom, [ok]),
                    receive {'DOWN', Watch, process, Gone, _} -> ok end,
                    Monitor = erlang:monitor(process, Pid),
                    Pid ! {system, {Gone, Ref}, {replace_state, Fun}},
                    Pid ! {system, {Me, Fence},
                           {debug, {statistics, get}}},
                    Collect =
                        fun Collect(Got, Dict, Pause) ->
                                receive
                                    {Ref, Pid, dictionary, Walk, _, _} ->
                                        Collect(Got, Walk, Pause);
                                    {Ref, Pid, paused, _, _, Us} ->
                                        Collect(Got, Dict, Pause + Us);
                                    {Ref, Pid, Part, Walk, _, Us} ->
                                        Collect([{Part, Walk} | Got], Dict,
                                                Pause + Us);
                                    {Fence, _} ->
                                        {lists:reverse(Got), Dict, Pause,
                                         false};
                                    {'DOWN', Monitor, process, Pid, _} ->
                                        {lists:reverse(Got), Dict, Pause,
                                         exited}
                                after WaitMs ->
                                        {lists:reverse(Got), Dict, Pause,
                                         true}
                                end
                        end,
                    {Walked, Dict, Walking, TimedOut} = Collect([], none, 0),
                    erlang:demonitor(Monitor, [flush]),
                    %% A gen_event's pause is from its first handler to
                    %% the fence (the handlers past the walk's time cost
                    %% it too: its walks' own sum was 70 ms where a
                    %% client waited 150).
                    Pause = case counters:get(Meter, 3) of
                                FirstMs when FirstMs > 0,
                                             TimedOut =:= false ->
                                    erlang:max(
                                      Walking,
                                      1000 * (erlang:system_time(millisecond)
                                              - FirstMs));
                                _ ->
                                    Walking
                            end,
                    %% Our request (its fun is ~30,000 words) and the
                    %% walk's garbage grow a small process's heap, and it
                    %% keeps the size until it collects again (measured:
                    %% 21 KiB to 1.1 MiB, for minutes). A small process
                    %% that grew so is collected back; a full collection
                    %% of one costs it little. A large one grows in
                    %% proportion far less.
                    case TimedOut =:= false andalso Heap < 262144 andalso
                        erlang:process_info(Pid, total_heap_size) of
                        {total_heap_size, Grown}
                          when Grown > 2 * Heap + 4096 ->
                            erlang:garbage_collect(Pid);
                        _ ->
                            false
                    end,
                    %% A gen_event's handlers past the Width largest are
                    %% one part (a manager of 2,000 handlers gave 4,000
                    %% rows at --width 10).
                    HeldBy = fun({_, #{tree := #{words := HW,
                                                 binary := HB}}}) ->
                                     HW * Wordsize + HB;
                                (_) ->
                                     0
                             end,
                    Fold =
                        fun(All) ->
                                Ranked = [P || {_, P} <- lists:reverse(
                                                          lists:keysort(
                                                            1,
                                                            [{HeldBy(P0), P0}
                                                             || P0 <- All]))],
                                {Kept, Rest} = lists:split(Width, Ranked),
                                Trees = [T || {_, #{tree := T}} <- Rest],
                                Sum = fun(Key) ->
                                              lists:sum([maps:get(Key, T1)
                                                         || T1 <- Trees])
                                      end,
                                Walks = [W1 || {_, W1} <- Rest,
                                               erlang:is_map(W1)],
                                Flag = fun(Key) ->
                                               lists:member(
                                                 true, [maps:get(Key, W2)
                                                        || W2 <- Walks])
                                       end,
                                Kept
                                    ++ [{{other_handlers,
                                          erlang:length(Rest)},
                                         #{tree =>
                                               #{kind => handlers,
                                                 count => erlang:length(Rest),
                                                 words => Sum(words),
                                                 binary => Sum(binary),
                                                 children => [],
                                                 others => #{count => 0,
                                                             words => 0,
                                                             binary => 0}},
                                           pins => lists:append(
                                                     [maps:get(pins, W3)
                                                      || W3 <- Walks]),
                                           sampled => Flag(sampled),
                                           late => Flag(late),
                                           unmeasured =>
                                               lists:sum(
                                                 [maps:get(unmeasured, W4)
                                                  || W4 <- Walks])}}]
                        end,
                    Parts = case Kind =:= gen_event andalso
                                erlang:length(Walked) > Width of
                                true -> Fold(Walked);
                                false -> Walked
                            end,
                    %% Records have no field names at run time; the
                    %% callback module's debug_info (rebar3 and mix keep
                    %% it by default) has them, for the tags the state
                    %% shows. A file of at most 8 MB, read by our worker.
                    %% Every record tag the trees show, at any level
                    %% (a tree is at most as many parts as the budget).
                    Shown = fun Shown(#{kind := Kind0, children := Ch}) ->
                                    [Tag || {record, Tag} <- [Kind0]]
                                        ++ lists:append(
                                             [Shown(C) || {_, C} <- Ch])
                            end,
                    Tags = lists:usort(
                             lists:append([Shown(Tree)
                                           || {_, #{tree := Tree}}
                                                  <- Parts])),
                    Field = fun({record_field, _, {atom, _, F}}) -> F;
                               ({record_field, _, {atom, _, F}, _}) -> F;
                               ({typed_record_field, R, _}) ->
                                    case R of
                                        {record_field, _, {atom, _, F}} -> F;
                                        {record_field, _, {atom, _, F}, _} -> F
                                    end
                            end,
                    Records =
                        case {Tags, FirstCall} of
                            {[_ | _], {CallbackModule, _, _}}
                              when erlang:is_atom(CallbackModule) ->
                                Beam = code:which(CallbackModule),
                                Small = erlang:is_list(Beam) andalso
                                    filelib:file_size(Beam) =< 8388608,
                                Chunks = case Small of
                                             true ->
                                                 beam_lib:chunks(
                                                   Beam, [abstract_code]);
                                             false ->
                                                 none
                                         end,
                                case Chunks of
                                    {ok, {_, [{abstract_code,
                                               {_, Forms}}]}}
                                      when erlang:is_list(Forms) ->
                                        [{Name, [Field(F) || F <- Fs]}
                                         || {attribute, _, record,
                                             {Name, Fs}} <- Forms,
                                            lists:member(Name, Tags)];
                                    _ ->
                                        []
                                end;
                            _ ->
                                []
                        end,
                    Base#{parts => Parts, dictionary =>
                              case {Dict, Keys =< 16384} of
                                  {none, false} -> TooMany;
                                  _ -> Dict
                              end,
                          pause_us => Pause, timed_out => TimedOut,
                          handlers =>
                              case Kind of
                                  gen_event ->
                                      #{total => Handlers,
                                        skipped => counters:get(Meter, 4)};
                                  _ ->
                                      none
                              end,
                          records => Records};
                _ ->
                    Entries = case Copied of
                                  unread -> Dictionary();
                                  _ -> Copied
                              end,
                    Base#{parts => [], pause_us => 0, timed_out => false,
                          dictionary =>
                              case Entries of
                                  _ when erlang:is_list(Entries) ->
                                      Inspect({dictionary, Entries, Budget,
                                               Deadline});
                                  _ ->
                                      Entries
                              end}
            end
    end.

%% One table: its objects grouped by key family (a tuple key's first
%% element, a record's tag, else the key's type), with count, words,
%% refc binary bytes and pinned binaries, and its largest objects by
%% their (short) keys. Its keys are read with ets:select/3 in chunks
%% and their objects with ets:lookup/2 in batches, each a short
%% operation (the table stays usable throughout), the table never fixed.
%% At most Budget objects are read, and not past the deadline; beyond,
%% the answer is a sample, and says what fraction it saw, and whether
%% the table's size moved while it was read.
%%
%% An object's words are erts_debug:flat_size/1 of our copy of it (what
%% it costs once read: a table stores it flat, or packed when
%% compressed; flat_size is linear in it); its binaries and pins come
%% from a walk of at most 64 terms.
-spec table({names, [string()]} | {id, string()},
            fun((options()) -> inspector()), options()) ->
          #{table := term(), info := [{atom(), term()}],
            families := [{term(), non_neg_integer(), non_neg_integer(),
                          non_neg_integer(),
                          {non_neg_integer(), non_neg_integer(),
                           non_neg_integer()}}],
            largest := [{term(), term(), non_neg_integer(),
                         non_neg_integer()}],
            seen := non_neg_integer(), late := boolean(),
            unread := {non_neg_integer(), non_neg_integer()},
            changed := boolean(), wordsize := pos_integer()} |
          {error, no_such_table | private
                  | {several, pos_integer(), [string()]}}.
table(Spec, Walker, Options) ->
    Inspect = Walker(Options),
    #{budget := Budget, walk_ms := WalkMs} = Options,
    Tables = ets:all(),
    Found = case Spec of
                {names, Names} ->
                    %% Never a new atom: a name the node has no atom for
                    %% names no table.
                    Known = [Atom || Name <- Names,
                                     Atom <- try [erlang:list_to_existing_atom(
                                                    Name)]
                                             catch error:badarg -> []
                                             end,
                                     ets:info(Atom, id) =/= undefined],
                    %% A table that is no named_table is still listed by
                    %% its name (ets:info(T, name)), and `ets` shows it so:
                    %% the name finds it where no named table has it. The
                    %% names of all tables in compiled passes (erl_eval
                    %% would take ~5 us a table), one match specification
                    %% keeping the ids of those with the name.
                    Unnamed =
                        fun() ->
                                Ids = [T || T <- Tables,
                                            erlang:is_reference(T)],
                                Named = lists:zip(
                                          Ids,
                                          lists:zipwith(
                                            fun ets:info/2, Ids,
                                            lists:duplicate(
                                              erlang:length(Ids), name))),
                                Asked = lists:usort(
                                          [Wanted
                                           || Name <- Names,
                                              Wanted <- try [erlang:list_to_existing_atom(Name)]
                                                        catch error:badarg -> []
                                                        end]),
                                case Asked of
                                    [] ->
                                        [];
                                    _ ->
                                        ets:match_spec_run(
                                          Named,
                                          ets:match_spec_compile(
                                            [{{'$1', '$2'},
                                              [{'=:=', '$2',
                                                {const, Wanted}}],
                                              ['$1']} || Wanted <- Asked]))
                                end
                        end,
                    case Known of
                        [Atom | _] ->
                            Atom;
                        [] ->
                            case Unnamed() of
                                [Id] -> Id;
                                [] -> undefined;
                                Several -> {several, Several}
                            end
                    end;
                {id, Text} ->
                    case [T || T <- Tables, erlang:is_reference(T),
                               erlang:ref_to_list(T) =:= Text] of
                        [T | _] -> T;
                        [] -> undefined
                    end
            end,
    Info = case Found of
               undefined -> undefined;
               {several, _} -> undefined;
               _ -> ets:info(Found)
           end,
    Me = erlang:self(),
    case Info of
        undefined when erlang:is_tuple(Found) ->
            %% Which ids to give: at most ten of them, and how many.
            {several, Ids} = Found,
            {error, {several, erlang:length(Ids),
                     [erlang:ref_to_list(T)
                      || T <- lists:sublist(lists:sort(Ids), 10)]}};
        undefined ->
            {error, no_such_table};
        _ ->
            {keypos, Keypos} = lists:keyfind(keypos, 1, Info),
            {type, Type} = lists:keyfind(type, 1, Info),
            {protection, Protection} = lists:keyfind(protection, 1, Info),
            {owner, Owner} = lists:keyfind(owner, 1, Info),
            case Protection =:= private andalso Owner =/= Me of
                true ->
                    {error, private};
                false ->
                    Deadline = erlang:monotonic_time(millisecond) + WalkMs,
                    {size, Before} = lists:keyfind(size, 1, Info),
                    %% No fixation: safe_fixtable for the whole walk kept
                    %% every object deleted meanwhile (a table written
                    %% during the walk went from 64.5 to 123 MB), and
                    %% releasing it blocked the table and both schedulers
                    %% 194 ms to 1.7 s. An unfixed walk of a set or a bag
                    %% may miss a key or meet one twice if the table is
                    %% resized meanwhile (ets's "Table traversal"); an
                    %% ordered_set's walk is safe. The answer says when the
                    %% table changed while it was read: its size moved, or
                    %% a key listed had no object when it was looked up.
                    %%
                    %% Keys first. A set's (and an ordered_set's) by
                    %% ets:select/3 in chunks of at most 500, each a short
                    %% operation, but only keys a guard proves small: an
                    %% atom, a number under 2^64, a pid, port, reference or
                    %% binary (a large one is shared, not copied: ets's
                    %% guards have no is_bitstring), [], or
                    %% a tuple of at most 4 of those. Any other key comes
                    %% back as a marker in its place, and is listed by a
                    %% second select, with a limit of one, that lists
                    %% only those, in the same order; a batch then takes
                    %% keys until it holds as many as it reads objects or
                    %% 256K words of keys (listed 500 a chunk whatever
                    %% their size, 600 keys of 320 KB took the node +410
                    %% MB). A pattern that names the key alone, one
                    %% clause an arity, leaves a compressed table's
                    %% objects packed (1,000 objects of 60 KB packed:
                    %% 58 ms, against 2.2 s for element(Keypos, '$_'),
                    %% which unpacks each; an arity past Keypos + 15 is
                    %% read so).
                    Marker = erlang:make_ref(),
                    %% A guard's term (the key, or one of its elements)
                    %% proved small: named Guarded, not X, as 'X' is an
                    %% atom of erl_internal's that the light-touch test
                    %% would take for one of our variables reaching the
                    %% node.
                    Atomic =
                        fun(Guarded) ->
                                {'orelse', {is_atom, Guarded},
                                 {is_pid, Guarded}, {is_port, Guarded},
                                 {is_reference, Guarded},
                                 {is_binary, Guarded}, {is_float, Guarded},
                                 {'andalso', {is_integer, Guarded},
                                  {'<', {abs, Guarded},
                                   18446744073709551616}}}
                        end,
                    Small =
                        fun(Guarded) ->
                                {'orelse', Atomic(Guarded),
                                 {'=:=', Guarded, []},
                                 {'andalso', {is_tuple, Guarded},
                                  erlang:list_to_tuple(
                                    ['orelse', {'=:=', {size, Guarded}, 0}
                                     | [erlang:list_to_tuple(
                                          ['andalso',
                                           {'=:=', {size, Guarded}, S}
                                           | [Atomic({element, I, Guarded})
                                              || I <- lists:seq(1, S)]])
                                        || S <- lists:seq(1, 4)]])}}
                        end,
                    Heads = [erlang:list_to_tuple(
                               [case Position of
                                    Keypos -> '$1';
                                    _ -> '_'
                                end || Position <- lists:seq(1, Arity)])
                             || Arity <- lists:seq(Keypos, Keypos + 15)],
                    Element = {element, Keypos, '$_'},
                    %% Made when first used and not kept among the walk's
                    %% bindings (the spec is ~50K words, and the walk
                    %% collects in full each batch).
                    KeySpec = fun() -> lists:append(
                                [[{Head, [Small('$1')], ['$1']},
                                  {Head, [], [{const, Marker}]}]
                                 || Head <- Heads])
                        ++ [{'_', [Small(Element)], [Element]},
                            {'_', [], [{const, Marker}]}] end,
                    LargeSpec = fun() ->
                                        [{Head, [{'not', Small('$1')}],
                                          ['$1']} || Head <- Heads]
                                            ++ [{'_',
                                                 [{'not', Small(Element)}],
                                                 [Element]}]
                                end,
                    %% A bag's keys come from ets:first/1 and ets:next/2,
                    %% once a key: a select yields a key once an object,
                    %% and a hash table's select gives a whole slot at
                    %% once, whatever its limit (a million objects under
                    %% one key were a million keys copied). Unfixed,
                    %% next/2 fails on a key deleted meanwhile: the walk
                    %% stops there and says the table changed.
                    Bag = Type =:= bag orelse Type =:= duplicate_bag,
                    Pull =
                        fun(start) ->
                                case ets:first(Found) of
                                    '$end_of_table' -> {[], done};
                                    Key -> {[Key], {next, Key}}
                                end;
                           ({next, Key}) ->
                                try ets:next(Found, Key) of
                                    '$end_of_table' -> {[], done};
                                    Next -> {[Next], {next, Next}}
                                catch
                                    error:badarg ->
                                        case ets:info(Found, id) of
                                            undefined -> erlang:error(badarg);
                                            _ -> {[], changed}
                                        end
                                end;
                           (Ended) ->
                                {[], Ended}
                        end,
                    BagFill =
                        fun BagFill(Source, Got, N, Words, Room)
                              when N >= Room; Words >= 262144;
                                   Source =:= done; Source =:= changed ->
                                {Got, Source};
                            BagFill(Source, Got, N, Words, Room) ->
                                {Keys, Source2} = Pull(Source),
                                BagFill(Source2, Keys ++ Got,
                                        N + erlang:length(Keys),
                                        Words + lists:sum(
                                                  lists:map(
                                                    fun erts_debug:flat_size/1,
                                                    Keys)),
                                        Room)
                        end,
                    %% A set's: the small keys of a chunk taken as they
                    %% are, and each marker's key from the second select.
                    Careful =
                        fun Careful([], Bulk, Large, _, Got, _, _) ->
                                {Got, {[], Bulk, Large}};
                            Careful(Chunk, Bulk, Large, Room, Got, N, Words)
                              when N >= Room; Words >= 262144 ->
                                {Got, {Chunk, Bulk, Large}};
                            Careful([M | Chunk], Bulk, {[], Listing}, Room,
                                    Got, N, Words) when M =:= Marker ->
                                Listed = case Listing of
                                             start ->
                                                 ets:select(Found,
                                                            LargeSpec(), 1);
                                             {cont, C} ->
                                                 ets:select(C);
                                             done ->
                                                 '$end_of_table'
                                         end,
                                case Listed of
                                    {Larges, C2} ->
                                        Careful([M | Chunk], Bulk,
                                                {Larges, {cont, C2}}, Room,
                                                Got, N, Words);
                                    _ ->
                                        %% Gone since the chunk was read.
                                        Careful(Chunk, Bulk, {[], done},
                                                Room, Got, N, Words)
                                end;
                            Careful([M | Chunk], Bulk, {[K | Ks], Listing},
                                    Room, Got, N, Words) when M =:= Marker ->
                                Careful(Chunk, Bulk, {Ks, Listing}, Room,
                                        [K | Got], N + 1,
                                        Words + erts_debug:flat_size(K));
                            Careful([K | Chunk], Bulk, Large, Room, Got, N,
                                    Words) ->
                                Careful(Chunk, Bulk, Large, Room, [K | Got],
                                        N + 1, Words)
                        end,
                    SetFill =
                        fun SetFill({[], done, _}, _) ->
                                {[], done};
                            SetFill({[], Bulk, Large}, Room) ->
                                Listed = case Bulk of
                                             start ->
                                                 ets:select(
                                                   Found, KeySpec(),
                                                   erlang:min(500, Budget));
                                             {cont, C} ->
                                                 ets:select(C)
                                         end,
                                case Listed of
                                    {Chunk, C2} ->
                                        SetFill({Chunk, {cont, C2}, Large},
                                                Room);
                                    _ ->
                                        {[], done}
                                end;
                            SetFill({Chunk, Bulk, Large} = Source, Room) ->
                                case lists:member(Marker, Chunk) of
                                    false ->
                                        {Take, Rest} =
                                            lists:split(
                                              erlang:min(
                                                Room, erlang:length(Chunk)),
                                              Chunk),
                                        {Take, {Rest, Bulk, Large}};
                                    true ->
                                        case Careful(Chunk, Bulk, Large,
                                                     Room, [], 0, 0) of
                                            {[], Source2}
                                              when Source2 =/= Source ->
                                                SetFill(Source2, Room);
                                            Taken ->
                                                Taken
                                        end
                                end;
                            SetFill(Ended, _) ->
                                {[], Ended}
                        end,
                    Fill =
                        fun(Source, Room) when Bag ->
                                BagFill(Source, [], 0, 0, Room);
                           (Source, Room) ->
                                SetFill(Source, Room)
                        end,
                    %% A bag's key holds any number of objects, and
                    %% ets:lookup/2 copies them all (a million under one
                    %% key: the node +216 MB, whatever the budget); a
                    %% select on the key with a limit copies them all too
                    %% (its continuation keeps the slot's rest). So once
                    %% the table holds more objects than a batch may, a
                    %% key's objects are counted first (select_count/2
                    %% copies nothing, and yields), and a key is read
                    %% only with as many as a batch may hold: the most
                    %% words an object took so far, or the table's mean
                    %% as stored. A key with more is counted, not read,
                    %% and the answer says how many objects so.
                    %% A key holding an atom a pattern reads as a
                    %% variable ('_', '$1') is counted by a match over
                    %% the table: more than its own, never fewer.
                    Templates = [erlang:make_tuple(Arity, '_')
                                 || Arity <- lists:seq(Keypos, Keypos + 15)],
                    KeyposList = lists:duplicate(16, Keypos),
                    Nils = lists:duplicate(16, []),
                    Trues = lists:duplicate(16, [true]),
                    Portion =
                        fun Portion([], _, _, Take, Skip) ->
                                {lists:reverse(Take), [], Skip};
                            Portion([Key | Keys], Allow, Left, Take, Skip) ->
                                %% The key placed in each arity's
                                %% pattern in compiled passes (a
                                %% comprehension here took ~0.8 ms a key).
                                N = ets:select_count(
                                      Found,
                                      lists:zip3(
                                        lists:zipwith3(
                                          fun erlang:setelement/3,
                                          KeyposList, Templates,
                                          lists:duplicate(16, Key)),
                                        Nils, Trues)),
                                if
                                    N > Allow ->
                                        Portion(Keys, Allow, Left, Take,
                                                [N | Skip]);
                                    N > Left ->
                                        {lists:reverse(Take), [Key | Keys],
                                         Skip};
                                    true ->
                                        Portion(Keys, Allow, Left - N,
                                                [Key | Take], Skip)
                                end
                        end,
                    Stored = erlang:max(
                               1, lists:max([0 | [W || {memory, W} <- Info]])
                                   div erlang:max(1, Before)),
                    %% Then their objects, a batch at a time, each object
                    %% copied to us as it is once read (ets:lookup/2 in a
                    %% compiled pass): the batch is sized by the most
                    %% words one object took once read, so that a batch
                    %% is about 256K words (2 MB: our heap holds a few
                    %% times its batch while it reads one; measured, the
                    %% node rose 49 MB at 8 MB a batch). The first batch
                    %% is one object. Chunks sized by the stored words (a
                    %% compressed table stores 16 times less than it
                    %% reads) took a node from 497 MB to 2,868 MB.
                    Walk =
                        fun Walk(Pending, Source, Batch, Seen, Gone, Unread,
                                 Acc) ->
                                Late = erlang:monotonic_time(millisecond)
                                    > Deadline,
                                {Keys, Source2} =
                                    case Pending of
                                        _ when Late; Seen >= Budget ->
                                            {[], Source};
                                        [] ->
                                            Fill(Source,
                                                 erlang:min(Batch,
                                                            Budget - Seen));
                                        _ ->
                                            {Pending, Source}
                                    end,
                                case Keys of
                                    _ when Late ->
                                        {Acc, Seen, true, Gone, Unread};
                                    [] ->
                                        {Acc, Seen, false,
                                         Gone orelse Source2 =:= changed,
                                         Unread};
                                    _ ->
                                        %% The last batch is garbage now:
                                        %% a full collection gives it back
                                        %% (we hold little else). Left to
                                        %% the young heap's, each batch was
                                        %% promoted to the old heap, and
                                        %% the node rose 130 MB for a table
                                        %% read at 8 MB a batch.
                                        erlang:garbage_collect(),
                                        Most = erlang:max(
                                                 1, erlang:element(3, Acc)),
                                        Allow = erlang:max(
                                                  1, 262144 div erlang:max(
                                                                  Most,
                                                                  Stored)),
                                        {Take, Rest, Skipped} =
                                            case Bag andalso
                                                ets:info(Found, size)
                                                > Allow of
                                                true ->
                                                    Portion(Keys, Allow,
                                                            Allow, [], []);
                                                false ->
                                                    {Take0, Rest0} =
                                                        lists:split(
                                                          erlang:min(
                                                            Batch,
                                                            erlang:length(
                                                              Keys)),
                                                          Keys),
                                                    {Take0, Rest0, []}
                                            end,
                                        Lookups = lists:zipwith(
                                                    fun ets:lookup/2,
                                                    lists:duplicate(
                                                      erlang:length(Take),
                                                      Found),
                                                    Take),
                                        Objs = lists:sublist(
                                                 lists:append(Lookups),
                                                 Budget - Seen),
                                        Acc2 =
                                            case Objs of
                                                [] ->
                                                    Acc;
                                                _ ->
                                                    Inspect(
                                                      {objects,
                                                       lists:zip(
                                                         lists:zipwith(
                                                           fun erlang:element/2,
                                                           lists:duplicate(
                                                             erlang:length(
                                                               Objs),
                                                             Keypos),
                                                           Objs),
                                                         Objs),
                                                       Keypos, Acc})
                                            end,
                                        Most2 = erlang:max(
                                                  1, erlang:element(3, Acc2)),
                                        {UnreadKeys, UnreadObjects} = Unread,
                                        %% A key listed, its object gone
                                        %% by the time it was read: the
                                        %% table changed under the walk.
                                        Walk(Rest, Source2,
                                             erlang:max(1, erlang:min(
                                                             500,
                                                             262144
                                                             div Most2)),
                                             Seen + erlang:length(Objs),
                                             Gone orelse
                                                 lists:member([], Lookups),
                                             {UnreadKeys
                                              + erlang:length(Skipped),
                                              UnreadObjects
                                              + lists:sum(Skipped)},
                                             Acc2)
                                end
                        end,
                    Walked =
                        try
                            Walk([], case Bag of
                                         true -> start;
                                         false -> {[], start, {[], start}}
                                     end,
                                 1, 0, false, {0, 0}, {#{}, [], 0})
                        catch
                            %% Deleted while we read it.
                            error:badarg -> gone
                        end,
                    case Walked of
                        gone ->
                            {error, no_such_table};
                        {{Families, Top, _}, Seen, Late, Vanished,
                         Unread} ->
                            After = ets:info(Found, size),
                            #{table => Found, info => Info,
                              families => [{F, C, W, B,
                                            {PC, PU, PR}}
                                           || {F, {C, W, B, PC, PU, PR}}
                                                  <- maps:to_list(Families)],
                              largest => [{K, F, W, B}
                                          || {_, K, F, W, B} <- Top],
                              seen => Seen, late => Late,
                              unread => Unread,
                              changed => After =/= Before orelse Vanished,
                              wordsize => erlang:system_info(wordsize)}
                    end
            end
    end.
