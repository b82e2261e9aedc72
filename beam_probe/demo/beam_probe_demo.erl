%% A small service that leaks refc binaries the way real ones do.
%%
%% This runs on the *demo* node that `beam-probe demo` starts for itself; it
%% is never loaded into a node beam-probe inspects.
%%
%% A feeder receives "requests" (64 KiB binaries, as a socket would deliver
%% them) and hands each to one of many idle workers. A worker looks at the
%% header and drops the rest; it allocates so little that it almost never
%% garbage-collects, so every binary it ever saw stays referenced from its
%% heap. That is the leak recon:bin_leak/1 finds. A cache keeps a 128-byte
%% sub-binary of each request as a key, which pins the whole 64 KiB parent:
%% the few-large-binaries case recon:proc_count(binary_memory, N) finds.
%% (A key of 64 bytes or less would be copied into a heap binary when sent,
%% and pin nothing.)
-module(beam_probe_demo).

-export([start/0, start/1, stop/0]).

-define(REQUEST_SIZE, 65536).
-define(INTERVAL_MS, 20).
-define(CACHE_KEYS, 20).

start() ->
    start(20).

start(Workers) when is_integer(Workers), Workers > 0 ->
    Pids = [spawn(fun worker/0) || _ <- lists:seq(1, Workers)],
    Cache = spawn(fun() -> cache([]) end),
    register(demo_cache, Cache),
    Feeder = spawn(fun() -> feeder(list_to_tuple(Pids), 0) end),
    register(demo_feeder, Feeder),
    ok.

stop() ->
    [exit(whereis(Name), kill) || Name <- [demo_feeder, demo_cache],
                                   whereis(Name) =/= undefined],
    ok.

feeder(Workers, N) ->
    Request = request(N),
    %% Squares modulo the worker count: some workers get many more requests
    %% than others, as hot keys do in real services.
    element(1 + (N * N) rem tuple_size(Workers), Workers) ! {request, Request},
    demo_cache ! {key, binary:part(Request, 0, 128)},
    receive
    after ?INTERVAL_MS -> ok
    end,
    feeder(Workers, N + 1).

%% Each request is a fresh refc binary (over 64 bytes, so off-heap).
request(N) ->
    <<N:64, (binary:copy(<<(N rem 251)>>, ?REQUEST_SIZE - 8))/binary>>.

worker() ->
    receive
        {request, <<_Id:64, _/binary>>} ->
            worker()
    end.

cache(Keys) ->
    receive
        {key, Key} ->
            cache(lists:sublist([Key | Keys], ?CACHE_KEYS))
    end.
