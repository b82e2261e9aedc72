%% A process with a long mailbox, for test_flooded_process.py (issue 39
%% item 4): process_info(P, memory) walks the queue (OTP#6494), so one
%% such process is the slowest a pass can meet. Loaded only into nodes the
%% tests start.
-module(beam_probe_flood_fixture).

-export([flood/1, flood_binaries/1, queue_len/1]).

%% The bytes of each message's pad: a heap binary (under 64 bytes), so a
%% message is ~14 words on a 64-bit node and a copy of the mailbox
%% (process_info(P, messages)) would cost ~112 bytes a message, well
%% apart from what the commands may cost.
-define(PAD, 48).

%% A process that never takes a message, sent Count {m, I, Pad} by four
%% senders at once (as a backlog fills: from many processes). Returns its
%% pid once every message is in its queue.
-spec flood(pos_integer()) -> pid().
flood(Count) ->
    Sink = erlang:spawn(fun() -> receive never_sent -> ok end end),
    Pad = binary:copy(<<"x">>, ?PAD),
    Self = erlang:self(),
    Share = Count div 4,
    Shares = [Share + Count rem 4, Share, Share, Share],
    Senders = [erlang:spawn_link(fun() -> send(Sink, Pad, N), Self ! sent end)
               || N <- Shares],
    [receive sent -> ok end || _ <- Senders],
    wait(Sink, Count),
    Sink.

%% A process whose queue holds Count references to one refc binary of
%% 4 MiB (more than any process of a bare node holds; a backlog of payloads: a socket's data, a fan-out's
%% message), collected once, as a backlogged process is when its heap
%% fills: the messages are then on its heap, and process_info(P, binary)
%% lists every reference (before, only those sent while it ran).
-spec flood_binaries(pos_integer()) -> pid().
flood_binaries(Count) ->
    Sink = erlang:spawn(fun() -> receive never_sent -> ok end end),
    Payload = binary:copy(<<"y">>, 4 * 1024 * 1024),
    send(Sink, Payload, Count, binary),
    wait(Sink, Count),
    erlang:garbage_collect(Sink),
    Sink.

send(_, _, 0, binary) ->
    ok;
send(Sink, Payload, I, binary) ->
    Sink ! Payload,
    send(Sink, Payload, I - 1, binary).

send(_, _, 0) ->
    ok;
send(Sink, Pad, I) ->
    Sink ! {m, I, Pad},
    send(Sink, Pad, I - 1).

wait(Sink, Count) ->
    case queue_len(Sink) >= Count of
        true -> ok;
        false -> timer:sleep(20), wait(Sink, Count)
    end.

-spec queue_len(pid()) -> non_neg_integer().
queue_len(Pid) ->
    {message_queue_len, Len} = erlang:process_info(Pid, message_queue_len),
    Len.

