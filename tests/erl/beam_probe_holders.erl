%% Processes that each hold refc binaries (test_holders_cost.py), loaded
%% only into nodes the test suite starts: a node where every process is a
%% binary holder, as every connection process of a broker is.
-module(beam_probe_holders).

-export([start/2, hold/1, longest_queue/0]).

%% Count processes each holding one binary of 100 bytes (refc: past 64),
%% Big of them, spread evenly over the spawn order, holding 10,000,
%% 20,000, ... instead (more than any process of a bare node holds). Returns the Big ones' pids, those holding most first.
-spec start(pos_integer(), non_neg_integer()) -> [pid()].
start(Count, Big) ->
    Every = Count div (Big + 1),
    %% Spawn index => binaries held.
    Held = maps:from_list([{K * Every, 10000 * K} || K <- lists:seq(1, Big)]),
    Pids = [spawn(?MODULE, hold, [maps:get(I, Held, 1)])
            || I <- lists:seq(1, Count)],
    [lists:nth(K * Every, Pids) || K <- lists:seq(Big, 1, -1)].

-spec hold(pos_integer()) -> [binary()].
hold(Count) ->
    Binaries = [binary:copy(<<I:800>>) || I <- lists:seq(1, Count)],
    receive
        stop -> Binaries
    end.

%% The longest message queue on the node (test_snapshot.py: a pass that
%% waits for beam-probe holds its workers' results there, one each).
-spec longest_queue() -> non_neg_integer().
longest_queue() ->
    lists:max([Length || P <- processes(),
                         {message_queue_len, Length}
                             <- [process_info(P, message_queue_len)]]).
