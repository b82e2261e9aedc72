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
%% Round 5 of the hostile review (issue 37): see tests/test_inspect_round5.py.
-export([capped/3, handlers/2, long_list/2, many_keys/2, hib_plain/1,
         hib_plain_loop/1, fun_spawned/1, ticker_start/0, ticker_stop/0,
         promote/1, caller_start/1, caller_stop/0, handle_call/2,
         nested/2, shared_capped/2, keys_behind_queue/3]).
%% Issue 38 (items 2 and 3): see tests/test_inspect_outside.py.
-export([outside_start/0, holder_loop/1, table_keeper/0]).
%% tests/bench_inspect_binaries.py.
-export([holder/2]).

-record(state, {cache = #{} :: map(),
                log = [] :: list(),
                name = <<"cache">> :: binary()}).
-record(session, {id, user, token}).
-record(conn, {socket, buffer = <<>>}).
%% RabbitMQ's name of a queue, an exchange, a vhost's thing.
-record(resource, {virtual_host, kind, name}).

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
handle_call({max_heap_shared, Words}, _From, State) ->
    %% OTP 25 accepts include_shared_binaries and drops it; 27 and 28
    %% count the process's shared binaries against the cap.
    process_flag(max_heap_size, #{size => Words, kill => true,
                                  error_logger => false,
                                  include_shared_binaries => true}),
    {reply, ok, State};
handle_call({put_many, N}, _From, State) ->
    [put(I, I) || I <- lists:seq(1, N)],
    {reply, ok, State};
handle_call({garbage, Words}, _From, State) ->
    garbage(Words),
    {reply, ok, State};
handle_call(hibernate, _From, State) ->
    {reply, ok, State, hibernate};
handle_call(_, _From, State) ->
    {reply, ok, State}.

handle_cast({sleep, Ms}, State) ->
    timer:sleep(Ms),
    {noreply, State};
handle_cast(hibernate_plain, State) ->
    erlang:hibernate(?MODULE, hib_plain_loop, [State]);
handle_cast({die_in, Ms}, State) ->
    timer:sleep(Ms),
    {stop, normal, State}.

handle_info(_, State) ->
    {noreply, State}.

handle_event(_, Handler) ->
    {ok, Handler}.

%% A gen_event handler's call: what caller_start/1 asks.
handle_call(ping, Handler) ->
    {ok, pong, Handler}.

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
    %% Room enough for inspect's rule (4 times the old heap, 7 times the
    %% young heap's data and its request: 4.2 times this heap when first
    %% measured).
    ok = gen_server:call(W, {max_heap, 6 * Heap}),
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

%% A gen_server registered Name whose state is a list of about Words
%% words ({I, I} pairs: 5 words an element), capped by max_heap_size at
%% Max words (kill), as the tester's were. Its heap is collected first,
%% so that it starts no larger than its state needs.
-spec capped(atom(), non_neg_integer(), pos_integer()) -> pid().
capped(Name, Words, Max) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE,
                               {shape, fun() ->
                                               [{I, I}
                                                || I <- lists:seq(
                                                          1, Words div 5)]
                                       end}, []),
    true = erlang:garbage_collect(P),
    ok = gen_server:call(P, {max_heap, Max}),
    P.

%% A gen_server registered Name holding 20,001 80-byte slices of one
%% 4 MB binary (the review's shape), capped at Max words (kill) with
%% include_shared_binaries => true.
-spec shared_capped(atom(), pos_integer()) -> pid().
shared_capped(Name, Max) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE,
                               {shape, fun() ->
                                               Whole = binary:copy(<<7>>,
                                                                   4000000),
                                               [binary:part(Whole, I * 100,
                                                            80)
                                                || I <- lists:seq(0, 20000)]
                                       end}, []),
    true = erlang:garbage_collect(P),
    ok = gen_server:call(P, {max_heap_shared, Max}),
    P.

