%% What `beam-probe top` asks a node for, once per refresh.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_lib.erl (stock modules only; pmap/3, top/2, describe/1
%% and others/0 arrive as funs).
%%
%% A refresh ranks every process by one item, and shows the reductions
%% each did since the last refresh. That window needs the reductions of
%% the last pass, and they stay on the node, in a keeper: a process of
%% ours that lives between refreshes, makes each pass and keeps the last
%% pass's reductions (a list of {Pid, Reductions}: 40 bytes a process;
%% with the room its heap keeps between refreshes, ~96 bytes).
%% Only the top N rows cross to beam-probe. The keeper
%%
%%   * watches our connection (its processes on the attached node, or on
%%     the entry node of a --cluster fan-out) through a sentinel, which
%%     kills it, mid-pass too, when the connection goes: a pass of a
%%     million processes takes seconds, and a keeper that only looked
%%     between passes would outlive us by as much;
%%   * ends after IdleMs without a refresh (top paused, or gone quiet);
%%   * answers only messages carrying Secret, a reference beam-probe made;
%%   * collects its heap after each pass, and hibernates when the
%%     refreshes stop for a while (top paused), so that it holds one
%%     pass's reductions and, paused, nothing more.
-module(beam_probe_top).

-export([refresh/12, keep/4, pass/8]).

-type watch() :: {node, node()} | {process, pid(), [pid() | port()]}.
-type sort() :: memory | reductions | binary_memory | message_queue_len.
-type request() :: #{sort := sort(),
                     n := pos_integer(),
                     filter := binary()}.
-type header() :: #{memory := [{atom(), non_neg_integer()}],
                    process_count := non_neg_integer(),
                    process_limit := pos_integer(),
                    port_count := non_neg_integer(),
                    port_limit := pos_integer(),
                    atom_count := non_neg_integer(),
                    atom_limit := pos_integer(),
                    ets_count := non_neg_integer(),
                    run_queue := non_neg_integer(),
                    gc_count := non_neg_integer(),
                    gc_words_reclaimed := non_neg_integer(),
                    reductions := non_neg_integer(),
                    keeper_reductions := non_neg_integer(),
                    workers_reductions := non_neg_integer(),
                    uptime_ms := non_neg_integer(),
                    otp_release := string(),
                    schedulers_online := pos_integer(),
                    wordsize := pos_integer()}.
-type frame() :: #{keeper := pid(),
                   sort := sort(),
                   scanned := non_neg_integer(),
                   matched := non_neg_integer(),
                   rows := beam_probe_lib:rows(),
                   window_us := non_neg_integer() | none,
                   pass_us := non_neg_integer(),
                   header := header()}.

%% One refresh: the keeper of Keepers that is this node's and ours does
%% the pass Request asks for (a new keeper when there is none, or it
%% ended), and its frame is the answer. Watch is what guard/3 watches
%% (the keeper watches the same connection).
%% Keep and Pass are keep/4 and pass/8 as funs.
-spec refresh(watch(), [pid()], reference(), request(), timeout(),
              non_neg_integer(), fun(), fun(), fun(), fun(), fun(), fun()) ->
          frame().
refresh(Watch, Keepers, Secret, Request, IdleMs, Jobs, Keep, Pass, Pmap, Top,
        Describe, Others) ->
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               List -> List
           end,
    %% Our connection's processes (and its port over TCP): those of the
    %% attached node (its owner and controller), or under a fan-out those
    %% the entry node's guard found there, after its own watcher and
    %% worker.
    Links = case Watch of
                {node, Prober} ->
                    Owner = case net_kernel:node_info(Prober) of
                                {ok, Info} -> proplists:get_all_values(owner,
                                                                       Info);
                                _ -> []
                            end,
                    Owner ++ proplists:get_all_values(
                               Prober, erlang:system_info(dist_ctrl));
                {process, _, Fanning} ->
                    lists:nthtail(erlang:min(2, erlang:length(Fanning)),
                                  Fanning)
            end,
    Connection = lists:filter(fun erlang:is_pid/1, Links),
    Watched = case Connection of
                  [] ->
                      %% Nothing to watch: a keeper would outlive us.
                      erlang:exit(beam_probe_no_connection);
                  [First | _] ->
                      First
              end,
    %% Ours when it is alive here and watches our connection (a pid of a
    %% keeper that ended may name another process by now: it is sent
    %% nothing).
    Mine = fun(Keeper) ->
                   erlang:is_pid(Keeper)
                       andalso erlang:node(Keeper) =:= erlang:node()
                       andalso
                       case erlang:process_info(Keeper, monitors) of
                           {monitors, Monitors} ->
                               lists:member({process, Watched}, Monitors);
                           undefined ->
                               false
                       end
           end,
    Keeper = case lists:filter(Mine, Keepers) of
                 [Found | _] ->
                     Found;
                 [] ->
                     Work = fun(Asked, Previous, At) ->
                                    Pass(Asked, Previous, At, Jobs, Pmap,
                                         Top, Describe, Others)
                            end,
                     erlang:spawn(fun() ->
                                          Keep(Links, Secret, IdleMs, Work)
                                  end)
             end,
    Ref = erlang:monitor(process, Keeper),
    Keeper ! {Secret, refresh, erlang:self(), Ref, Request, Ours},
    receive
        {Ref, Frame} ->
            erlang:demonitor(Ref, [flush]),
            Frame;
        {'DOWN', Ref, process, Keeper, Reason} ->
            erlang:exit({beam_probe_keeper, Reason})
    end.

