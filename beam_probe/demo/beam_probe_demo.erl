%% A small service that leaks refc binaries the way real ones do.
%%
%% This runs on the *demo* node that `beam-probe demo` starts for itself; it
%% is never loaded into a node beam-probe inspects.
%%
%% A feeder receives "requests" (64 KiB binaries, as a socket would deliver
%% them) and hands each to one of many idle workers. A worker looks at the
%% header and drops the rest; it allocates so little that it almost never
%% garbage-collects, so every binary it ever saw stays referenced from its
%% heap. That is the leak recon:bin_leak/1 finds. A cache (a gen_server)
%% keeps a 128-byte sub-binary of each request as a key of its map, which
%% pins the whole 64 KiB parent: the few-large-binaries case
%% recon:proc_count(binary_memory, N) finds, and the pinned slices
%% `beam-probe inspect` names in its state. (A key of 64 bytes or less
%% would be copied into a heap binary when sent, and pin nothing.)
-module(beam_probe_demo).
-behaviour(gen_server).

%% Kept in the beam whoever compiles it (the demo, the README's test): the
%% record's field names, which `inspect` reads to write State#state.cache.
-compile(debug_info).

-export([start/0, start/1, stop/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(REQUEST_SIZE, 65536).
-define(INTERVAL_MS, 20).
-define(CACHE_KEYS, 20).

%% The cache: each key it has seen, by when it was last seen (a count of
%% keys), the oldest dropped past ?CACHE_KEYS.
-record(state, {cache = #{} :: #{binary() => non_neg_integer()},
                seen = 0 :: non_neg_integer()}).

start() ->
    start(20).

start(Workers) when is_integer(Workers), Workers > 0 ->
    Pids = [spawn(fun worker/0) || _ <- lists:seq(1, Workers)],
    {ok, _} = gen_server:start({local, demo_cache}, ?MODULE, [], []),
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
    gen_server:cast(demo_cache, {key, binary:part(Request, 0, 128)}),
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

%% -- the cache -------------------------------------------------------------

init([]) ->
    {ok, #state{}}.

handle_cast({key, Key}, #state{cache = Cache, seen = Seen} = State) ->
    {noreply, State#state{cache = oldest_out(Cache#{Key => Seen}),
                          seen = Seen + 1}}.

handle_call(_Request, _From, State) ->
    {reply, ok, State}.

handle_info(_Message, State) ->
    {noreply, State}.

oldest_out(Cache) when map_size(Cache) =< ?CACHE_KEYS ->
    Cache;
oldest_out(Cache) ->
    {Oldest, _} = maps:fold(fun(K, At, {_, Min}) when At < Min -> {K, At};
                               (_, _, Acc) -> Acc
                            end, {none, infinity}, Cache),
    maps:remove(Oldest, Cache).