%% A plain process registered Name whose dictionary has Keys keys, with
%% Queued small messages waiting in its mailbox (the review's shape).
-spec keys_behind_queue(atom(), pos_integer(), pos_integer()) -> pid().
keys_behind_queue(Name, Keys, Queued) ->
    Self = self(),
    P = spawn(fun() ->
                      [put(I, I) || I <- lists:seq(1, Keys)],
                      erlang:garbage_collect(),
                      Self ! {self(), keys_put},
                      receive stop -> ok end
              end),
    receive {P, keys_put} -> ok end,
    true = register(Name, P),
    [P ! x || _ <- lists:seq(1, Queued)],
    P.

%% A gen_event manager registered Name with N handlers, each a small map
%% (a handler with an id: {?MODULE, I}).
-spec handlers(atom(), pos_integer()) -> pid().
handlers(Name, N) ->
    {ok, P} = gen_event:start({local, Name}),
    [ok = gen_event:add_handler(P, {?MODULE, I}, #{seen => [I, I, I]})
     || I <- lists:seq(1, N)],
    P.

%% A gen_server registered Name whose state is a list of N elements,
%% each a 4-word tuple: {I, <<"v">>} (~72 bytes an element).
-spec long_list(atom(), pos_integer()) -> pid().
long_list(Name, N) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE,
                               {shape, fun() ->
                                               [{I, <<"v">>}
                                                || I <- lists:seq(1, N)]
                                       end}, []),
    P.

%% A gen_server registered Name with N keys in its dictionary.
-spec many_keys(atom(), pos_integer()) -> pid().
many_keys(Name, N) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE, busy, []),
    ok = gen_server:call(P, {put_many, N}),
    P.

%% A gen_server of this module (started by gen_server, its
%% '$initial_call' this module's init/1) that hibernates into a plain
%% loop of its own: a system message sent to it stays for good.
-spec hib_plain(atom()) -> pid().
hib_plain(Name) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE, busy, []),
    gen_server:cast(P, hibernate_plain),
    hibernated(P).

hibernated(P) ->
    case process_info(P, current_function) of
        {current_function, {erlang, hibernate, 3}} ->
            P;
        _ ->
            timer:sleep(10),
            hibernated(P)
    end.

-spec hib_plain_loop(term()) -> no_return().
hib_plain_loop(State) ->
    receive
        {keep, _} -> erlang:hibernate(?MODULE, hib_plain_loop, [State])
    end.

%% proc_lib:spawn(Fun): initial_call proc_lib:init_p/3, a plain loop.
-spec fun_spawned(atom()) -> pid().
fun_spawned(Name) ->
    P = proc_lib:spawn(fun() -> proc_lib_loop() end),
    true = register(Name, P),
    P.

%% How the node fares while inspect runs: a ticker that wakes every
%% millisecond and keeps the longest gap it saw (a scheduler held), the
%% node's memory at its highest, and the long_gc and long_schedule
%% events of erlang:system_monitor/2 (over 20 ms), until ticker_stop/0,
%% which gives #{gap_us, peak_rise, long_gc, long_schedule} (the longest
%% of each, in ms, 0 if none).
-spec ticker_start() -> ok.
ticker_start() ->
    Self = self(),
    P = spawn(fun() ->
                      erlang:system_monitor(self(), [{long_gc, 20},
                                                     {long_schedule, 20}]),
                      Self ! started,
                      ticker(erlang:monotonic_time(microsecond), 0,
                             erlang:memory(total), 0, 0, 0)
              end),
    receive started -> ok end,
    register(bp_ticker, P),
    ok.

ticker(Last, Gap, Base, Peak, Gc, Sched) ->
    receive
        {monitor, _, long_gc, Info} ->
            {timeout, Ms} = lists:keyfind(timeout, 1, Info),
            ticker(Last, Gap, Base, Peak, erlang:max(Gc, Ms), Sched);
        {monitor, _, long_schedule, Info} ->
            {timeout, Ms} = lists:keyfind(timeout, 1, Info),
            ticker(Last, Gap, Base, Peak, Gc, erlang:max(Sched, Ms));
        {stop, From} ->
            erlang:system_monitor(undefined),
            From ! {ticked, #{gap_us => Gap, peak_rise => Peak - Base,
                              long_gc => Gc, long_schedule => Sched}}
    after 1 ->
            Now = erlang:monotonic_time(microsecond),
            ticker(Now, erlang:max(Gap, Now - Last), Base,
                   erlang:max(Peak, erlang:memory(total)), Gc, Sched)
    end.

-spec ticker_stop() -> map().
ticker_stop() ->
    bp_ticker ! {stop, self()},
    receive {ticked, Figures} -> Figures end.

%% Words of garbage made on the heap, 10,000 at a time (a process's own
%% garbage_collection_info is no guide: read from inside, its heap looks
%% full).
garbage(Words) ->
    garbage(Words, 0).

garbage(Words, Sum) when Words < 10000 ->
    Sum;
garbage(Words, Sum) ->
    garbage(Words - 10000, Sum + length(lists:seq(1, 5000))).

%% A process's data moved to its old heap, where a long-lived server's
%% is: a minor collection promotes what a full one left in the young heap.
-spec promote(atom()) -> ok.
promote(Name) ->
    true = erlang:garbage_collect(whereis(Name), [{type, minor}]),
    ok.

