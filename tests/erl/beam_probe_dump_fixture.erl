%% Test-only: a node worth dying, for the crash dump tests. Its processes
%% are made as real applications make them: a gen_server whose state
%% record holds a cache of 128-byte slices that pin 64 KiB requests, a
%% worker under an unregistered supervisor, a receive loop spawned from
%% M:F/A holding a list of tuples, a process spawned from a fun with a
%% mailbox of 100,000 messages (mailbox/1), a table of 10,000 objects.
%% die/1 kills the node for real: a process that eats memory until
%% eheap_alloc fails (run the node with +MMscs 256 +MMsco true +Musac
%% false), or erlang:halt/1 with a reason.
-module(beam_probe_dump_fixture).

-behaviour(gen_server).
%% Also the callback module of the unregistered supervisor (init(sup)).


-export([start/0, born/1, mailbox/1, die/1]).
%% For tests/bench_crashdump.py.
-export([big/1, big_loop/1, build/2]).
-export([init/1, handle_call/3, handle_cast/2, loop/1, holder/1,
         table_owner/1, start_worker/0]).

-record(state, {cache = #{} :: map(), hits = 0 :: non_neg_integer()}).

start() ->
    {ok, _} = gen_server:start({local, bp_dump_cache}, ?MODULE, cache, []),
    %% As applications start workers: a supervisor nobody registered,
    %% linked to its starter (as to an application master).
    spawn(fun() ->
                  {ok, _} = supervisor:start_link(?MODULE, sup),
                  receive never -> ok end
          end),
    register(bp_dump_loop,
             spawn(?MODULE, loop, [[{item, I, <<"v", I:32>>}
                                    || I <- lists:seq(1, 1000)]])),
    Self = self(),
    register(bp_dump_owner, spawn(?MODULE, table_owner, [Self])),
    receive table_ready -> ok end,
    ok.

%% N processes born now and kept: what diff names when the node dies.
born(N) ->
    Parent = spawn(fun() ->
                           [spawn_link(?MODULE, holder, [I])
                            || I <- lists:seq(1, N)],
                           receive never -> ok end
                   end),
    register(bp_dump_born, Parent),
    ok.

%% A process spawned from a fun that never reads its N messages. Made
%% after the snapshots: on OTP 27 a node capped at 256 MB, its heap
%% grown for 100,000 messages, could not give a snapshot 11 MB more.
mailbox(N) ->
    Mailbox = spawn(fun() -> receive never -> ok end end),
    register(bp_dump_mailbox, Mailbox),
    [Mailbox ! {msg, I} || I <- lists:seq(1, N)],
    ok.

%% A registered process whose receive loop holds N two-tuples in a list:
%% 5 words an element (40 bytes on 64 bits). Its heap is made large
%% enough at the start and the list built with no garbage, so it is never
%% collected: a capped node needs the list's size once, not a copy's.
big(N) ->
    Self = self(),
    Pid = spawn_opt(fun() ->
                            List = build(N, []),
                            Self ! {big, erlang:length(List)},
                            big_loop(List)
                    end, [{min_heap_size, 5 * N + 1000}]),
    register(bp_dump_big, Pid),
    receive {big, N} -> ok end.

build(0, Acc) -> Acc;
build(N, Acc) -> build(N - 1, [{N, N} | Acc]).

big_loop(List) ->
    receive
        {get, From} ->
            From ! erlang:length(List),
            big_loop(List)
    end.

holder(I) ->
    Kept = binary:copy(<<I:32>>, 256),
    receive never -> Kept end.

die(eheap) ->
    spawn(fun() -> register(bp_dump_eater, self()), eat([]) end),
    ok;
die(tuples) ->
    %% Tuples of 128 MB (the largest arity) until eheap_alloc fails: a
    %% quick death whose own heap is a few lines of zeros.
    spawn(fun() -> register(bp_dump_eater, self()), eat_tuples([]) end),
    ok;
die({halt, Reason}) ->
    spawn(fun() -> timer:sleep(100), erlang:halt(Reason) end),
    ok.

eat(Acc) ->
    eat([lists:seq(1, 100) | Acc]).

eat_tuples(Acc) ->
    eat_tuples([erlang:make_tuple(16#FFFFFF, 0) | Acc]).

loop(State) ->
    receive
        {get, From} ->
            From ! State,
            loop(State)
    end.

table_owner(Parent) ->
    T = ets:new(bp_dump_table, [named_table, public, set]),
    ets:insert(T, [{{user, I}, <<"session", I:32>>}
                   || I <- lists:seq(1, 10000)]),
    Parent ! table_ready,
    receive never -> ok end.

%% gen_server and supervisor callbacks.
init(cache) ->
    Cache = maps:from_list([{<<"key", I:8>>, slice(I)}
                            || I <- lists:seq(1, 20)]),
    {ok, #state{cache = Cache, hits = 20}};
init(sup) ->
    {ok, {#{strategy => one_for_one},
          [#{id => worker,
             start => {?MODULE, start_worker, []}}]}}.

start_worker() ->
    gen_server:start_link(?MODULE, cache, []).

handle_call(_, _, State) ->
    {reply, ok, State}.

handle_cast(_, State) ->
    {noreply, State}.

%% A request of 64 KiB and the 128-byte slice of it a cache keeps.
slice(I) ->
    Request = <<I:32, 0:(8 * 65532)>>,
    binary:part(Request, 0, 128).