%% The keeper's life: a refresh at a time, each answered with Work's
%% frame, the last pass's reductions kept between them. Links are our
%% connection's processes and port: a sentinel watches the processes,
%% and this one. A refresh comes from a call (refresh/12, the first) or
%% straight from beam-probe, its own pid in From: no rpc, so rex does no
%% work of ours that the pass would count as the node's (a refresh by
%% rpc was ~1,300 of rex's reductions, measured on OTP 25).
-spec keep([pid() | port()], reference(), timeout(),
           fun((request(), list(), integer() | none) ->
                      {frame(), list(), integer()})) -> ok.
keep(Links, Secret, IdleMs, Work) ->
    Keeping = erlang:self(),
    Connection = lists:filter(fun erlang:is_pid/1, Links),
    %% The sentinel kills the keeper when our connection goes, whatever the
    %% keeper is doing, and ends with it.
    Sentinel = erlang:spawn(
                 fun() ->
                         lists:foreach(fun(P) -> erlang:monitor(process, P) end,
                                       [Keeping | Connection]),
                         receive
                             {'DOWN', _, _, _, _} ->
                                 erlang:exit(Keeping, kill)
                         end
                 end),
    %% Watched here too: a refresh knows its keeper by these monitors.
    lists:foreach(fun(P) -> erlang:monitor(process, P) end, Connection),
    %% The idle deadline is a timer's message (only the latest timer's
    %% counts), so that the keeper can hibernate meanwhile: a hibernating
    %% process waits for any message, with no timeout of its own.
    Idle = fun() -> erlang:start_timer(IdleMs, Keeping, {Secret, idle}) end,
    %% Past this many processes the keeper hibernates after every pass:
    %% the room a collected heap keeps is 2.5 times what it holds (141 MB
    %% at a million processes, against 38 MB hibernated; measured), and a
    %% pass of seconds pays for growing its heap again gladly. Below it,
    %% passes are short and come often, and that cost was a fifth of one
    %% (1.35x a proc-count pass at 100,000 processes, against 1.14x).
    Roomy = 200000,
    Loop = fun Loop(Previous, At, Timer) ->
                   %% Collected here, where the last pass's reductions
                   %% are all it holds (after a pass, the pass before's
                   %% were still bound: twice the memory, measured).
                   erlang:garbage_collect(),
                   receive
                       {Secret, refresh, From, Ref, Request, CallerOurs} ->
                           erlang:cancel_timer(Timer),
                           %% The call waiting on us, and our connection,
                           %% are ours too: not the node's to rank.
                           Ours = [Keeping, Sentinel | Links ++ CallerOurs],
                           erlang:put('$beam_probe_ours', Ours),
                           {Frame, Current, Now} = Work(Request, Previous, At),
                           %% noconnect: were beam-probe gone, a plain
                           %% send would make the node connect back to it.
                           erlang:send(From, {Ref, Frame}, [noconnect]),
                           case maps:get(scanned, Frame) > Roomy of
                               true ->
                                   erlang:hibernate(
                                     erlang, apply,
                                     [Loop, [Current, Now, Idle()]]);
                               false ->
                                   Loop(Current, Now, Idle())
                           end;
                       {timeout, Timer, {Secret, idle}} ->
                           ok;
                       {'DOWN', _, process, _, _} ->
                           ok
                   after IdleMs div 4 ->
                       %% Refreshes stopped (top paused): the heap shrinks
                       %% to what it holds.
                       erlang:hibernate(erlang, apply,
                                        [Loop, [Previous, At, Timer]])
                   end
           end,
    Loop([], none, Idle()).