%% A gen_server registered Name whose state is a tuple of N lists of 20
%% small integers (42 words each): a heap of 42 N words, past what
%% size_shared may size at N = 60,000.
-spec nested(atom(), pos_integer()) -> pid().
nested(Name, N) ->
    {ok, P} = gen_server:start({local, Name}, ?MODULE,
                               {shape, fun() ->
                                               {nested,
                                                [lists:seq(I, I + 19)
                                                 || I <- lists:seq(1, N)]}
                                       end}, []),
    P.

%% A client of the gen_event Manager's first handler ({?MODULE, 1}): it
%% calls it with gen_event's default timeout (5 s) every few ms until
%% caller_stop/0, which gives #{calls, failed, longest_ms}.
-spec caller_start(atom()) -> ok.
caller_start(Manager) ->
    register(bp_caller, spawn(fun() -> caller(Manager, 0, 0, 0) end)),
    ok.

caller(Manager, Calls, Failed, Longest) ->
    receive
        {stop, From} ->
            From ! {called, #{calls => Calls, failed => Failed,
                              longest_ms => Longest div 1000}}
    after 5 ->
            {Us, Answer} = timer:tc(fun() ->
                                            catch gen_event:call(
                                                    Manager, {?MODULE, 1},
                                                    ping)
                                    end),
            caller(Manager, Calls + 1,
                   Failed + case Answer of pong -> 0; _ -> 1 end,
                   erlang:max(Longest, Us))
    end.

-spec caller_stop() -> map().
caller_stop() ->
    bp_caller ! {stop, self()},
    receive {called, Figures} -> Figures end.

%% Issue 38, items 2 and 3: what inspect answers from outside, and keys
%% written as the node writes them.
%%   bp_holder: a plain receive loop (spawn/3, no sys) holding 5,000
%%     refc binaries of 4,000 bytes, the first 1,000 also held by
%%     bp_holder_peer: 20,000,000 bytes each once, 16,000,000 of them
%%     held by it alone; the largest 4,000 bytes;
%%   bp_backlog: a plain loop that never receives, with 12,000 messages
%%     waiting (over inspect's MAILBOX_MOST);
%%   tables keyed {#resource{}, Stat} as RabbitMQ's metrics tables are:
%%     bp_resources (named_table), bp_resources_unnamed (one table, not
%%     named_table), bp_resources_twice (two tables, neither named_table).
-spec outside_start() -> ok.
outside_start() ->
    Binaries = [<<I:32, 0:(8 * 3996)>> || I <- lists:seq(1, 5000)],
    Peer = spawn(?MODULE, holder_loop, [lists:sublist(Binaries, 1000)]),
    register(bp_holder_peer, Peer),
    register(bp_holder, spawn(?MODULE, holder_loop, [Binaries])),
    Backlog = spawn(?MODULE, holder_loop, [[]]),
    register(bp_backlog, Backlog),
    [Backlog ! {waiting, I} || I <- lists:seq(1, 12000)],
    Self = self(),
    register(bp_keeper, spawn(fun() -> Self ! keeper_ready,
                                       table_keeper() end)),
    receive keeper_ready -> ok end,
    wait_tables(),
    ok.

wait_tables() ->
    case ets:info(bp_resources, size) of
        undefined -> timer:sleep(10), wait_tables();
        _ -> ok
    end.

%% Holds what it was given; reads only `stop` (so bp_backlog's messages
%% stay).
-spec holder_loop(list()) -> ok.
holder_loop(Held) ->
    receive
        stop -> erlang:length(Held), ok
    end.

-spec table_keeper() -> ok.
table_keeper() ->
    Rows = [{{#resource{virtual_host = <<"/">>, kind = queue,
                        name = <<"q", (integer_to_binary(I))/binary>>},
              Stat}, I}
            || I <- lists:seq(1, 20), Stat <- [messages, memory]],
    Named = ets:new(bp_resources, [named_table, public, set]),
    Unnamed = ets:new(bp_resources_unnamed, [public, set]),
    Twice = [ets:new(bp_resources_twice, [public, set]) || _ <- [1, 2]],
    [ets:insert(T, Rows) || T <- [Named, Unnamed | Twice]],
    receive stop -> ok end.

%% A plain loop registered as Name holding N refc binaries of 100 bytes,
%% each its own.
-spec holder(atom(), pos_integer()) -> pid().
holder(Name, N) ->
    Self = self(),
    P = spawn(fun() ->
                      Held = [<<I:32, 0:(8 * 96)>> || I <- lists:seq(1, N)],
                      Self ! held,
                      holder_loop(Held)
              end),
    receive held -> ok end,
    register(Name, P),
    P.
