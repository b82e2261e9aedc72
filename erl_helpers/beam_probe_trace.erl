%% What `beam-probe trace-gc` runs on the node: a tracer of garbage
%% collections that forwards them to beam-probe in batches, and cleans up
%% after itself whatever ends it.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl; the tracer is an erl_eval fun, nothing is loaded
%% (the stock module trace, OTP 27+, is used where the node has it).
%%
%% Two processes: the call's worker (under guard/3, which kills it when
%% beam-probe's connection goes) and the tracer it spawns, which holds the
%% traces. The tracer watches the worker, which the guard kills when
%% beam-probe's connection goes, so it removes its traces and exits within
%% a moment of either going: Ctrl-C, kill -9, a network failure, the
%% guard's deadline. It also
%% ends at its duration, at its event limit, and when beam-probe has not
%% asked for the next batch within WaitMs.
%%
%% OTP 27+: a trace session of its own (trace:session_create/3), whose
%% flags no other tracer (dbg, recon_trace, observer, another beam-probe)
%% sees or clears; destroying the session removes every flag it set.
%% OTP 25-26: erlang:trace/3. Either way only processes nobody else traces
%% are traced (see Holder below for why on OTP 27+ too); the others are
%% reported as held, with who holds them, and left alone.
-module(beam_probe_trace).

-export([trace_gc/10, follow/1, drain/3]).
%% The shapes of the streamed chunks (see trace_gc/10).
-export_type([status/0]).

-type target() :: {pid, string()} | {names, [string()]}.
%% A target's status, in the started chunk: traced (info: registered_name,
%% initial_call, current_function), held (traced by someone else: held_by
%% is its tracer on OTP 25-26, the sessions tracing it on OTP 27+), gone or
%% not_found.
-type status() :: #{status := traced, pid := pid(), info := list()}
                | #{status := held, pid := pid(), held_by := term()}
                | #{status := gone, pid := pid()}
                | #{status := not_found, target := target()}.
-type summary() :: #{reason := duration | max_events | overload,
                     trace_messages := non_neg_integer(),
                     dropped := non_neg_integer(),
                     reductions := non_neg_integer()}.

%% Streams to Sink, as Remote.stream reads them ({Tag, Sender, Chunk},
%% then waits for {Tag, more}):
%%   #{kind => started, mode => session | trace, wordsize => W,
%%     statuses => [status()]}                     first
%%   #{kind => events, events => [{trace_ts, Pid, Kind, Info, Ns}]}
%%                                   every FlushMs, maybe no events (the
%%                                   trace messages as OTP sends them)
%% and returns summary() once stopped at DurationMs or after MaxMessages
%% trace messages (two per collection: its start and its end). Resolve is
%% beam_probe_scan:resolve/1, Follow and Drain follow/1 and drain/3,
%% passed as funs.
-spec trace_gc(pid(), reference(), [target()], pos_integer(),
               pos_integer(), pos_integer(), pos_integer(), fun(), fun(),
               fun()) -> summary().