%% One pass over every process (but ours): each one's reductions and the
%% item Request sorts by, read together by one process_info/2 call (in
%% pmap's slices, each ranking its own); the N first by that item, or by
%% the reductions done since the last pass (Previous, taken At); those N
%% described and read again for the columns top shows. Returns the frame,
%% this pass's reductions by pid and when it was taken.
-spec pass(request(), [{pid(), non_neg_integer()}], integer() | none,
           non_neg_integer(), fun(), fun(), fun(), fun()) ->
          {frame(), [{pid(), non_neg_integer()}], integer()}.
pass(#{sort := Sort, n := N, filter := Filter}, Previous, At, Jobs, Pmap,
     Top, Describe, Others) ->
    Started = erlang:monotonic_time(microsecond),
    All = Others(),
    %% Whether this node reads one dictionary key at a time (OTP 26.2+),
    %% as describe/1 finds out.
    Labels = maps:get(labels, Describe([])),
    %% What a filter is matched against: the names a process goes by,
    %% written in the external term format, where an atom's or a string's
    %% characters stand as they are; one compiled binary:match/2 a process.
    Named = [registered_name, initial_call]
        ++ [{dictionary, Key} || Labels,
                                 Key <- ['$process_label', '$initial_call',
                                         process_name]],
    Matching = ets:match_spec_compile([{{'$1', '$2'},
                                        [{'=/=', '$1', nomatch}],
                                        ['$2']}]),
    Chosen = case Filter of
                 <<>> ->
                     fun(Slice) -> Slice end;
                 _ ->
                     fun(Slice) ->
                             Count = erlang:length(Slice),
                             Names = lists:zipwith(fun erlang:process_info/2,
                                                   Slice,
                                                   lists:duplicate(Count,
                                                                   Named)),
                             Found = lists:zipwith(
                                       fun binary:match/2,
                                       lists:map(fun erlang:term_to_binary/1,
                                                 Names),
                                       lists:duplicate(Count, Filter)),
                             ets:match_spec_run(lists:zip(Found, Slice),
                                                Matching)
                     end
             end,
    Item = case Sort of
               reductions -> memory;
               binary_memory -> binary;
               _ -> Sort
           end,
    Spec = fun(Guard, Body) ->
                   ets:match_spec_compile(
                     [{{[{reductions, '$1'}, {'_', '$2'}], '$3'}, Guard,
                       [Body]}])
           end,
    Reductions = Spec([], {{'$3', '$1'}}),
    Values = case Sort of
                 binary_memory -> Spec([{'=/=', '$2', []}], {{'$2', '$3'}});
                 _ -> Spec([], {{'$2', '$3'}})
             end,
    Slices = Pmap(fun(Slice0) ->
                          Slice = Chosen(Slice0),
                          Infos = lists:zipwith(
                                    fun erlang:process_info/2, Slice,
                                    lists:duplicate(erlang:length(Slice),
                                                    [reductions, Item])),
                          Joined = lists:zip(Infos, Slice),
                          Pairs = ets:match_spec_run(Joined, Values),
                          Ranked =
                              case Sort of
                                  reductions ->
                                      [];
                                  binary_memory ->
                                      %% Each binary is {Id, Size, Refs}:
                                      %% recon's figure, a size a
                                      %% reference.
                                      {Lists, Holders} = lists:unzip(Pairs),
                                      Sizes = lists:zipwith(
                                                fun erlang:element/2,
                                                lists:duplicate(
                                                  erlang:length(Lists), 2),
                                                lists:map(fun lists:unzip3/1,
                                                          Lists)),
                                      Top(lists:zip(lists:map(fun lists:sum/1,
                                                              Sizes),
                                                    Holders),
                                          N);
                                  _ ->
                                      Top(Pairs, N)
                              end,
                          Kept = ets:match_spec_run(Joined, Reductions),
                          %% The worker's reductions so far: its last
                          %% slice's are its work for the pass.
                          {reductions, Spent} =
                              erlang:process_info(erlang:self(), reductions),
                          {Kept, Ranked,
                           {erlang:length(Slice), {erlang:self(), Spent}}}
                  end,
                  All,
                  Jobs),
    {PerSlice, Tops, Tally} = lists:unzip3(Slices),
    {Counts, WorkersSpent} = lists:unzip(Tally),
    Workers = maps:values(maps:from_list(WorkersSpent)),
    %% Kept as a list for the next pass: a map of it cost 25 ms a pass at
    %% 100,000 processes (measured), and only a ranking by reductions
    %% needs one; the rows shown look theirs up in one compiled pass.
    Current = lists:append(PerSlice),
    Shown = case Sort of
                reductions ->
                    {Pids, Reds} = lists:unzip(Current),
                    Many = erlang:length(Pids),
                    Before = lists:zipwith3(fun maps:get/3, Pids,
                                            lists:duplicate(
                                              Many,
                                              maps:from_list(Previous)),
                                            lists:duplicate(Many, none)),
                    %% A process born since the last pass did all its
                    %% reductions in the window; so did one whose pid
                    %% was reused (fewer than before).
                    Top(ets:match_spec_run(
                          lists:zip3(Reds, Before, Pids),
                          ets:match_spec_compile(
                            [{{'$1', '$2', '$3'},
                              [{is_integer, '$2'}, {'>=', '$1', '$2'}],
                              [{{{'-', '$1', '$2'}, '$3'}}]},
                             {{'$1', '_', '$3'}, [], [{{'$1', '$3'}}]}])),
                        N);
                _ ->
                    Top(lists:append(Tops), N)
            end,
    Rows = Describe(Shown),
    RowPids = maps:get(pids, Rows),
    %% The columns of the N rows, read again now (a few processes); their
    %% reductions now, against the last pass's: one compiled look-up in
    %% it for all of them.
    Columns = lists:map(
                fun(Info) ->
                        case Info of
                            [{memory, Memory}, {message_queue_len, Queue},
                             {binary, Binaries}, {reductions, Did}] ->
                                {_, Sizes, _} = lists:unzip3(Binaries),
                                {Memory, Queue, lists:sum(Sizes), Did};
                            _ ->
                                {0, 0, 0, none}
                        end
                end,
                lists:zipwith(fun erlang:process_info/2, RowPids,
                              lists:duplicate(erlang:length(RowPids),
                                              [memory, message_queue_len,
                                               binary, reductions]))),
    Memories = [M || {M, _, _, _} <- Columns],
    Queues = [Q || {_, Q, _, _} <- Columns],
    BinaryMemories = [B || {_, _, B, _} <- Columns],
    Now = maps:from_list(lists:zip(RowPids, [R || {_, _, _, R} <- Columns])),
    RowSet = maps:from_list([{Pid, true} || Pid <- RowPids]),
    Then = maps:from_list(
             ets:match_spec_run(
               Previous,
               ets:match_spec_compile(
                 [{{'$1', '_'}, [{is_map_key, '$1', {const, RowSet}}],
                   ['$_']}]))),
    Done = fun(Pid) ->
                   case {maps:get(Pid, Now, none),
                         maps:get(Pid, Then, none)} of
                       {Later, Earlier} when erlang:is_integer(Later),
                                             erlang:is_integer(Earlier),
                                             Later >= Earlier ->
                           Later - Earlier;
                       {Later, _} when erlang:is_integer(Later),
                                       At =/= none ->
                           Later;
                       _ ->
                           none
                   end
           end,
    Ours = erlang:get('$beam_probe_ours'),
    {Gcs, Words, _} = erlang:statistics(garbage_collection),
    Total = erlang:element(1, erlang:statistics(reductions)),
    {reductions, OwnNow} = erlang:process_info(erlang:self(), reductions),
    Ended = erlang:monotonic_time(microsecond),
    Header = #{memory => erlang:memory(),
               process_count => erlang:length(All),
               process_limit => erlang:system_info(process_limit),
               port_count => erlang:system_info(port_count)
                   - erlang:length(lists:filter(fun erlang:is_port/1, Ours)),
               port_limit => erlang:system_info(port_limit),
               atom_count => erlang:system_info(atom_count),
               atom_limit => erlang:system_info(atom_limit),
               ets_count => erlang:length(ets:all()),
               run_queue => erlang:statistics(run_queue),
               gc_count => Gcs,
               gc_words_reclaimed => Words,
               reductions => Total,
               %% Our own work, which the node's total counts: the
               %% keeper's so far (its collections included), and this
               %% pass's workers'.
               keeper_reductions => OwnNow,
               workers_reductions => lists:sum(Workers),
               uptime_ms => erlang:element(1,
                                           erlang:statistics(wall_clock)),
               otp_release => erlang:system_info(otp_release),
               schedulers_online => erlang:system_info(schedulers_online),
               wordsize => erlang:system_info(wordsize)},
    Frame = #{keeper => erlang:self(),
              sort => Sort,
              scanned => erlang:length(All),
              matched => lists:sum(Counts),
              rows => Rows#{memory => Memories,
                            message_queue_len => Queues,
                            binary_memory => BinaryMemories,
                            reductions => lists:map(Done, RowPids)},
              window_us => case At of
                               none -> none;
                               _ -> Started - At
                           end,
              pass_us => Ended - Started,
              header => Header},
    {Frame, Current, Started}.
