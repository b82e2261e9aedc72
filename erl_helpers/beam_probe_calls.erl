%% What `beam-probe calls` and `beam-probe senders` run on the node: a
%% tracer that counts trace messages by a key in a table of its own and
%% sends beam-probe the counts of each interval, never a message per call.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_lib.erl; the tracer is an erl_eval fun, nothing is loaded
%% (the stock module trace, OTP 27+, is used where the node has it).
%%
%% The shape is trace-gc's (beam_probe_trace.erl): the call's worker runs
%% under guard/3, which kills it when beam-probe's connection goes; the
%% tracer it spawns watches it and removes its traces when it goes (Ctrl-C,
%% kill -9, a network failure), and at its own limits: the duration, the
%% calls counted, the rate, its mailbox and its memory.
%%
%% What is counted is chosen by the match specification beam-probe builds:
%% its body puts the key into each trace message ({caller_line} or
%% {caller}, {self}, the arguments' shape computed by the emulator), so
%% the tracer's work per message is a receive and one ets:update_counter/4
%% (erl_eval costs microseconds a step: see count_calls/3).
%%
%% OTP 27+: a trace session of its own (trace:session_create/3), which no
%% other tool sees or clears, and destroying it removes all it set.
%% OTP 25-26: the legacy trace/3 and trace_pattern/3, node-wide: refused
%% when anything else traces what we would touch (the function's pattern,
%% the send pattern, any process's tracer: flags set on every process with
%% our tracer would take them), under a lock every beam-probe takes, so a
%% second one is refused as cleanly.
-module(beam_probe_calls).

-export([trace/6, follow/1, names/2]).

-type what() :: #{kind := calls, module := binary(), function := binary(),
                  arity := arity() | any, specs := binary()}
              | #{kind := senders, target := {pid, string()}
                                               | {names, [string()]},
                  key := sender | shape, body := binary()}.
-type limits() :: #{duration_ms := pos_integer(), max := pos_integer(),
                    rate := pos_integer(), flush_ms := pos_integer(),
                    wait_ms := pos_integer(), max_keys := pos_integer(),
                    max_backlog := pos_integer(),
                    max_memory := pos_integer()}.
-type summary() :: #{reason := duration | max | rate | overload
                               | removed,
                     counted := non_neg_integer(),
                     reductions := non_neg_integer(),
                     backlog := non_neg_integer(),
                     memory := non_neg_integer()}
                 | #{reason := refused, why := atom(), detail := term()}.

%% Streams to Sink, as Remote.stream reads them ({Tag, Sender, Chunk},
%% then waits for {Tag, more}):
%%   #{kind => started, mode => session | trace, matched => N,
%%     target => pid() | none}                            first
%%   #{kind => rows, rows => [{Key, Count}], other => Count, ms => Ms}
%%       every FlushMs (maybe no rows): the counts since the last rows
%%       sent, at most MaxKeys of them, the rest summed in other; Ms since
%%       the trace began
%% and returns summary() once stopped, or at once when refused. Resolve
%% is beam_probe_lib:resolve/1, Follow follow/1, passed as funs.
-spec trace(pid(), reference(), what(), limits(), fun(), fun()) ->
          summary().