trace_gc(Sink, Tag, Targets, DurationMs, MaxMessages, FlushMs, WaitMs,
         Resolve, Follow, Drain) ->
    Worker = erlang:self(),
    Prober = erlang:node(Sink),
    Resolved = [{Target, case Resolve(Target) of
                             Pid when is_pid(Pid) -> Pid;
                             _ -> undefined
                         end}
                || Target <- Targets],
    %% A process named twice (by name and by pid, say) is traced once, not
    %% found the second time as traced by this very tracer.
    Found = lists:reverse(
              lists:foldl(fun({_, undefined} = Item, Acc) ->
                                  [Item | Acc];
                             ({_, Pid} = Item, Acc) ->
                                  case lists:keymember(Pid, 2, Acc) of
                                      true -> Acc;
                                      false -> [Item | Acc]
                                  end
                          end,
                          [],
                          Resolved)),
    Flags = [garbage_collection, monotonic_timestamp],
    Sessions = erlang:element(1, code:ensure_loaded(trace)) =:= module
        andalso erlang:function_exported(trace, session_create, 3),
    %% What the process is: its registered name, initial and current
    %% functions, and the dictionary keys that name it (as describe/1 of
    %% beam_probe_lib.erl reads them: one key at a time on OTP 26.2+;
    %% before, from a copy of the whole dictionary, made only where the
    %% heap, which bounds it, is at most 64 MiB), each value kept only
    %% when at most 1,024 bytes.
    Describe = fun(Pid) ->
                       Info = erlang:process_info(Pid, [registered_name,
                                                        initial_call,
                                                        current_function,
                                                        total_heap_size]),
                       Keys = ['$process_label', '$initial_call',
                               process_name],
                       %% The heap bounds a single key's value too (26.2+
                       %% copies it whole, however large).
                       Words = case Info of
                                   [_, _, _, {_, W}] -> W;
                                   _ -> 0
                               end,
                       Small = Words * erlang:system_info(wordsize)
                           =< 64 * 1024 * 1024,
                       Names =
                           try [{Key, Value}
                                || Small,
                                   Key <- Keys,
                                   {{dictionary, _}, Value}
                                       <- [erlang:process_info(
                                             Pid, {dictionary, Key})]]
                           catch
                               error:badarg ->
                                   Copy = Small
                                       andalso erlang:process_info(
                                                 Pid, dictionary),
                                   case Copy of
                                       {dictionary, Dictionary} ->
                                           [{Key, Value}
                                            || Key <- Keys,
                                               {_, Value}
                                                   <- [lists:keyfind(
                                                         Key, 1,
                                                         Dictionary)]];
                                       _ ->
                                           []
                                   end
                           end,
                       case Info of
                           undefined ->
                               undefined;
                           _ ->
                               lists:sublist(Info, 3)
                                   ++ [{Key, Value} || {Key, Value} <- Names,
                                                       erlang:external_size(
                                                         Value) =< 1024]
                       end
               end,
    Tracer =
        fun() ->
                %% The worker is watched, and the guard kills it when our
                %% connection goes: so the tracer goes too. (Not
                %% monitor_node/2: on a node whose connection has just
                %% gone it would connect back.)
                lists:member(Prober, erlang:nodes(connected))
                    orelse erlang:exit(normal),
                erlang:monitor(process, Worker),
                Self = erlang:self(),
                Session = case Sessions of
                              true ->
                                  trace:session_create(beam_probe_trace_gc,
                                                       Self, []);
                              false ->
                                  none
                          end,
                %% A process another tracer follows is left alone: on OTP
                %% 25-26 it can have only one; on OTP 27-29 two sessions
                %% tracing one process's collections crash the emulator at
                %% its next collection (erlang/otp#11624, seen here on
                %% 28.5: abort or segfault), and the flags of another
                %% session cannot be read, so any other session counts.
                Holder =
                    fun(Pid) when Session =/= none ->
                            %% undefined: the process is not alive.
                            case trace:session_info(Pid) of
                                Others when is_list(Others), Others =/= [] ->
                                    Others;
                                _ ->
                                    none
                            end;
                       (Pid) ->
                            case erlang:trace_info(Pid, tracer) of
                                {tracer, []} -> none;
                                {tracer, Other} -> Other;
                                undefined -> none
                            end
                    end,
                Trace =
                    fun(Pid) when Session =/= none ->
                            trace:process(Session, Pid, true, Flags);
                       (Pid) ->
                            erlang:trace(Pid, true, [{tracer, Self} | Flags])
                    end,
                Start =
                    fun(Pid) ->
                            case Holder(Pid) of
                                none ->
                                    try Trace(Pid) of
                                        1 -> #{status => traced, pid => Pid,
                                               info => Describe(Pid)};
                                        _ -> #{status => gone, pid => Pid}
                                    catch
                                        error:badarg ->
                                            #{status => gone, pid => Pid}
                                    end;
                                Other ->
                                    #{status => held, pid => Pid,
                                      held_by => Other}
                            end
                    end,
                %% Check and trace under one lock, local to this node, that
                %% every beam-probe trace-gc takes: two started at once
                %% must not both find a process free.
                Statuses =
                    global:trans(
                      {beam_probe_trace_gc, Self},
                      fun() ->
                              [case Pid of
                                   undefined -> #{status => not_found,
                                                  target => Target};
                                   _ -> Start(Pid)
                               end
                               || {Target, Pid} <- Found]
                      end,
                      [erlang:node()]),
                Traced = [Pid || #{status := traced, pid := Pid}
                                     <- Statuses],
                Stop = fun() when Session =/= none ->
                               trace:session_destroy(Session);
                          () ->
                               [catch erlang:trace(Pid, false, Flags)
                                || Pid <- Traced],
                               ok
                       end,
                %% Every send to beam-probe is noconnect: once its node is
                %% gone, a send would have this node try to connect back
                %% (it starts its DNS helper to look our host up).
                erlang:send(Sink, {Tag, Self,
                                   #{kind => started,
                                     mode => case Session of
                                                 none -> trace;
                                                 _ -> session
                                             end,
                                     wordsize => erlang:system_info(wordsize),
                                     statuses => Statuses}},
                            [noconnect]),
                Follow(#{sink => Sink, tag => Tag,
                         worker => Worker, stop => Stop, drain => Drain,
                         deadline => erlang:monotonic_time(millisecond)
                             + DurationMs,
                         flush_ms => FlushMs, wait_ms => WaitMs,
                         max_messages => MaxMessages})
        end,
    {Pid, Ref} = erlang:spawn_monitor(Tracer),
    receive
        {'DOWN', Ref, process, Pid, {beam_probe_trace_done, Summary}} ->
            Summary;
        {'DOWN', Ref, process, Pid, Reason} ->
            erlang:exit({beam_probe_tracer, Reason})
    end.

