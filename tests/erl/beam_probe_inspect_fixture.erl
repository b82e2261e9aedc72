%% Test-only: the processes and the table `beam-probe inspect` is tested
%% on, as real applications make them: a gen_server whose state record
%% holds a cache of slices that pin 64 KiB requests (the classic binary
%% leak), a gen_statem, a gen_event with a handler, a hibernating
%% gen_server, one that sleeps when asked (busy), a plain receive loop, a
%% proc_lib loop that is no gen behaviour, a worker under an unregistered
%% supervisor, and a table of three key families.
-module(beam_probe_inspect_fixture).
-compile(debug_info).

-behaviour(gen_server).

-export([start/0, init/1, handle_call/3, handle_cast/2, handle_info/2,
         callback_mode/0, idle/3, plain_loop/1, proc_lib_loop/0,
         table_owner/1]).
%% gen_event handler callbacks (the module is its own handler).
-export([handle_event/2]).
%% For tests/bench_inspect.py.
-export([big/1, big_table/1, watch_start/1, watch_stop/0]).
%% For tests/test_inspect.py: a process held, idle in its loop, for a
%% while (as a descheduled or overloaded node holds it), then let go or
%% killed.
-export([hold/3]).
%% What a hostile review found: see tests/test_inspect.py.
-export([start_shapes/0, worker_loop/0]).

-record(state, {cache = #{} :: map(),
                log = [] :: list(),
                name = <<"cache">> :: binary()}).
-record(session, {id, user, token}).
-record(conn, {socket, buffer = <<>>}).

start() ->
    {ok, _} = gen_server:start({local, bp_cache}, ?MODULE, cache, []),
    {ok, _} = gen_server:start({local, bp_busy}, ?MODULE, busy, []),
    {ok, _} = gen_server:start({local, bp_doomed}, ?MODULE, busy, []),
    {ok, Hib} = gen_server:start({local, bp_hib}, ?MODULE, busy, []),
    ok = gen_server:call(Hib, hibernate),
    {ok, _} = gen_statem:start({local, bp_statem}, ?MODULE, statem, []),
    {ok, Events} = gen_event:start({local, bp_events}),
    ok = gen_event:add_handler(Events, ?MODULE,
                               #{seen => lists:seq(1, 200)}),
    register(bp_loop, spawn(?MODULE, plain_loop, [[]])),
    register(bp_proc_lib, proc_lib:spawn(?MODULE, proc_lib_loop, [])),
    Self = self(),
    spawn(?MODULE, table_owner, [Self]),
    receive table_ready -> ok end,
    ok.

%% A request of 64 KiB, and the 128-byte slice of it a cache keeps. Made
%% in one construction, so it is exactly 64 KiB (binary:copy/2 builds by
%% appending, and OTP 27 keeps room to grow: 968 bytes for 200).
slice(I) ->
    Request = <<I:32, 0:(8 * 65532)>>,
    binary:part(Request, 0, 128).

init(cache) ->
    put(secret, <<"hunter2">>),
    Cache = maps:from_list([{slice(I), I} || I <- lists:seq(1, 20)]),
    {ok, #state{cache = Cache, log = lists:seq(1, 200),
                name = #conn{socket = undefined, buffer = <<0:1000>>}}};
init(busy) ->
    {ok, #{calls => 0}};
init({shape, Make}) ->
    {ok, Make()};
init({big, N}) ->
    {ok, maps:from_list([{I, {I, <<"value">>}} || I <- lists:seq(1, N)])};
init(statem) ->
    {ok, idle, #{history => [<<0:800>>
                             || _ <- lists:seq(1, 30)]}};
init(supervisor) ->
    %% A worker under an unregistered supervisor, as applications start
    %% them: found by its pid.
    {ok, {#{strategy => one_for_one},
          [#{id => worker, start => {gen_server, start_link,
                                     [?MODULE, busy, []]}}]}};
init(#{seen := _} = Handler) ->
    {ok, Handler}.

handle_call({max_heap, Words}, _From, State) ->
    process_flag(max_heap_size, #{size => Words, kill => true,
                                  error_logger => false}),
    {reply, ok, State};
handle_call(hibernate, _From, State) ->
    {reply, ok, State, hibernate};
handle_call(_, _From, State) ->
    {reply, ok, State}.

handle_cast({sleep, Ms}, State) ->
    timer:sleep(Ms),
    {noreply, State};
handle_cast({die_in, Ms}, State) ->
    timer:sleep(Ms),
    {stop, normal, State}.

handle_info(_, State) ->
    {noreply, State}.

handle_event(_, Handler) ->
    {ok, Handler}.

callback_mode() ->
    state_functions.

idle(_, _, Data) ->
    {keep_state, Data}.

%% A plain receive loop: it never reads a system message.
plain_loop(State) ->
    put(loop_key, lists:seq(1, 100)),
    receive
        {keep, Item} -> plain_loop([Item | State])
    end.

%% Started by proc_lib, but no gen behaviour: a system message would stay
%% in its mailbox.
proc_lib_loop() ->
    receive
        stop -> ok
    end.