trace(Sink, Tag, What, Limits, Resolve, Follow) ->
    Worker = erlang:self(),
    Prober = erlang:node(Sink),
    Sessions = erlang:element(1, code:ensure_loaded(trace)) =:= module
        andalso erlang:function_exported(trace, session_create, 3),
    %% Our processes on this node (guard/3 keeps them: the call's process,
    %% this worker, the connection's): never traced, never counted.
    Ours = case erlang:get('$beam_probe_ours') of
               Listed when erlang:is_list(Listed) -> Listed;
               _ -> []
           end,
    Exclude = [P || P <- [Worker | Ours], erlang:is_pid(P),
                    erlang:node(P) =:= erlang:node()],
    Refuse = fun(Why, Detail) ->
                     erlang:exit({beam_probe_calls_done,
                                  #{reason => refused, why => Why,
                                    detail => Detail}})
             end,
    %% Who else traces, on OTP 25-26: each process's tracer, in compiled
    %% calls over the process list (an interpreted fun a process would
    %% cost a second at a million), and new processes'.
    Holders = fun() ->
                      Pids = erlang:processes(),
                      Found = lists:usort(
                                lists:zipwith(
                                  fun erlang:trace_info/2, Pids,
                                  lists:duplicate(erlang:length(Pids),
                                                  tracer))),
                      lists:usort(
                        [T || {tracer, T} <- [erlang:trace_info(
                                                new_processes, tracer)
                                              | Found],
                              T =/= []])
              end,
    %% The function(s), from names the node already has: a module that is
    %% not loaded is not loaded by us, and no atom is made.
    Functions =
        fun(#{module := M0, function := F0, arity := A0}) ->
                M = try erlang:binary_to_existing_atom(M0, utf8)
                    catch error:badarg -> Refuse(not_loaded, M0)
                    end,
                erlang:module_loaded(M) orelse Refuse(not_loaded, M0),
                %% '_': every function of the module.
                F = try erlang:binary_to_existing_atom(F0, utf8)
                    catch error:badarg -> Refuse(no_function, F0)
                    end,
                case [{M, F1, A}
                      || {F1, A} <- erlang:get_module_info(M, functions),
                         F =:= '_' orelse F1 =:= F,
                         A0 =:= any orelse A =:= A0] of
                    [] -> Refuse(no_function, F0);
                    Found -> {M, F, Found}
                end
        end,
    %% A specification decoded with [safe]: an atom the node does not know
    %% in --match is refused, never made (nothing could match it anyway).
    Decode = fun(Bin) ->
                     try erlang:binary_to_term(Bin, [safe])
                     catch error:badarg -> Refuse(unknown_atom, none)
                     end
             end,
    %% OTP 25-26: what would undo the traces about to be set, given to
    %% this process once the checks have passed: should the tracer die
    %% without cleaning up (killed by someone), this process does it (a
    %% session, on 27+, goes with its tracer).
    Arm = fun(Undo) ->
                  Worker ! {beam_probe_calls_armed, erlang:self(), Undo},
                  ok
          end,
    %% OTP 25-26: a pattern is cleared, the send pattern made the node's
    %% default again, only where it is still ours: a tool that has set its
    %% own since (one pattern a function there) keeps it.
    Unpattern = fun(MFA, MFAs, Spec) ->
                        Still = [Fn || Fn <- MFAs,
                                       erlang:trace_info(Fn, match_spec)
                                           =:= {match_spec, Spec}],
                        case Still =:= MFAs of
                            true ->
                                erlang:trace_pattern(MFA, false, [local]);
                            false ->
                                [erlang:trace_pattern(Fn, false, [local])
                                 || Fn <- Still]
                        end
                end,
    %% OTP 25-26: flags off every process at once while new processes
    %% still get our tracer (no process can then have another's: trace/3
    %% refuses to change a process's tracer, checked); once another tool
    %% has taken new processes (trace(new, true, ...) succeeds beside us,
    %% checked), off ours only: the processes born since are theirs.
    Unflag = fun(OurTracer, Flags) ->
                     case erlang:trace_info(new_processes, tracer) of
                         {tracer, OurTracer} ->
                             erlang:trace(processes, false, Flags);
                         _ ->
                             All = erlang:processes(),
                             Tracing = lists:zipwith(
                                         fun erlang:trace_info/2, All,
                                         lists:duplicate(erlang:length(All),
                                                         tracer)),
                             Traced = ets:match_spec_run(
                                        lists:zip(All, Tracing),
                                        ets:match_spec_compile(
                                          [{{'$1', {tracer, OurTracer}}, [],
                                            ['$1']}])),
                             [catch erlang:trace(P, false, Flags)
                              || P <- Traced]
                     end
             end,
    Unsend = fun(Spec) ->
                     case erlang:trace_info(send, match_spec) of
                         {match_spec, Spec} ->
                             erlang:trace_pattern(send, true, []);
                         _ ->
                             ok
                     end
             end,
    Tracer =
        fun() ->
                lists:member(Prober, erlang:nodes(connected))
                    orelse erlang:exit(normal),
                erlang:monitor(process, Worker),
                Self = erlang:self(),
                Table = ets:new(beam_probe_calls, [set, private]),
                Session = case Sessions of
                              true ->
                                  trace:session_create(beam_probe_calls,
                                                       Self, []);
                              false ->
                                  none
                          end,
                Mine = [Self | Exclude],
                Setup =
                    fun() ->
                        case What of
                            #{kind := calls, specs := SpecsBin} ->
                                {M, F, MFAs} = Functions(What),
                                Arity = case maps:get(arity, What) of
                                            any -> '_';
                                            Given -> Given
                                        end,
                                MFA = {M, F, Arity},
                                %% The first specification this release takes
                                %% ({caller_line}, then {caller}).
                                Specs = Decode(SpecsBin),
                                Spec = case [S || S <- Specs,
                                                  erlang:element(
                                                    1, erlang:match_spec_test(
                                                         [], S, trace)) =:= ok]
                                       of
                                           [First | _] -> First;
                                           [] -> Refuse(bad_spec, none)
                                       end,
                                Flags = [call, arity],
                                case Session of
                                    none ->
                                        Busy = [{Fn, Info}
                                                || Fn <- MFAs,
                                                   {all, Info}
                                                       <- [erlang:trace_info(
                                                             Fn, all)],
                                                   Info =/= false],
                                        Others = Holders(),
                                        if
                                            Busy =/= [] ->
                                                Refuse(pattern, Busy);
                                            Others =/= [] ->
                                                Refuse(tracer, Others);
                                            true ->
                                                ok
                                        end,
                                        Undo = fun() ->
                                                       Unpattern(MFA, MFAs,
                                                                 Spec),
                                                       Unflag(Self, Flags),
                                                       ok
                                               end,
                                        Arm(Undo),
                                        %% Flags first, ours cleared, and only
                                        %% then the pattern: no call of ours
                                        %% is ever traced (the tracer's own
                                        %% ets:update_counter/3 among them).
                                        erlang:trace(processes, true,
                                                     [{tracer, Self} | Flags]),
                                        [catch erlang:trace(P, false, Flags)
                                         || P <- Mine],
                                        N = erlang:trace_pattern(MFA, Spec,
                                                                 [local]),
                                        {N, none, Undo};
                                    _ ->
                                        trace:process(Session, all, true, Flags),
                                        [catch trace:process(Session, P, false,
                                                             Flags)
                                         || P <- Mine],
                                        N = trace:function(Session, MFA, Spec,
                                                           [local]),
                                        {N, none,
                                         fun() ->
                                                 trace:session_destroy(Session),
                                                 ok
                                         end}
                                end;
                            #{kind := senders, target := Wanted,
                              body := BodyBin} ->
                                Target = case Resolve(Wanted) of
                                             Pid when erlang:is_pid(Pid) -> Pid;
                                             _ -> Refuse(not_found, Wanted)
                                         end,
                                lists:member(Target, Mine)
                                    andalso Refuse(ours, Target),
                                %% A send to a registered name is traced
                                %% with the name as its receiver (OTP 25,
                                %% checked: gen_server:cast(demo_cache, _)
                                %% matched no [Pid, '_']): both clauses.
                                Body = Decode(BodyBin),
                                Spec = [{[To, '_'], [], Body}
                                        || To <- [Target
                                                  | case erlang:process_info(
                                                           Target,
                                                           registered_name) of
                                                        {registered_name, Name} ->
                                                            [Name];
                                                        _ ->
                                                            []
                                                    end]],
                                case Session of
                                    none ->
                                        Pattern = erlang:trace_info(
                                                    send, match_spec),
                                        Others = Holders(),
                                        if
                                            Pattern =/= {match_spec, true} ->
                                                Refuse(send_pattern, Pattern);
                                            Others =/= [] ->
                                                Refuse(tracer, Others);
                                            true ->
                                                ok
                                        end,
                                        Undo = fun() ->
                                                       Unflag(Self, [send]),
                                                       Unsend(Spec),
                                                       ok
                                               end,
                                        Arm(Undo),
                                        %% The pattern first: with the default
                                        %% one, every send of every process
                                        %% would be traced.
                                        erlang:trace_pattern(send, Spec, []),
                                        erlang:trace(processes, true,
                                                     [send, {tracer, Self}]),
                                        [catch erlang:trace(P, false, [send])
                                         || P <- Mine],
                                        {1, Target, Undo};
                                    _ ->
                                        trace:send(Session, Spec, []),
                                        trace:process(Session, all, true, [send]),
                                        [catch trace:process(Session, P, false,
                                                             [send])
                                         || P <- Mine],
                                        {1, Target,
                                         fun() ->
                                                 trace:session_destroy(Session),
                                                 ok
                                         end}
                                end
                    end
                    end,
                %% Checked and set under one lock that every beam-probe
                %% takes on OTP 25-26 (a session needs none).
                {Matched, Target, Stop} =
                    try
                        case Session of
                            none ->
                                global:trans({beam_probe_calls, Self}, Setup,
                                             [erlang:node()]);
                            _ ->
                                Setup()
                        end
                    catch
                        exit:{beam_probe_calls_done, _} = Refused ->
                            %% Refused before anything was set.
                            Session =:= none
                                orelse trace:session_destroy(Session),
                            erlang:exit(Refused)
                    end,
                %% Whether our traces are still on, asked each interval:
                %% another tool may take them away (destroy our session, as
                %% anyone listing trace:session_info(all) can; clear every
                %% process's flags on 25-26), and the counts would stop
                %% without a word. On a destroyed session trace:process/4
                %% raises badarg (checked, 27 and 28); clearing the
                %% tracer's own send flag, never set, changes nothing.
                Alive = case Session of
                            none ->
                                fun() ->
                                        erlang:trace_info(new_processes,
                                                          tracer)
                                            =:= {tracer, Self}
                                end;
                            _ ->
                                fun() ->
                                        try trace:process(Session, Self,
                                                          false, [send]) of
                                            _ -> true
                                        catch
                                            error:badarg -> false
                                        end
                                end
                        end,
                %% Where a trace message (as a list) holds its key.
                Key = case What of
                          #{kind := calls} ->
                              [trace, '_', call, '_', '$1'];
                          #{key := sender} ->
                              [trace, '$1', send, '_', '_'];
                          #{key := shape} ->
                              [trace, '$1', send, '_', '_', '$2']
                      end,
                KeyOf = case What of
                            #{key := shape} -> {{'$1', '$2'}};
                            _ -> '$1'
                        end,
                erlang:send(Sink, {Tag, Self,
                                   #{kind => started,
                                     mode => case Session of
                                                 none -> trace;
                                                 _ -> session
                                             end,
                                     matched => Matched,
                                     target => case Target of
                                                   none -> none;
                                                   _ -> Target
                                               end}},
                            [noconnect]),
                try
                    Follow(Limits#{sink => Sink, tag => Tag,
                                   worker => Worker, stop => Stop,
                                   alive => Alive,
                                   keys => ets:match_spec_compile(
                                             [{Key, [], [KeyOf]}]),
                                   zeros => ets:match_spec_compile(
                                              [{Key, [], [{{KeyOf, 0}}]}]),
                                   table => Table})
                catch
                    Class:Reason:Stack ->
                        catch Stop(),
                        erlang:raise(Class, Reason, Stack)
                end
        end,
    %% Off-heap messages: a trace message (a copy of each message sent,
    %% for senders) waits outside the heap, which a collection then never
    %% copies.
    %% High priority: each message taken costs the tracer a slice (see
    %% follow/1), and at normal priority, with the schedulers busy (three
    %% processes calling the function flat out on 2 cores), a batch of
    %% 1,000 took 1.5-3 s, the checks waiting for it while 73,000 (OTP 25)
    %% to 2.9 million (OTP 28, 670 MB) trace messages queued. Ahead of the
    %% node's own processes, a batch takes ~1 ms and the limits stop the
    %% trace within one; the rate bounds its work to ~2% of a core.
    {Pid, Ref} = erlang:spawn_opt(Tracer,
                                  [monitor, {message_queue_data, off_heap},
                                   {priority, high}]),
    Wait = fun Wait(Undo) ->
                   receive
                       {beam_probe_calls_armed, Pid, Armed} ->
                           Wait(Armed);
                       {'DOWN', Ref, process, Pid,
                        {beam_probe_calls_done, Summary}} ->
                           Summary;
                       {'DOWN', Ref, process, Pid, Reason} ->
                           catch Undo(),
                           erlang:exit({beam_probe_tracer, Reason})
                   end
           end,
    Wait(fun() -> ok end).

