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
%% pass's reductions: a slice's {Pid, Reductions} compressed by the
%% worker that read them (term_to_binary level 1: 2.3-2.6 bytes a process
%% on an idle node, where the list was 40 and a map ~30; issue 39: the
%% list, and the per-slice lists sent to the keeper, raised a node of
%% 300,000 processes by 97-111 MB a pass). Beside them, the reductions of
%% the few that ranked best (the next frame's rows, most likely), so that
%% a frame looks its rows up without reading every chunk.
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

-export([refresh/14, keep/4, pass/9, slice/6]).

-type watch() :: {node, node()} | {process, pid(), [pid() | port()]}.
-type sort() :: memory | reductions | binary_memory | message_queue_len.
%% filter: the patterns a name is matched against (the text in UTF-8,
%% and in latin1 where it can be: OTP 25 writes latin1 atoms so), or []
%% for every process; idle: how long the keeper waits for the next;
%% caller: the reductions of the call that asks, when one does.
-type request() :: #{sort := sort(),
                     n := pos_integer(),
                     filter := [binary()],
                     idle := pos_integer(),
                     caller => non_neg_integer()}.
%% What the keeper keeps from one pass to the next: the pass's
%% reductions, a compressed [{Pid, Reductions}] a slice, in the pass's
%% order; those of the processes that ranked best, by pid; when it
%% ended, the node's counters then, and what the keeper itself did since
%% (its collection, its hibernation).
-type state() :: #{chunks := [binary()],
                   seen := #{pid() => non_neg_integer()},
                   at := integer() | none,
                   counters := #{reductions := non_neg_integer(),
                                 gcs := non_neg_integer(),
                                 words := non_neg_integer(),
                                 own := non_neg_integer(),
                                 time := integer()} | none,
                   ours := #{gcs := non_neg_integer(),
                             words := non_neg_integer()}}.
-type header() :: #{memory := [{atom(), non_neg_integer()}],
                    process_count := non_neg_integer(),
                    process_limit := pos_integer(),
                    port_count := non_neg_integer(),
                    port_limit := pos_integer(),
                    atom_count := non_neg_integer(),
                    atom_limit := pos_integer(),
                    ets_count := non_neg_integer(),
                    run_queue := non_neg_integer(),
                    gap := #{us := non_neg_integer(),
                             reductions := integer(),
                             gcs := integer(),
                             words := integer()} | none,
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
%% Keep, Pass and Slice are keep/4, pass/9 and slice/6 as funs.
-spec refresh(watch(), [pid()], reference(), request(), timeout(),
              non_neg_integer(), fun(), fun(), fun(), fun(), fun(), fun(),
              fun(), fun()) -> frame().
refresh(Watch, Keepers, Secret, Request, IdleMs, Jobs, Keep, Pass, Pmap, Top,
        Describe, Others, Settled, Slice) ->
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [erlang:self()];
               List -> List
           end,
    %% Our connection's processes (and its port over TCP), as guard/3
    %% found them: after its watcher and worker in the list it keeps,
    %% this call's, or under a fan-out the entry node's call's.
    Guarded = case Watch of
                  {node, _} -> Ours;
                  {process, _, Fanning} -> Fanning
              end,
    Links = lists:nthtail(erlang:min(2, erlang:length(Guarded)), Guarded),
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
                     Work = fun(Asked, Kept) ->
                                    Pass(Asked, Kept, Jobs, Pmap, Top,
                                         Describe, Others, Settled, Slice)
                            end,
                     erlang:spawn(fun() ->
                                          Keep(Links, Secret, IdleMs, Work)
                                  end)
             end,
    %% This call's own work so far (erl_eval made its funs in the guard's
    %% watcher, then this worker; under a fan-out, the entry's call
    %% too): done between two passes, and not the node's.
    Calls = lists:usort(lists:sublist(Ours, 2)
                        ++ lists:sublist(Guarded, 2)),
    Spent = lists:sum([R || P <- Calls, erlang:is_pid(P),
                            erlang:node(P) =:= erlang:node(),
                            {reductions, R} <- [erlang:process_info(
                                                  P, reductions)]]),
    Ref = erlang:monitor(process, Keeper),
    Keeper ! {Secret, refresh, erlang:self(), Ref, Request#{caller => Spent},
              Ours},
    receive
        {Ref, Frame} ->
            erlang:demonitor(Ref, [flush]),
            Frame;
        {'DOWN', Ref, process, Keeper, Reason} ->
            erlang:exit({beam_probe_keeper, Reason})
    end.