%% The tracer's loop once its traces are set (a function of its own, run
%% as a fun: a fun made inside trace_gc/10 would carry all of that
%% function's bindings, and erl_eval looks variables up among them on
%% every step). It sends a batch every flush_ms, even empty (beam-probe
%% shows progress and knows the tracer lives), or at MaxBatch events,
%% whichever is first, with at most Window batches unanswered: beam-probe
%% answers each with {Tag, more}, which the loop takes like any other
%% message (a receive for that one message would, in erl_eval, match it
%% against every trace message queued before it: 124 million reductions
%% for 6,000 events, measured). Unanswered for wait_ms, beam-probe is
%% taken as gone. A backlog of more than MaxBacklog messages (events
%% arriving faster than erl_eval takes them, ~16 us each on our machine)
%% ends the trace: the mailbox, and the node's memory, stay bounded.
-spec follow(map()) -> no_return().
follow(#{sink := Sink, tag := Tag, worker := Worker,
         stop := Stop, drain := Drain, deadline := Deadline,
         flush_ms := FlushMs, wait_ms := WaitMs,
         max_messages := MaxMessages}) ->
    Self = erlang:self(),
    Window = 2,
    MaxBatch = 500,
    MaxBacklog = 20000,
    %% Held while the window is full (the reader is slow: a pager, a
    %% terminal scrolled back), at most MaxHeld messages, ~1 MB and ~275,000
    %% terms in the next batch (under beam-probe's million-term limit per
    %% reply); beyond that new events are dropped, and counted.
    MaxHeld = 5000,
    Finish = fun(Reason, Count, Batch, Dropped) ->
                     Stop(),
                     %% This last batch may be the window's third:
                     %% beam-probe's mailbox takes four.
                     erlang:send(Sink, {Tag, Self,
                                        #{kind => events,
                                          events => lists:reverse(Batch)}},
                                 [noconnect]),
                     {reductions, Reductions} =
                         erlang:process_info(Self, reductions),
                     erlang:exit({beam_probe_trace_done,
                                  #{reason => Reason,
                                    trace_messages => Count,
                                    dropped => Dropped,
                                    reductions => Reductions}})
             end,
    Gone = fun() -> Stop(), erlang:exit(normal) end,
    Loop =
        fun Loop(Count, Batch, Size, Flush, Unanswered, Asked, Dropped) ->
                %% What has arrived, up to a batch, without waiting.
                %% (Always a whole batch's worth, even past MaxBatch while
                %% the window is full: beam-probe's answers queue behind
                %% the events.)
                {Taken, Others, _} = Drain(erlang:min(MaxBatch,
                                                      MaxMessages - Count),
                                           [], []),
                Got = erlang:length(Taken),
                Answers = erlang:length([more || {T, more} <- Others,
                                                 T =:= Tag]),
                [Gone() || {'DOWN', _, process, Pid, _} <- Others,
                           Pid =:= Worker],
                Now = erlang:monotonic_time(millisecond),
                Open = Unanswered - Answers,
                Since = case Answers of
                            0 -> Asked;
                            _ -> Now
                        end,
                {All, Kept, Lost} = case Size + Got > MaxHeld of
                                        true -> {Batch, Size, Dropped + Got};
                                        false -> {Taken ++ Batch, Size + Got,
                                                  Dropped}
                                    end,
                Backlog = erlang:element(
                            2, erlang:process_info(Self, message_queue_len)),
                if
                    Count + Got >= MaxMessages ->
                        Finish(max_events, Count + Got, All, Lost);
                    Now >= Deadline ->
                        Finish(duration, Count + Got, All, Lost);
                    Backlog > MaxBacklog ->
                        Finish(overload, Count + Got, All, Lost);
                    Open > 0, Now - Since > WaitMs ->
                        Gone();
                    (Now >= Flush orelse Kept >= MaxBatch),
                    Open < Window ->
                        erlang:send(Sink, {Tag, Self,
                                           #{kind => events,
                                             events => lists:reverse(All)}},
                                    [noconnect]),
                        Loop(Count + Got, [], 0, Now + FlushMs, Open + 1,
                             Now, Lost);
                    Got >= MaxBatch ->
                        %% More is waiting: take it now.
                        Loop(Count + Got, All, Kept, Flush, Open, Since,
                             Lost);
                    true ->
                        %% The mailbox is empty: sleep until the next flush
                        %% (the next answer, when the window is full), 50
                        %% ms at most, and take what came meanwhile in one
                        %% go. A step of this loop costs ~40,000 reductions:
                        %% run per event it cost 107 us a collection, as
                        %% much as the collection itself (measured).
                        Next = case Open < Window of
                                   true -> erlang:min(Flush, Deadline);
                                   false -> erlang:min(Deadline,
                                                       Since + WaitMs + 1)
                               end,
                        receive
                        after erlang:max(0, erlang:min(Next - Now, 50)) ->
                                ok
                        end,
                        Loop(Count + Got, All, Kept, Flush, Open, Since,
                             Lost)
                end
        end,
    Loop(0, [], 0, erlang:monotonic_time(millisecond) + FlushMs, 1,
         erlang:monotonic_time(millisecond), 0).

%% Up to Max messages from this process's mailbox, without waiting: the
%% trace messages (newest first) onto Events, any other onto Others, and
%% whether the mailbox was found empty. A function of its own so that its
%% fun carries three bindings: this is the step run for every event.
-spec drain(non_neg_integer(), list(), list()) -> {list(), list(), boolean()}.
drain(Max, Events, Others) ->
    Loop = fun Loop(0, E, O) ->
                   {E, O, false};
               Loop(N, E, O) ->
                   receive
                       {trace_ts, _, _, _, _} = Event ->
                           Loop(N - 1, [Event | E], O);
                       Other ->
                           Loop(N, E, [Other | O])
                   after 0 ->
                           {E, O, true}
                   end
           end,
    Loop(Max, Events, Others).