%% The tracer's loop once its traces are set: a function of its own, run
%% as a fun (a fun made inside trace/6 would carry all of that function's
%% bindings, looked up at every step). Each turn takes up to a batch of
%% messages and counts them, then checks the limits:
%%   * max calls counted: stops at exactly that many;
%%   * rate: more than Rate * FlushMs / 1000 calls within one FlushMs,
%%     those waiting in the mailbox included (a process calling as fast as
%%     it can outruns any tracer: its backlog says so first);
%%   * duration;
%%   * overload: a mailbox longer than MaxBacklog or the tracer over
%%     MaxMemory bytes, its table included (copies of large messages,
%%     for senders; keys piling up while beam-probe takes no rows);
%%   * removed: our traces taken away by another tool (Alive, each
%%     FlushMs);
%% and every FlushMs sends the counts gathered since the last rows sent,
%% with at most Window of them unanswered (beam-probe answers each with
%% {Tag, more}); while the window is full the counts keep adding up in the
%% table, nothing is lost. Unanswered for WaitMs, beam-probe is gone.
%%
%% No interpreted step is run per message: a receive in erl_eval, one
%% ets:update_counter/4 and a loop call cost ~13 us a message (measured,
%% OTP 25, 2 cores: the tracer took a quarter of a core at 20,000 calls a
%% second). A batch is taken by prim_eval:'receive'/2 (erl_eval's own
%% receive, compiled) under lists:zipwith/3, each message made a list by
%% erlang:tuple_to_list/1; its keys picked by a compiled match
%% specification; and counted by ets:insert_new/2 and
%% ets:update_counter/3 under zipwith: ~0.6-0.9 us a message alone.
%% prim_eval:'receive'/2 is charged a whole slice (~4,000 reductions) a
%% message, as erl_eval's receive is, so the tracer yields after each one;
%% it runs at high priority (see trace/6), or on a node whose schedulers
%% are busy it would take a message a slice of theirs and check its
%% limits seconds late. In all a traced call cost the node ~3.5-3.8 us
%% (tests/bench_calls.py).
-spec follow(map()) -> no_return().
follow(#{sink := Sink, tag := Tag, worker := Worker, stop := Stop,
         alive := Alive,
         keys := Keys, zeros := Zeros, table := Table,
         duration_ms := DurationMs, max := Max, rate := Rate,
         flush_ms := FlushMs, wait_ms := WaitMs, max_keys := MaxKeys,
         max_backlog := MaxBacklog, max_memory := MaxMemory}) ->
    Self = erlang:self(),
    Window = 2,
    WordSize = erlang:system_info(wordsize),
    Batch = 1000,
    Started = erlang:monotonic_time(millisecond),
    Deadline = Started + DurationMs,
    Allowance = erlang:max(1, Rate * FlushMs div 1000),
    AsList = fun erlang:tuple_to_list/1,
    %% Any message but a trace message: beam-probe's answers, the worker's
    %% 'DOWN'.
    NotTrace = ets:match_spec_compile([{['$1' | '_'], [{'=/=', '$1', trace}],
                                     ['$_']}]),
    %% The counts since the last rows sent, largest MaxKeys first.
    Rows = fun() ->
                   All = ets:tab2list(Table),
                   true = ets:delete_all_objects(Table),
                   case erlang:length(All) > MaxKeys of
                       false ->
                           {All, 0};
                       true ->
                           {Kept, Rest} = lists:split(
                                            MaxKeys,
                                            lists:reverse(
                                              lists:keysort(2, All))),
                           {Kept, lists:sum(erlang:element(
                                              2, lists:unzip(Rest)))}
                   end
           end,
    Send = fun(Now) ->
                   %% Each turn leaves its batch as garbage: collected
                   %% here, the heap stays small (without it, ~13 MB at
                   %% 110,000 calls a second, OTP 25).
                   erlang:garbage_collect(),
                   {Kept, Other} = Rows(),
                   erlang:send(Sink, {Tag, Self,
                                      #{kind => rows, rows => Kept,
                                        other => Other,
                                        ms => Now - Started}},
                               [noconnect])
           end,
    %% Backlog and Memory: the tracer's mailbox and bytes when it stopped.
    Finish = fun(Reason, Counted, Backlog, Memory) ->
                     Stop(),
                     %% The last rows may be the window's third:
                     %% beam-probe's mailbox takes four.
                     Send(erlang:monotonic_time(millisecond)),
                     {reductions, Reductions} =
                         erlang:process_info(Self, reductions),
                     erlang:exit({beam_probe_calls_done,
                                  #{reason => Reason, counted => Counted,
                                    reductions => Reductions,
                                    backlog => Backlog,
                                    memory => Memory}})
             end,
    Gone = fun() -> Stop(), erlang:exit(normal) end,
    %% First: the message the last turn's wait woke to (as a list), or
    %% timeout, or none ([]).
    Loop =
        fun Loop(Counted, Mark, MarkAt, FlushAt, Open, Since, First) ->
                %% No more than are waiting: each receive is charged a
                %% slice, found or not.
                {message_queue_len, Waiting} =
                    erlang:process_info(Self, message_queue_len),
                Take = erlang:min(erlang:min(Batch, Max - Counted
                                             - erlang:length(First)),
                                  Waiting),
                Got = First ++ lists:zipwith(fun prim_eval:'receive'/2,
                                             lists:duplicate(Take, AsList),
                                             lists:duplicate(Take, 0)),
                Found = ets:match_spec_run(Got, Keys),
                Taken = erlang:length(Found),
                Tables = lists:duplicate(Taken, Table),
                lists:zipwith(fun ets:insert_new/2, Tables,
                              ets:match_spec_run(Got, Zeros)),
                lists:zipwith3(fun ets:update_counter/3, Tables, Found,
                               lists:duplicate(Taken, 1)),
                Others = ets:match_spec_run(Got, NotTrace),
                Now = erlang:monotonic_time(millisecond),
                Total = Counted + Taken,
                [Gone() || ['DOWN', _, process, Pid, _] <- Others,
                           Pid =:= Worker],
                Answers = erlang:length([more || [T, more] <- Others,
                                                 T =:= Tag]),
                Unanswered = Open - Answers,
                Asked = case Answers of
                            0 -> Since;
                            _ -> Now
                        end,
                [{message_queue_len, Backlog}, {memory, Heap}] =
                    erlang:process_info(Self, [message_queue_len, memory]),
                %% The table's keys too: while beam-probe does not take the
                %% rows (stopped, its window full), they add up there.
                Memory = Heap + ets:info(Table, memory) * WordSize,
                {Mark1, MarkAt1} = case Now - MarkAt >= FlushMs of
                                       true -> {Total, Now};
                                       false -> {Mark, MarkAt}
                                   end,
                %% How long this turn may wait: to the next flush, or, the
                %% window full, to the answer's deadline (the answer, a
                %% message, wakes it sooner); never past --duration.
                Until = case Unanswered < Window of
                            true -> FlushAt;
                            false -> Asked + WaitMs + 1
                        end,
                Wait = erlang:max(0, erlang:min(Until, Deadline) - Now),
                if
                    Total >= Max ->
                        Finish(max, Total, Backlog, Memory);
                    Total - Mark + Backlog > Allowance ->
                        Finish(rate, Total, Backlog, Memory);
                    Now >= Deadline ->
                        Finish(duration, Total, Backlog, Memory);
                    Backlog > MaxBacklog; Memory > MaxMemory ->
                        Finish(overload, Total, Backlog, Memory);
                    Unanswered > 0, Now - Asked > WaitMs ->
                        Gone();
                    Now >= FlushAt, Unanswered < Window ->
                        Alive() orelse
                            Finish(removed, Total, Backlog, Memory),
                        Send(Now),
                        Loop(Total, Mark1, MarkAt1, Now + FlushMs,
                             Unanswered + 1, Now, []);
                    Take =:= Batch ->
                        %% A whole batch: more is waiting, take it now.
                        Loop(Total, Mark1, MarkAt1, FlushAt, Unanswered,
                             Asked, []);
                    Got =:= []; Got =:= [timeout] ->
                        %% Nothing came: wait for the first message in one
                        %% receive. A wake-up every 20 ms cost an idle
                        %% trace 6-8% of a core (OTP 25 and 28, 2 cores);
                        %% and with the window full the wait was 0, a
                        %% busy loop until beam-probe answered.
                        Loop(Total, Mark1, MarkAt1, FlushAt, Unanswered,
                             Asked, [prim_eval:'receive'(AsList, Wait)]);
                    true ->
                        %% Messages came, the mailbox is drained: let the
                        %% next ones gather, 20 ms at most, and take them
                        %% in one go.
                        receive
                        after erlang:min(Wait, 20) ->
                                ok
                        end,
                        Loop(Total, Mark1, MarkAt1, FlushAt, Unanswered,
                             Asked, [])
                end
        end,
    Loop(0, 0, Started, Started + FlushMs, 0, Started, []).

%% The processes of the rows shown, named as every table names them
%% (beam_probe_lib:describe/1, passed as Describe), and this call's own
%% processes (guard/3's): born after the trace began, they are traced as
%% every new process is, and describe's process_info/2 calls, or the
%% guard's message to net_kernel, were counted as the node's (the top
%% rows of calls erlang:process_info/2 --by process).
-spec names([pid()], fun()) -> {beam_probe_lib:rows(), [pid()]}.
names(Pids, Describe) ->
    Ours = case erlang:get('$beam_probe_ours') of
               Listed when erlang:is_list(Listed) -> Listed;
               _ -> []
           end,
    {Describe([{0, Pid} || Pid <- Pids]),
     [P || P <- [erlang:self() | Ours], erlang:is_pid(P)]}.