%% The keeper's life: a refresh at a time, each answered with Work's
%% frame, what a pass keeps for the next held between them. Links are
%% our connection's processes and port: a sentinel watches the
%% processes, and this one. A refresh comes from a call (refresh/14, the
%% first) or straight from beam-probe, its own pid in From: no rpc, so
%% rex does no work of ours that the pass would count as the node's (a
%% refresh by rpc was ~1,300 of rex's reductions, measured on OTP 25).
%% Of the refreshes waiting, only the newest is made: the others' askers
%% have given up on them.
-spec keep([pid() | port()], reference(), timeout(),
           fun((request(), state()) -> {frame(), state()})) -> ok.
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
    Idle = fun(Ms) -> erlang:start_timer(Ms, Keeping, {Secret, idle}) end,
    Newest = fun Newest(Asked) ->
                     receive
                         {Secret, refresh, _, _, _, _} = Later ->
                             Newest(Later)
                     after 0 ->
                         Asked
                     end
             end,
    %% Past this many processes the keeper hibernates after every pass:
    %% the room a collected heap keeps is 2.5 times what it holds (141 MB
    %% at a million processes, against 38 MB hibernated; measured), and a
    %% pass of seconds pays for growing its heap again gladly. Below it,
    %% passes are short and come often, and that cost was a fifth of one
    %% (1.35x a proc-count pass at 100,000 processes, against 1.14x).
    Roomy = 200000,
    Loop = fun Loop(Kept, Timer) ->
                   %% Collected here, where the last pass's reductions
                   %% are all it holds (after a pass, the pass before's
                   %% were still bound: twice the memory, measured). The
                   %% collection is the keeper's, not the node's: counted,
                   %% for the pass to leave out (a hibernation's is not
                   %% counted by the node, measured on OTP 25).
                   {GcsBefore, WordsBefore, _} =
                       erlang:statistics(garbage_collection),
                   erlang:garbage_collect(),
                   {GcsAfter, WordsAfter, _} =
                       erlang:statistics(garbage_collection),
                   #{ours := Ours0} = Kept,
                   Ours = #{gcs => maps:get(gcs, Ours0)
                                + GcsAfter - GcsBefore,
                            words => maps:get(words, Ours0)
                                + WordsAfter - WordsBefore},
                   receive
                       {Secret, refresh, _, _, _, _} = First ->
                           {Secret, refresh, From, Ref, Request, CallerOurs} =
                               Newest(First),
                           erlang:cancel_timer(Timer),
                           %% The call waiting on us, and our connection,
                           %% are ours too: not the node's to rank.
                           erlang:put('$beam_probe_ours',
                                      [Keeping, Sentinel | Links ++ CallerOurs]),
                           {Frame, Next} = Work(Request, Kept#{ours => Ours}),
                           %% noconnect: were beam-probe gone, a plain
                           %% send would make the node connect back to it.
                           erlang:send(From, {Ref, Frame}, [noconnect]),
                           Again = Idle(maps:get(idle, Request, IdleMs)),
                           case maps:get(scanned, Frame) > Roomy of
                               true ->
                                   erlang:hibernate(
                                     erlang, apply, [Loop, [Next, Again]]);
                               false ->
                                   Loop(Next, Again)
                           end;
                       {timeout, Timer, {Secret, idle}} ->
                           ok;
                       {timeout, _, {Secret, idle}} ->
                           %% An earlier timer's, fired as a refresh came:
                           %% left in the mailbox, it would wake the
                           %% keeper from every hibernation.
                           Loop(Kept#{ours => Ours}, Timer);
                       {'DOWN', _, process, _, _} ->
                           ok
                   after IdleMs div 4 ->
                       %% Refreshes stopped (top paused): the heap shrinks
                       %% to what it holds.
                       erlang:hibernate(erlang, apply,
                                        [Loop, [Kept#{ours => Ours}, Timer]])
                   end
           end,
    Loop(#{chunks => [], seen => #{}, at => none, counters => none,
           ours => #{gcs => 0, words => 0}},
         Idle(IdleMs)).

%% One pass over every process (but ours): each one's reductions and the
%% item Request sorts by, read together by one process_info/2 call (in
%% pmap's slices, each ranking its own); the N first by that item, or by
%% the reductions done since the last pass, among those the filter lets
%% through; those N described and read again for the columns top shows.
%% The reductions of every process are kept, filtered or not, so that a
%% filter changed or cleared still has its window. Returns the frame and
%% what the next pass needs.
-spec pass(request(), state(), non_neg_integer(), fun(), fun(), fun(),
           fun(), fun(), fun()) -> {frame(), state()}.
pass(#{sort := Sort, n := N, filter := Filter} = Request, Kept, Jobs, Pmap,
     Top, Describe, Others, Settled, Slice) ->
    #{chunks := Previous, seen := Seen, at := At, counters := Before,
      ours := Ours} = Kept,
    Started = erlang:monotonic_time(microsecond),
    Counters = fun() ->
                       {Gcs, Words, _} = erlang:statistics(garbage_collection),
                       {reductions, Own} =
                           erlang:process_info(erlang:self(), reductions),
                       #{reductions => erlang:element(
                                         1, erlang:statistics(reductions)),
                         gcs => Gcs, words => Words, own => Own,
                         time => erlang:monotonic_time(microsecond)}
               end,
    %% The node's own figures between the last pass and this one: the
    %% counters then and now, less the keeper's work between (its
    %% reductions, its collections). Our pass itself is never in it.
    Now = Counters(),
    Gap = case Before of
              none ->
                  none;
              _ ->
                  #{us => maps:get(time, Now) - maps:get(time, Before),
                    reductions => maps:get(reductions, Now)
                        - maps:get(reductions, Before)
                        - (maps:get(own, Now) - maps:get(own, Before))
                        - maps:get(caller, Request, 0),
                    gcs => maps:get(gcs, Now) - maps:get(gcs, Before)
                        - maps:get(gcs, Ours),
                    words => maps:get(words, Now) - maps:get(words, Before)
                        - maps:get(words, Ours)}
          end,
    %% Whether this node reads one dictionary key at a time (OTP 26.2+),
    %% as describe/1 finds out. Before, describe/1 copies the dictionary
    %% of each row shown, within a budget that is this pass's, and keeps
    %% the names in this keeper's dictionary, so a row is copied once
    %% while it lives.
    erlang:erase('$beam_probe_names_spent'),
    Labels = maps:get(labels, Describe([])),
    %% A filter before OTP 26.2 cannot read every process's dictionary
    %% each pass: it matches the names kept (Known: the rows shown, and
    %% those read for the filter), and the slices list the proc_lib
    %% processes it does not know yet (from the initial call they read
    %% for the filter anyway), whose names are read after the rows shown
    %% (below), for the next pass.
    Stored = case erlang:get('$beam_probe_names') of
                 Map when erlang:is_map(Map) -> Map;
                 _ -> #{}
             end,
    %% The names of processes that ended are dropped (each of the names
    %% kept, at most 10,000, asked whether its process lives).
    Labels orelse erlang:put('$beam_probe_names',
                             maps:with(lists:filter(fun erlang:is_process_alive/1,
                                                    maps:keys(Stored)),
                                       Stored)),
    Known = case Labels orelse Filter =:= [] of
                true -> #{};
                false -> erlang:get('$beam_probe_names')
            end,
    %% A process born since the last pass did all its reductions in the
    %% window; so did one whose pid was reused (fewer than before). Each
    %% ranked as {Done, {Pid, Earlier}}: the frame's rows keep what their
    %% window was taken from. Those not found yet are apart: [{Pid, R}].
    Window = ets:match_spec_compile(
               [{{'$1', '$2', '$3'},
                 [{is_integer, '$2'}, {'>=', '$1', '$2'}],
                 [{{{'-', '$1', '$2'}, {{'$3', '$2'}}}}]},
                {{'$1', '$2', '$3'}, [], [{{'$1', {{'$3', '$2'}}}}]}]),
    Hit = ets:match_spec_compile(
            [{{'$1', '$2', '$3'},
              [{is_integer, '$2'}, {'>=', '$1', '$2'}],
              [{{{'-', '$1', '$2'}, {{'$3', '$2'}}}}]},
             {{'$1', '$2', '$3'}, [{is_integer, '$2'}],
              [{{'$1', {{'$3', '$2'}}}}]}]),
    Absent = ets:match_spec_compile([{{'$1', none, '$3'}, [],
                                      [{{'$3', '$1'}}]}]),
    %% Ranked by reductions, every process's of the last pass are needed,
    %% and no map of them all is made (~30 bytes a process; 37 MB at the
    %% peak of a pass over 300,000 processes, measured): the walk is in
    %% process-table order, pass after pass, so a slice's processes are
    %% in the last pass's chunk at its place, or the next. Each slice's
    %% {Pid, Reductions} are looked up as pmap folds them, in order, among
    %% the last pass's chunks decoded so far and not yet matched (Left),
    %% up to two more decoded until the slice's last process is among
    %% them. Left holds a chunk or two, and the last pass's processes that
    %% ended; Late, those not found where they were looked for while
    %% chunks were left to decode (born since, mostly), looked up at the
    %% end among all of Left and the chunks not decoded yet. Each chunk
    %% is decoded once. Left and Late grow with the processes that ended
    %% or were born between two passes, not with the node.
    Fill = fun Fill(Left, Rest, _, 0) ->
                   {Left, Rest};
               Fill(Left, [], _, _) ->
                   {Left, []};
               Fill(Left, [Chunk | Rest], Final, Loads) ->
                   case maps:is_key(Final, Left) of
                       true ->
                           {Left, [Chunk | Rest]};
                       false ->
                           Fill(maps:merge(maps:from_list(
                                             erlang:binary_to_term(Chunk)),
                                           Left),
                                Rest, Final, Loads - 1)
                   end
           end,
    Join = fun({Chunk, Read, [], {_, Let, _} = Tally},
               {Left0, Rest0, Best, Late, Held}) ->
                   {Left1, Rest1} = case Read of
                                        [] ->
                                            {Left0, Rest0};
                                        _ ->
                                            Fill(Left0, Rest0,
                                                 erlang:element(
                                                   1, lists:last(Read)),
                                                 2)
                                    end,
                   {Pids, Reds} = lists:unzip(Read),
                   Many = erlang:length(Pids),
                   Triples0 = lists:zip3(Reds,
                                         lists:zipwith3(
                                           fun maps:get/3, Pids,
                                           lists:duplicate(Many, Left1),
                                           lists:duplicate(Many, none)),
                                         Pids),
                   Triples = case Let of
                                 all ->
                                     Triples0;
                                 _ ->
                                     ets:match_spec_run(
                                       Triples0,
                                       ets:match_spec_compile(
                                         [{{'_', '_', '$1'},
                                           [{is_map_key, '$1', {const, Let}}],
                                           ['$_']}]))
                             end,
                   %% Once every chunk of the last pass is decoded, one
                   %% not in Left was born since (on the first pass,
                   %% every process): ranked at once, not kept for later.
                   {Ranked, Later} =
                       case Rest1 of
                           [] ->
                               {ets:match_spec_run(Triples, Window), []};
                           _ ->
                               {ets:match_spec_run(Triples, Hit),
                                ets:match_spec_run(Triples, Absent)}
                       end,
                   {maps:without(Pids, Left1), Rest1,
                    Top(Best ++ Top(Ranked, N), N), [Later | Late],
                    [{Chunk, [], [], Tally} | Held]}
           end,
    %% By any other item, each slice's 2N best with their reductions
    %% ({Value, {Pid, Reductions}}) join those of the slices before it,
    %% in order, 32 slices at a time: the keeper holds at most 33 times
    %% 2N of them, not 2N a slice. (The N best of the 2N best are the N
    %% best, ties as well: top/2 keeps the last of equals in order.) Not
    %% a slice at a time: pmap folds as it hands out slices, and a top
    %% made each time kept the workers waiting (300,000 processes: 998 ms
    %% a pass against 841, measured).
    Gather = fun({Chunk, Ranked, [], Tally}, {Likely, Count, Held}) ->
                     {case Count rem 32 of
                          31 ->
                              [Top(lists:append(lists:reverse(
                                                  [Ranked | Likely])),
                                   2 * N)];
                          _ ->
                              [Ranked | Likely]
                      end,
                      Count + 1, [{Chunk, [], [], Tally} | Held]}
             end,
    %% The slice's work is made by slice/6, where nothing of this pass is
    %% bound: a fun made here would carry every binding of this function
    %% into each worker, the last pass's reductions among them (erl_eval
    %% keeps them all: 3 million words a worker at 100,000 processes, and
    %% twice the pass's time, measured).
    Work = Slice(Sort, N, Filter, Labels, Top, Known),
    {Slices, Scanned, Folded} =
        case Sort of
            reductions ->
                {{LeftJ, RestJ, BestJ, LateJ, HeldJ}, Joins} =
                    Pmap(Work, Join, {#{}, Previous, [], [], []}, Others(),
                         Jobs),
                {lists:reverse(HeldJ), Joins, {LeftJ, RestJ, BestJ, LateJ}};
            _ ->
                {{LikelyG, _, HeldG}, Gathered} =
                    Pmap(Work, Gather, {[], 0, []}, Others(), Jobs),
                {lists:reverse(HeldG), Gathered,
                 Top(lists:append(lists:reverse(LikelyG)), 2 * N)}
        end,
    %% Per slice: its reductions compressed, and its tally.
    Chunks = [Chunk || {Chunk, _, _, _} <- Slices],
    Lets = [Let || {_, _, _, {_, Let, _}} <- Slices],
    Unknown = [Unread || {_, _, _, {_, _, Unread}} <- Slices],
    Matched = case Filter of
                  [] -> lists:sum([Count
                                   || {_, _, _, {Count, _, _}} <- Slices]);
                  _ -> lists:sum(lists:map(fun maps:size/1, Lets))
              end,
    %% Whether the reductions of Pids last pass are in Found.
    Holds = fun(Pids, Found) ->
                    lists:all(fun(Pid) -> maps:is_key(Pid, Found) end, Pids)
            end,
    %% The reductions last pass of Pids (those of them it read), from
    %% its chunks, one decoded at a time, until every one is found (a
    %% process born since is in none: every chunk is read, ~60 ms at
    %% 300,000 processes, measured; none is held beyond its look-up).
    Earliest = fun(Pids, Found0) ->
                       Wanted = maps:from_list([{Pid, true} || Pid <- Pids]),
                       Spec = ets:match_spec_compile(
                                [{{'$1', '_'},
                                  [{is_map_key, '$1', {const, Wanted}}],
                                  ['$_']}]),
                       Look = fun Look([], Found) ->
                                      Found;
                                  Look([Chunk | Rest], Found) ->
                                      case Holds(Pids, Found) of
                                          true ->
                                              Found;
                                          false ->
                                              Look(Rest,
                                                   maps:merge(
                                                     Found,
                                                     maps:from_list(
                                                       ets:match_spec_run(
                                                         erlang:binary_to_term(
                                                           Chunk),
                                                         Spec))))
                                      end
                              end,
                       Look(Previous, Found0)
               end,
    %% The N shown, and the reductions last pass of those of them it
    %% read, by pid.
    {Shown, Then} =
        case Sort of
            reductions ->
                {Left2, Rest2, Best2, Late2} = Folded,
                Unfound = lists:append(lists:reverse(Late2)),
                Last = case Unfound of
                           [] ->
                               #{};
                           _ ->
                               lists:foldl(
                                 fun(Chunk, Map) ->
                                         maps:merge(
                                           maps:from_list(
                                             erlang:binary_to_term(Chunk)),
                                           Map)
                                 end,
                                 Left2, Rest2)
                       end,
                {LatePids, LateReds} = lists:unzip(Unfound),
                Lately = erlang:length(LatePids),
                ByWindow = Top(Best2
                               ++ ets:match_spec_run(
                                    lists:zip3(
                                      LateReds,
                                      lists:zipwith3(
                                        fun maps:get/3, LatePids,
                                        lists:duplicate(Lately, Last),
                                        lists:duplicate(Lately, none)),
                                      LatePids),
                                    Window),
                               N),
                {[{Done, Pid} || {Done, {Pid, _}} <- ByWindow],
                 maps:from_list([{Pid, Earlier}
                                 || {_, {Pid, Earlier}} <- ByWindow,
                                    erlang:is_integer(Earlier)])};
            _ ->
                ByItem = [{Value, Pid}
                          || {Value, {Pid, _}} <- Top(Folded, N)],
                RankedPids = [Pid || {_, Pid} <- ByItem],
                Kept0 = maps:with(RankedPids, Seen),
                {ByItem, case Holds(RankedPids, Kept0) of
                             true -> Kept0;
                             false -> Earliest(RankedPids, Kept0)
                         end}
        end,
    %% What the next frame looks its rows up in first: the reductions of
    %% the 2N that ranked best by this pass's item (their slices read
    %% them with the ranking), where the next frame's N most likely are.
    Next = case Sort of
               reductions ->
                   #{};
               _ ->
                   maps:from_list([{Pid, Reductions}
                                   || {_, {Pid, Reductions}} <- Folded])
           end,
    Rows = Describe(Shown),
    %% Then, with what is left of the pass's budget, the names of up to
    %% FilterReads proc_lib processes the filter does not know yet (the
    %% ones whose initial call says nothing), in pid order from where the
    %% last pass stopped (one left unnamed for its heap is not read again
    %% until the others have been): a broker's queues are all found
    %% within a few passes (README, top: the cost measured).
    FilterReads = 2000,
    case lists:append(Unknown) of
        [] ->
            ok;
        Unread ->
            %% undefined at first: every pid sorts after an atom.
            Resume = erlang:get('$beam_probe_names_from'),
            Part = fun(Guard) ->
                           ets:match_spec_run(
                             Unread,
                             ets:match_spec_compile(
                               [{'$1', [{Guard, '$1', {const, Resume}}],
                                 ['$1']}]))
                   end,
            Batch = lists:sublist(Part('>') ++ Part('=<'), FilterReads),
            erlang:put('$beam_probe_names_from', lists:last(Batch)),
            Describe(lists:zip(lists:duplicate(erlang:length(Batch), 0),
                               Batch))
    end,
    RowPids = maps:get(pids, Rows),
    %% The columns of the N rows, read again now (a few processes); their
    %% reductions now, against the last pass's: one compiled look-up in
    %% it for all of them.
    Columns = lists:map(
                fun(Info) ->
                        case Info of
                            [{memory, Memory}, {message_queue_len, Queue},
                             {binary, Binaries}, {reductions, Did}] ->
                                %% Each binary once, as the ranking;
                                %% the sizes alone (a row may list
                                %% 10M references: unzip3/1 took
                                %% seconds, issue 39 item 4).
                                Sizes = ets:match_spec_run(
                                          lists:ukeysort(1, Binaries),
                                          ets:match_spec_compile(
                                            [{{'_', '$1', '_'}, [],
                                              ['$1']}])),
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
    RowsNow = maps:from_list(lists:zip(RowPids,
                                       [R || {_, _, _, R} <- Columns])),
    RowsThen = Then,
    Done = fun(Pid) ->
                   case {maps:get(Pid, RowsNow, none),
                         maps:get(Pid, RowsThen, none)} of
                       {To, From} when erlang:is_integer(To),
                                       erlang:is_integer(From),
                                       To >= From ->
                           To - From;
                       {To, _} when erlang:is_integer(To), At =/= none ->
                           To;
                       _ ->
                           none
                   end
           end,
    %% Our connection's port (twice in the list: the call's and the
    %% keeper's own) is not the node's; a port of the entry node, under
    %% a fan-out, is not this node's.
    OurPorts = lists:usort([P || P <- erlang:get('$beam_probe_ours'),
                                 erlang:is_port(P),
                                 erlang:node(P) =:= erlang:node()]),
    %% Without the keeper's own heap, and once the workers' are freed.
    Memory = Settled(false),
    After = Counters(),
    Ended = maps:get(time, After),
    Header = #{memory => Memory,
               process_count => Scanned,
               process_limit => erlang:system_info(process_limit),
               port_count => erlang:system_info(port_count)
                   - erlang:length(OurPorts),
               port_limit => erlang:system_info(port_limit),
               atom_count => erlang:system_info(atom_count),
               atom_limit => erlang:system_info(atom_limit),
               ets_count => erlang:length(ets:all()),
               run_queue => erlang:statistics(run_queue),
               gap => Gap,
               uptime_ms => erlang:element(1,
                                           erlang:statistics(wall_clock)),
               otp_release => erlang:system_info(otp_release),
               schedulers_online => erlang:system_info(schedulers_online),
               wordsize => erlang:system_info(wordsize)},
    Frame = #{keeper => erlang:self(),
              sort => Sort,
              scanned => Scanned,
              matched => Matched,
              rows => Rows#{memory => Memories,
                            message_queue_len => Queues,
                            %% Not recon's binary_memory: each
                            %% binary once (proc-count shows both).
                            binary_memory => BinaryMemories,
                            reductions => lists:map(Done, RowPids)},
              window_us => case At of
                               none -> none;
                               _ -> Started - At
                           end,
              pass_us => Ended - Started,
              header => Header},
    {Frame, #{chunks => Chunks, seen => Next, at => Started,
              counters => After,
              ours => #{gcs => 0, words => 0}}}.

%% The work of one slice of a pass, as a fun for pmap/3: each process's
%% reductions and the item Sort ranks by, read by one process_info/2 call
%% each; the reductions of every process, compressed (what the keeper
%% keeps of them); the slice's 2N first by that item among those Filter
%% lets through, with their reductions (ranked by reductions, every
%% process's reductions instead); and how many it read.
%% Known: the names describe/1 read from processes' dictionaries (before
%% OTP 26.2; pass/9), by pid, matched as those read one key at a time;
%% with a filter there, the slice also lists its proc_lib processes not
%% in Known, for pass/9 to read.
-spec slice(sort(), pos_integer(), [binary()], boolean(), fun(),
            #{pid() => {term(), term(), term()}}) ->
          fun(([pid()]) -> {binary(), list(), [],
                            {non_neg_integer(), all | map(), [pid()]}}).
slice(Sort, N, Filter, Labels, Top, Known) ->
    %% What a filter is matched against: each name a process goes by
    %% (registered name; initial call and proc_lib's, as module and
    %% function; label; process_name), encoded alone in the external term
    %% format, where an atom's, a string's or a binary's characters stand
    %% as they are and an atom's end the encoding: no tag byte after a
    %% name to be matched with it (encoded together, `pa` matched every
    %% proc_lib process: init_p, then the tag of its arity). What a
    %% process does not have (undefined, []), and proc_lib's own
    %% init_p, which every behaviour's process starts in, are no names.
    %% Compiled calls only: a few per process.
    Named = [registered_name, initial_call]
        ++ [{dictionary, Key} || Labels,
                                 Key <- ['$process_label', '$initial_call',
                                         process_name]],
    [Values, Plain] =
        [ets:match_spec_compile(
           [{{[{'_', Var} || Var <- ['$1', '$2', '$3', '$4', '$5'],
                             Keyed orelse Var < '$3'],
              '$9'},
             [],
             [{{[Var || Var <- ['$1', '$2', '$3', '$4', '$5'],
                        Keyed orelse Var < '$3'],
                '$9'}}]}])
         || Keyed <- [Labels, false]],
    %% On 26.2+ a key's value is copied whole, however large (a process
    %% may put 300 MB under process_name: every pass with a filter copied
    %% and encoded it, 2.7 s a frame became 24-68 s). The heap, which
    %% bounds the values, is read first: past 64 MiB (describe/1's cap
    %% a copy before 26.2) a process is matched by its registered name
    %% and initial call only.
    Heavy = ets:match_spec_compile(
              [{{{total_heap_size, '$1'}, '$2'},
                [{'>', '$1', 64 * 1024 * 1024
                  div erlang:system_info(wordsize)}],
                ['$2']}]),
    %% A known process's names as describe/1 keeps them: its label,
    %% '$initial_call' and process_name.
    Stored = ets:match_spec_compile(
               [{{'$1', '$2', '$3'}, [], [['$1', '$2', '$3']]},
                {'_', [], [[]]}]),
    Names = ets:match_spec_compile(
              [{{{proc_lib, init_p, '_'}, '_'}, [], [[]]},
               {{'$1', '_'}, [{'orelse', {'=:=', '$1', []},
                               {'=:=', '$1', undefined}}], [[]]},
               {{{'$1', '$2', '$3'}, '$4'},
                [{is_atom, '$1'}, {is_atom, '$2'}, {is_integer, '$3'}],
                [[{{'$1', '$4'}}, {{'$2', '$4'}}]]},
               {'_', [], [['$_']]}]),
    Matching = ets:match_spec_compile([{{'$1', '$2'},
                                        [{'=/=', '$1', nomatch}],
                                        ['$2']}]),
    %% Compiled once a pass, for every process's names.
    Pattern = case Filter of
                  [] -> none;
                  _ -> binary:compile_pattern(Filter)
              end,
    %% The proc_lib processes whose names are not known (before OTP 26.2).
    Unknown = ets:match_spec_compile(
                [{{['_', {proc_lib, init_p, '_'}], '$1'},
                  [{'not', {is_map_key, '$1', {const, Known}}}],
                  ['$1']}]),
    Chosen = fun(Slice) ->
                     Big = case Labels of
                               true ->
                                   ets:match_spec_run(
                                     lists:zip(
                                       lists:zipwith(
                                         fun erlang:process_info/2, Slice,
                                         lists:duplicate(
                                           erlang:length(Slice),
                                           total_heap_size)),
                                       Slice),
                                     Heavy);
                               false ->
                                   []
                           end,
                     {Each0, Alive} =
                         lists:unzip(
                           ets:match_spec_run(
                             lists:zip(lists:zipwith(
                                         fun erlang:process_info/2,
                                         Slice -- Big,
                                         lists:duplicate(
                                           erlang:length(Slice -- Big),
                                           Named)),
                                       Slice -- Big),
                             Values)
                           ++ ets:match_spec_run(
                                lists:zip(lists:zipwith(
                                            fun erlang:process_info/2, Big,
                                            lists:duplicate(
                                              erlang:length(Big),
                                              [registered_name,
                                               initial_call])),
                                          Big),
                                Plain)),
                     Each = case Labels of
                                true ->
                                    Each0;
                                false ->
                                    %% The names known of each, from its
                                    %% dictionary (describe/1's items).
                                    lists:zipwith(
                                      fun erlang:'++'/2, Each0,
                                      ets:match_spec_run(
                                        lists:zipwith3(
                                          fun maps:get/3, Alive,
                                          lists:duplicate(
                                            erlang:length(Alive), Known),
                                          lists:duplicate(
                                            erlang:length(Alive), [])),
                                        Stored))
                            end,
                     %% [{Name, Pid}], a pair a name.
                     Pids = lists:zipwith(fun lists:duplicate/2,
                                          lists:map(fun erlang:length/1,
                                                    Each),
                                          Alive),
                     Pairs = lists:append(
                               ets:match_spec_run(
                                 lists:append(lists:zipwith(fun lists:zip/2,
                                                            Each, Pids)),
                                 Names)),
                     {Found, Owners} = lists:unzip(Pairs),
                     Matches = lists:zipwith(
                                 fun binary:match/2,
                                 lists:map(fun erlang:term_to_binary/1,
                                           Found),
                                 lists:duplicate(erlang:length(Found),
                                                 Pattern)),
                     {lists:usort(ets:match_spec_run(lists:zip(Matches,
                                                               Owners),
                                                     Matching)),
                      case Labels of
                          true ->
                              [];
                          false ->
                              ets:match_spec_run(lists:zip(Each0, Alive),
                                                 Unknown)
                      end}
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
    %% {Value, {Pid, Reductions}}: each ranked with the reductions read
    %% with it, for the frame's rows (and the next frame's) to be looked up
    %% without a chunk decoded.
    Ranking = case Sort of
                  binary_memory ->
                      Spec([{'=/=', '$2', []}], {{'$2', {{'$3', '$1'}}}});
                  _ ->
                      Spec([], {{'$2', {{'$3', '$1'}}}})
              end,
    fun(Slice) ->
                          Infos = lists:zipwith(
                                    fun erlang:process_info/2, Slice,
                                    lists:duplicate(erlang:length(Slice),
                                                    [reductions, Item])),
                          Joined = lists:zip(Infos, Slice),
                          %% The filter narrows the ranking, never the
                          %% reductions kept.
                          {Let, Unread} =
                              case Filter of
                                  [] ->
                                      {all, []};
                                  _ ->
                                      {Picked, Unnamed} = Chosen(Slice),
                                      {maps:from_list(
                                         lists:zip(Picked,
                                                   lists:duplicate(
                                                     erlang:length(Picked),
                                                     true))),
                                       Unnamed}
                              end,
                          Pairs0 = ets:match_spec_run(Joined, Ranking),
                          Pairs = case Let of
                                      all ->
                                          Pairs0;
                                      _ ->
                                          ets:match_spec_run(
                                            Pairs0,
                                            ets:match_spec_compile(
                                              [{{'_', {'$1', '_'}},
                                                [{is_map_key, '$1',
                                                  {const, Let}}],
                                                ['$_']}]))
                                  end,
                          Ranked =
                              case Sort of
                                  reductions ->
                                      [];
                                  binary_memory ->
                                      %% Each binary is {Id, Size, Refs},
                                      %% listed once a reference: kept
                                      %% once an Id, the bytes a process
                                      %% holds (issue 38: summed a
                                      %% reference each, recon's figure,
                                      %% one RabbitMQ queue read 928.6 GiB
                                      %% on a node of 1.1 GiB). A compiled
                                      %% ukeysort a holder: the pass was
                                      %% 0.94x and 0.62x proc-count
                                      %% binary_memory's (recon's sums;
                                      %% 1.00x and 0.95x summed as recon)
                                      %% at 100,000 holders of 10 and 100
                                      %% references, 2 cores (bench_top.py
                                      %% --binaries).
                                      {Lists, Holders} = lists:unzip(Pairs),
                                      Many = erlang:length(Lists),
                                      Once = lists:zipwith(
                                               fun lists:ukeysort/2,
                                               lists:duplicate(Many, 1),
                                               Lists),
                                      Sizes = lists:zipwith(
                                                fun erlang:element/2,
                                                lists:duplicate(Many, 2),
                                                lists:map(fun lists:unzip3/1,
                                                          Once)),
                                      Top(lists:zip(lists:map(fun lists:sum/1,
                                                              Sizes),
                                                    Holders),
                                          2 * N);
                                  _ ->
                                      Top(Pairs, 2 * N)
                              end,
                          Read = ets:match_spec_run(Joined, Reductions),
                          %% Level 1: faster than the default's 6 and as
                          %% small here (300,000 processes: 48 ms and
                          %% 2.3 bytes a process, against 109 ms and 2.6).
                          %% Ranked by reductions, the slice's reductions
                          %% themselves go too: the keeper matches them
                          %% with the last pass's as they come (pass/9),
                          %% garbage once folded.
                          {erlang:term_to_binary(Read, [{compressed, 1}]),
                           case Sort of
                               reductions ->
                                   Read;
                               _ ->
                                   Ranked
                           end,
                           [],
                           {erlang:length(Slice), Let, Unread}}
    end.