%% The tables' owner, and the unregistered supervisor's parent: a
%% process that lives as long as the node. bp_table holds three key
%% families: {user, N} (200-byte refc binaries), {session, N} (100-byte
%% slices that pin 10 KB each) and integers; bp_records holds #session{}
%% records (keypos 2).
table_owner(Parent) ->
    {ok, _} = supervisor:start_link(?MODULE, supervisor),
    T = ets:new(bp_table, [named_table, public, set]),
    [ets:insert(T, {{user, I}, <<I:1600>>})
     || I <- lists:seq(1, 300)],
    [ets:insert(T, {{session, I},
                    binary:part(<<I:80000>>, 0, 100)})
     || I <- lists:seq(1, 40)],
    [ets:insert(T, {I, I}) || I <- lists:seq(1, 25)],
    C = ets:new(bp_compressed, [named_table, public, set, compressed]),
    [ets:insert(C, {I, lists:seq(1, 100)}) || I <- lists:seq(1, 200)],
    ets:new(bp_private, [named_table, private]),
    R = ets:new(bp_records, [named_table, public, set,
                             {keypos, #session.id}]),
    [ets:insert(R, #session{id = I, user = I, token = <<"t">>})
     || I <- lists:seq(1, 10)],
    Parent ! table_ready,
    receive stop -> ok end.

%% bench_inspect.py: a gen_server whose state is a map of N entries.
big(N) ->
    {ok, _} = gen_server:start({local, bp_big}, ?MODULE, {big, N}, []),
    ok.

%% A public table of N objects, owned by a process that lives on.
big_table(N) ->
    Self = self(),
    spawn(fun() ->
                  T = ets:new(bp_big_table, [named_table, public, set]),
                  insert_many(T, 1, N),
                  Self ! ready,
                  receive stop -> ok end
          end),
    receive ready -> ok end.

insert_many(_, I, N) when I > N -> ok;
insert_many(T, I, N) ->
    ets:insert(T, {I, {user, I}, <<"value">>}),
    insert_many(T, I + 1, N).

%% How long the target is kept from its work: a process that asks Target
%% (a gen_server, or the table bp_big_table when Target is a table) every
%% millisecond and keeps the longest answer, in microseconds, until
%% watch_stop/0.
watch_start(Target) ->
    register(bp_watch, spawn(fun() -> watch_loop(Target, 0) end)),
    ok.

watch_loop(Target, Longest) ->
    receive
        {stop, From} -> From ! {longest, Longest}
    after 1 ->
            {Us, _} = timer:tc(fun() -> ask(Target) end),
            watch_loop(Target, erlang:max(Longest, Us))
    end.

ask(table) ->
    I = rand:uniform(1000),
    ets:insert(bp_big_table, {I, {user, I}, <<"value">>}),
    ets:lookup(bp_big_table, I);
ask(Name) ->
    gen_server:call(Name, ping, infinity).

watch_stop() ->
    bp_watch ! {stop, self()},
    receive {longest, Us} -> Us end.

hold(Name, Ms, Then) ->
    Pid = whereis(Name),
    spawn(fun() ->
                  true = erlang:suspend_process(Pid),
                  timer:sleep(Ms),
                  case Then of
                      resume -> erlang:resume_process(Pid);
                      kill -> exit(Pid, kill)
                  end
          end),
    ok.

%% States of the shapes that broke the walk once: a record around a big
%% map (its children were copied into the process by a match
%% specification), a thousand slices of one binary (counted a thousand
%% times), a gb_tree (its depth past the budget counted as nothing), an
%% improper list (counted cell by cell, unbounded), and a proc_lib
%% worker of this gen_server module that hibernates in a loop of its own.
start_shapes() ->
    {ok, W} = gen_server:start({local, bp_wrapped}, ?MODULE,
                               {shape, fun() ->
                                               {state, maps:from_list(
                                                         [{I, {I, <<"v">>}}
                                                          || I <- lists:seq(
                                                                    1, 200000)])}
                                       end}, []),
    {total_heap_size, Heap} = process_info(W, total_heap_size),
    ok = gen_server:call(W, {max_heap, 2 * Heap}),
    One = <<0:(8 * 1048576)>>,
    {ok, _} = gen_server:start({local, bp_shared}, ?MODULE,
                               {shape, fun() ->
                                               #{fields =>
                                                     [binary:part(One, I * 1000,
                                                                  100)
                                                      || I <- lists:seq(0, 999)]}
                                       end}, []),
    {ok, _} = gen_server:start({local, bp_tree}, ?MODULE,
                               {shape, fun() ->
                                               gb_trees:from_orddict(
                                                 [{I, {I, I}}
                                                  || I <- lists:seq(1, 100000)])
                                       end}, []),
    {ok, _} = gen_server:start({local, bp_improper}, ?MODULE,
                               {shape, fun() ->
                                               lists:seq(1, 300000) ++ tail
                                       end}, []),
    register(bp_worker, proc_lib:spawn(?MODULE, worker_loop, [])),
    ok.

worker_loop() ->
    proc_lib:hibernate(?MODULE, worker_loop, []).
