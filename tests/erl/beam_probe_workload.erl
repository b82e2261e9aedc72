%% Test workload with leaks of known size, loaded only into nodes the test
%% suite and the benchmarks start.
%%
%%   * Leakers: after refill/1, leaker I has received 100 + 7*I fresh refc
%%     binaries and dropped them. Its heap is large (min_heap_size), so it does not
%%     collect, and every dropped binary stays referenced until a GC: the
%%     leak bin_leak finds, with a distinct count per process.
%%   * Keepers: keeper J holds live binaries totalling (J + 1) * 100000 + 1000 * J
%%     bytes: what proc_count(binary_memory, N) finds; a GC frees nothing.
%%     It also leaves 3 * J messages unread (message_queue_len).
%%   * Idle processes, to give the node a realistic process count.
-module(beam_probe_workload).

-export([start/3, refill/1, stop/1, probes_running/1, named/1,
         fill/1, linked_to/1, grow/1, sawtooth/2, stepper/0, step/2,
         ask/3]).
%% The three-snapshot scenario (test_snapshot.py).
-export([scene/0, plant/3, tick/2, noise/1, stop_noise/1]).
%% alloc, ets and trace-gc (test_alloc_ets.py, test_trace_gc.py).
-export([fragment/2, burst/3, hold_binaries/1, big_table/2, churn/1]).
%% Callbacks: the scene's supervisor, and its proc_lib workers.
-export([init/1, start_leak_worker/0, leak_worker/1, noise_loop/0]).
%% What net_kernel is asked to connect to (test_reliability.py).
-export([watch_connects/0, connects/1]).
%% A hibernating process, registered as bp_sleeper (test_leak_hunt.py).
-export([sleeper/0, sleep_loop/0]).
%% What a probe costs the node (bench_node_cost.py).
-export([peak_start/0, peak_stop/0]).
%% A tree shaped like a real application's (test_snapshot.py), and its
%% callbacks.
-export([tree/0, grow_tree/2, start_item_sup/1, start_tree_worker/1,
         start_fun_worker/1, tree_worker/2]).
%% One binary referenced many times by one process; a gen_server that
%% names itself in its dictionary, as RabbitMQ's queues do
%% (test_names.py), and its callbacks.
-export([shared_refs/3, named_queue/1, start_named_queue/1,
         handle_call/3, handle_cast/2]).

-define(BINARY_SIZE, 1024).
-define(LEAKER_HEAP_WORDS, 100000).
%% Off-heap binaries count towards a process's virtual binary heap; crossing
%% min_bin_vheap_size (46422 words by default) triggers a GC, which would
%% free the very leak we plant.
-define(LEAKER_VHEAP_WORDS, 100000000).

%% Returns {Leakers, Keepers, Idle} as lists of pids. The leakers start
%% empty: refill/1 plants their leak.
start(Leakers, Keepers, Idle) ->
    LeakerPids = spread(Leakers,
                        fun(_) ->
                                spawn_opt(fun leaker/0,
                                          [{min_heap_size, ?LEAKER_HEAP_WORDS},
                                           {min_bin_vheap_size,
                                            ?LEAKER_VHEAP_WORDS}])
                        end),
    KeeperPids = spread(Keepers, fun(K) -> spawn(fun() -> keeper(K - 1) end) end),
    %% Keeper J also has 3 * J unread messages: distinct queue lengths.
    [[Pid ! {unread, K} || K <- lists:seq(1, 3 * J)]
     || {J, Pid} <- lists:zip(lists:seq(0, Keepers - 1), KeeperPids)],
    IdlePids = spread(Idle, fun(_) -> spawn(fun idle/0) end),
    {LeakerPids, KeeperPids, IdlePids}.

%% Spawn(K) for K in 1..Count, from one spawner per scheduler, so that the
%% processes start on every scheduler's run queue (and in its allocator
%% instances) as a real node's do; spawned from one process they all begin
%% on one scheduler, and a node with 16 of them is then measured in an
%% unusual state that drifts as the scheduler balancing moves them
%% (measured: the in-node reference went from 405 to 681 ms at 100k
%% processes over one run on 16 cores). The pids come back in K order.
spread(Count, Spawn) ->
    Schedulers = erlang:system_info(schedulers_online),
    Self = self(),
    Tag = make_ref(),
    [spawner(I, fun() ->
                        Self ! {Tag, I, [Spawn(K)
                                         || K <- lists:seq(I, Count,
                                                           Schedulers)]}
                end)
     || I <- lists:seq(1, Schedulers)],
    Shares = [receive {Tag, I, Pids} -> Pids end
              || I <- lists:seq(1, Schedulers)],
    interleave(Shares, [], []).

%% A spawner kept on scheduler I. The scheduler option is undocumented
%% (OTP 25 and 28 take it); without it the spawners still spread as the
%% balancer moves them.
spawner(I, Fun) ->
    try
        spawn_opt(Fun, [{scheduler, I}])
    catch
        error:badarg -> spawn(Fun)
    end.

%% The first of each share, then the second of each, ...: shares differ in
%% length by one at most, the longer first, so this is K order.
interleave([], [], Acc) ->
    lists:reverse(Acc);
interleave([], Rest, Acc) ->
    interleave(lists:reverse(Rest), [], Acc);
interleave([[] | Shares], Rest, Acc) ->
    interleave(Shares, Rest, Acc);
interleave([[Pid | Share] | Shares], Rest, Acc) ->
    interleave(Shares, [Share | Rest], [Pid | Acc]).

%% Make every leaker drop its batch of binaries again, and wait until done.
refill(LeakerPids) ->
    Refs = [begin
                Ref = make_ref(),
                Pid ! {fill, 100 + 7 * I, self(), Ref},
                Ref
            end || {I, Pid} <- lists:zip(lists:seq(1, length(LeakerPids)),
                                         LeakerPids)],
    [receive {filled, Ref} -> ok end || Ref <- Refs],
    ok.

stop({Leakers, Keepers, Idle}) ->
    [exit(P, kill) || P <- Leakers ++ Keepers ++ Idle],
    ok.

%% Processes beam-probe started that still run, but Except's (the node of
%% the test's own connection). rex gives a call the caller's group leader,
%% a process on the beam_probe_N node, and every process the call spawns
%% inherits it; it stays a pid of that node after the node is gone.
probes_running(Except) ->
    [P || P <- processes(), P =/= self(),
          {group_leader, Leader} <- [process_info(P, group_leader)],
          node(Leader) =/= node(), node(Leader) =/= Except,
          lists:prefix("beam_probe_", atom_to_list(node(Leader)))].

%% Idle processes until only Free more can be spawned on this node.
fill(Free) ->
    Count = erlang:system_info(process_limit)
        - erlang:system_info(process_count) - Free,
    [spawn(fun idle/0) || _ <- lists:seq(1, Count)],
    Count.

%% A local process linked to a process on Node; the pid of each.
linked_to(Node) ->
    Self = self(),
    Local = spawn(fun() ->
                          Far = spawn_link(Node, fun idle/0),
                          Self ! {far, Far},
                          idle()
                  end),
    receive {far, Far} -> {Local, Far} end.

%% A process registered as Name (an atom the test makes), for name lookups.
named(Name) ->
    Pid = spawn(fun idle/0),
    true = register(Name, Pid),
    Pid.

%% A leak of known rate: a process whose live refc binaries grow by
%% BytesPerSecond, in 64 KB binaries, on the clock (the rate holds however
%% late its timer fires). A collection frees none of them.
grow(BytesPerSecond) ->
    spawn(fun() ->
                  grow(BytesPerSecond, erlang:monotonic_time(millisecond), 0,
                       [])
          end).

grow(Rate, Start, Held, Binaries) ->
    receive
        stop -> erlang:length(Binaries)
    after 10 ->
        Due = Rate * (erlang:monotonic_time(millisecond) - Start) div 1000,
        New = [binary:copy(<<0>>, 65536)
               || _ <- lists:seq(1, (Due - Held) div 65536)],
        grow(Rate, Start, Held + 65536 * erlang:length(New), New ++ Binaries)
    end.

%% Memory that moves only when told: step(Pid, Bytes) adds Bytes of live
%% refc binaries (64 KB each), step(Pid, drop) drops them all and collects.
%% A watch under a fake clock (test_watch.py) steps it at each of its
%% sleeps, so a leak's rate is exact and no test waits for real.
stepper() ->
    spawn(fun() -> stepper_loop([]) end).

step(Pid, What) ->
    ask(Pid, step, What).

%% {Tag, self(), Ref, What} to Pid and its answer {Ref, Answer}, or
%% {error, Reason} if it is gone first (the steppers and counters of the
%% tests answer so).
ask(Pid, Tag, What) ->
    Ref = erlang:monitor(process, Pid),
    Pid ! {Tag, self(), Ref, What},
    receive
        {Ref, Answer} ->
            erlang:demonitor(Ref, [flush]),
            Answer;
        {'DOWN', Ref, process, Pid, Reason} ->
            {error, Reason}
    end.

stepper_loop(Binaries) ->
    receive
        {step, From, Ref, drop} ->
            stepper_dropped(From, Ref);
        {step, From, Ref, Bytes} when is_integer(Bytes), Bytes >= 0 ->
            New = [binary:copy(<<0>>, 65536)
                   || _ <- lists:seq(1, Bytes div 65536)],
            All = New ++ Binaries,
            From ! {Ref, 65536 * erlang:length(All)},
            stepper_loop(All);
        {step, From, Ref, _} ->
            From ! {Ref, {error, badarg}},
            stepper_loop(Binaries)
    end.

%% Apart from stepper_loop/1, so that nothing here still refers to the
%% dropped binaries when the collection runs.
stepper_dropped(From, Ref) ->
    erlang:garbage_collect(),
    From ! {Ref, 0},
    stepper_loop([]).

%% No leak: a process that takes Bytes in ten steps over PeriodMs, then
%% drops them all and collects, again and again.
sawtooth(Bytes, PeriodMs) ->
    spawn(fun() -> sawtooth(Bytes div 10, PeriodMs div 10, []) end).

sawtooth(Step, Tick, dropped) ->
    erlang:garbage_collect(),
    sawtooth(Step, Tick, []);
sawtooth(Step, Tick, Binaries) ->
    receive
        stop -> ok
    after Tick ->
        case erlang:length(Binaries) of
            10 ->
                sawtooth(Step, Tick, dropped);
            _ ->
                sawtooth(Step, Tick, [binary:copy(<<1>>, Step) | Binaries])
        end
    end.

%% Before the first snapshot: a supervisor (bp_leak_sup) for the workers
%% to come, a named ETS table (bp_leak_table, its owner registered as
%% bp_table_owner) and a process that hoards refc binaries
%% (bp_bin_hoarder). All long-lived.
scene() ->
    {ok, Sup} = supervisor:start_link({local, bp_leak_sup}, ?MODULE, sup),
    erlang:unlink(Sup),
    Self = self(),
    Owner = spawn(fun() ->
                          ets:new(bp_leak_table, [named_table, public, set]),
                          Self ! table_ready,
                          idle()
                  end),
    receive table_ready -> ok end,
    register(bp_table_owner, Owner),
    register(bp_bin_hoarder, spawn(fun() -> hoard([]) end)),
    tick(0, 0),
    ok.

%% Between the first and second snapshots: Workers proc_lib processes
%% under bp_leak_sup, and Atoms new atoms named Prefix1, Prefix2, ...
plant(Workers, Atoms, Prefix) ->
    [{ok, _} = supervisor:start_child(bp_leak_sup, [])
     || _ <- lists:seq(1, Workers)],
    _ = [list_to_atom(Prefix ++ integer_to_list(I)) || I <- lists:seq(1, Atoms)],
    ok.

%% Every interval (tick): Rows more rows in bp_leak_table, Bytes more refc
%% binary bytes held by bp_bin_hoarder.
tick(Rows, Bytes) ->
    Base = ets:info(bp_leak_table, size),
    ets:insert(bp_leak_table, [{Base + I, <<"row">>}
                               || I <- lists:seq(1, Rows)]),
    Ref = make_ref(),
    bp_bin_hoarder ! {hoard, Bytes, self(), Ref},
    receive {hoarded, Ref} -> ok end.

%% Count short-lived processes, which stop_noise/1 ends.
noise(Count) ->
    [spawn(?MODULE, noise_loop, []) || _ <- lists:seq(1, Count)].

stop_noise(Pids) ->
    [exit(P, kill) || P <- Pids],
    ok.

noise_loop() ->
    receive stop -> ok end.

init(sup) ->
    {ok, {#{strategy => simple_one_for_one},
          [#{id => leak_worker,
             start => {?MODULE, start_leak_worker, []}}]}};
init({top, Kind}) ->
    {ok, {#{strategy => simple_one_for_one},
          [#{id => item, type => supervisor,
             start => {?MODULE, start_item_sup, [Kind]}}]}};
init({queue_sup, Name}) ->
    {ok, {#{strategy => one_for_one},
          [#{id => queue, start => {?MODULE, start_named_queue, [Name]}}]}};
init({queue, Name}) ->
    erlang:put(process_name, {bp_queue_process, Name}),
    {ok, Name};
init({item, Kind}) ->
    {ok, {#{strategy => one_for_one},
          [#{id => mfa, start => {?MODULE, start_tree_worker, [Kind]}},
           #{id => 'fun', start => {?MODULE, start_fun_worker, [Kind]}}]}}.

%% Two registered top supervisors, bp_items_sup and bp_conns_sup, as a
%% broker's queue and connection trees: grow_tree/2 puts unregistered
%% per-item supervisors under them, each with one worker started by
%% proc_lib from M:F/A (proc_lib:init_p/5) and one from a fun
%% (proc_lib:init_p/3). On OTP 27+ the connections' M:F/A workers label
%% themselves bp_conn_worker, as proc_lib:set_label/1 lets them.
tree() ->
    [begin
         {ok, Sup} = supervisor:start_link({local, Name}, ?MODULE,
                                           {top, Kind}),
         erlang:unlink(Sup)
     end
     || {Name, Kind} <- [{bp_items_sup, items}, {bp_conns_sup, conns}]],
    ok.

grow_tree(Items, Conns) ->
    [{ok, _} = supervisor:start_child(bp_items_sup, [])
     || _ <- lists:seq(1, Items)],
    [{ok, _} = supervisor:start_child(bp_conns_sup, [])
     || _ <- lists:seq(1, Conns)],
    ok.

start_item_sup(Kind) ->
    supervisor:start_link(?MODULE, {item, Kind}).

start_tree_worker(Kind) ->
    proc_lib:start_link(?MODULE, tree_worker, [self(), Kind]).

start_fun_worker(_Kind) ->
    {ok, proc_lib:spawn_link(fun() -> idle() end)}.

tree_worker(Parent, Kind) ->
    case Kind =:= conns andalso erlang:function_exported(proc_lib,
                                                         set_label, 1) of
        true -> proc_lib:set_label(bp_conn_worker);
        false -> ok
    end,
    proc_lib:init_ack(Parent, {ok, self()}),
    idle().

start_leak_worker() ->
    proc_lib:start_link(?MODULE, leak_worker, [self()]).

leak_worker(Parent) ->
    proc_lib:init_ack(Parent, {ok, self()}),
    idle().

hoard(Binaries) ->
    receive
        {hoard, 0, From, Ref} ->
            From ! {hoarded, Ref},
            hoard(Binaries);
        {hoard, Bytes, From, Ref} ->
            From ! {hoarded, Ref},
            hoard([binary:copy(<<7>>, Bytes) | Binaries])
    end.

leaker() ->
    receive
        {fill, Count, From, Ref} ->
            Self = self(),
            Feeder = spawn(fun() -> feed(Self, Count) end),
            drain(Count, Feeder),
            From ! {filled, Ref},
            leaker()
    end.

feed(To, Count) ->
    [To ! {bin, binary:copy(<<N:32>>, ?BINARY_SIZE div 4)}
     || N <- lists:seq(1, Count)],
    ok.

drain(0, _Feeder) ->
    ok;
drain(Count, Feeder) ->
    receive
        {bin, _Dropped} -> drain(Count - 1, Feeder)
    end.

keeper(J) ->
    Total = (J + 1) * 100000 + 1000 * J,
    Chunks = [binary:copy(<<J:8>>, 10000) || _ <- lists:seq(1, Total div 10000)],
    Rest = binary:copy(<<J:8>>, Total rem 10000),
    hold([Rest | Chunks]).

hold(Binaries) ->
    receive
        stop -> Binaries
    end.

idle() ->
    receive
        stop -> ok
    end.

%% Fragmentation on purpose: a process (registered as bp_fragmenter)
%% allocates Count binaries of 64 KB (refc, below the singleblock
%% threshold of 512 KB, so in binary_alloc's multiblock carriers), keeps
%% every Keep-th and drops the rest: the carriers stay, each held by a few
%% live blocks. Returns once the rest is freed.
fragment(Count, Keep) ->
    Self = self(),
    Pid = spawn(fun() ->
                        All = [binary:copy(<<I:8>>, 65536)
                               || I <- lists:seq(1, Count)],
                        Kept = [B || {I, B} <- lists:zip(lists:seq(1, Count),
                                                         All),
                                     I rem Keep =:= 0],
                        erlang:garbage_collect(),
                        Self ! {fragmented, self()},
                        hold(Kept)
                end),
    receive {fragmented, Pid} -> ok end,
    erlang:garbage_collect(Pid),
    register(bp_fragmenter, Pid),
    Pid.

%% A burst, partly freed (registered as bp_burst): Count binaries of Size
%% bytes made at once, one in Keep kept. The carriers the burst grew stay
%% many blocks full each: a peak passed, not a few blocks pinning them.
burst(Count, Size, Keep) ->
    Self = self(),
    Pid = spawn(fun() ->
                        All = [binary:copy(<<I:8>>, Size)
                               || I <- lists:seq(1, Count)],
                        Kept = [B || {I, B} <- lists:zip(lists:seq(1, Count),
                                                         All),
                                     I rem Keep =:= 0],
                        erlang:garbage_collect(),
                        Self ! {burst, self()},
                        hold(Kept)
                end),
    receive {burst, Pid} -> ok end,
    erlang:garbage_collect(Pid),
    register(bp_burst, Pid),
    Pid.

%% A plain holder (registered as bp_holder): Count binaries of 64 KB, all
%% live. Returns once it holds them.
hold_binaries(Count) ->
    Self = self(),
    Pid = spawn(fun() ->
                        All = [binary:copy(<<I:8>>, 65536)
                               || I <- lists:seq(1, Count)],
                        Self ! {holding, self()},
                        hold(All)
                end),
    receive {holding, Pid} -> ok end,
    register(bp_holder, Pid),
    Pid.

%% A named table Name, owned by a process registered as bp_big_owner,
%% with Rows rows of about 100 bytes each.
big_table(Name, Rows) ->
    Self = self(),
    Owner = spawn(fun() ->
                          ets:new(Name, [named_table, public, set]),
                          ets:insert(Name, [{I, binary:copy(<<"r">>, 64)}
                                            || I <- lists:seq(1, Rows)]),
                          Self ! {table, self()},
                          idle()
                  end),
    receive {table, Owner} -> ok end,
    register(bp_big_owner, Owner),
    Owner.

%% A process that collects often: it builds and drops a list of N
%% elements in a loop (a minor collection every few ms), registered as
%% bp_churn, until sent stop.
churn(N) ->
    Pid = spawn(fun() -> churn_loop(N) end),
    register(bp_churn, Pid),
    Pid.

churn_loop(N) ->
    receive
        stop -> ok
    after 0 ->
        _ = lists:seq(1, N),
        churn_loop(N)
    end.

%% A tracer of net_kernel's messages that keeps the nodes it is asked to
%% connect to: {auto_connect, Node, _} when a send or a monitor meets a
%% node that is not connected (OTP 25 and 28 alike), {connect, _, Node}
%% from net_kernel:connect_node/1.
watch_connects() ->
    Tracer = spawn(fun() -> connects_loop([]) end),
    erlang:trace(whereis(net_kernel), true, ['receive', {tracer, Tracer}]),
    Tracer.

%% The nodes asked for so far; stops the tracer.
connects(Tracer) ->
    erlang:trace(whereis(net_kernel), false, ['receive']),
    Tracer ! {stop, self()},
    receive
        {connects, Tracer, Nodes} -> Nodes
    after 5000 -> timeout
    end.

connects_loop(Nodes) ->
    receive
        {trace, _, 'receive', {auto_connect, Node, _}} ->
            connects_loop([Node | Nodes]);
        {trace, _, 'receive', {'$gen_call', _, {connect, _, Node}}} ->
            connects_loop([Node | Nodes]);
        {trace, _, 'receive', _} ->
            connects_loop(Nodes);
        {stop, From} ->
            From ! {connects, self(), lists:reverse(Nodes)}
    end.

sleeper() ->
    Pid = spawn(fun() -> erlang:hibernate(?MODULE, sleep_loop, []) end),
    register(bp_sleeper, Pid),
    Pid.

sleep_loop() ->
    receive
        stop -> ok
    after 0 -> erlang:hibernate(?MODULE, sleep_loop, [])
    end.

%% What a probe costs the node, for bench_node_cost.py: a process,
%% registered as bp_peak, that reads erlang:memory(total) every
%% millisecond until peak_stop/0 asks for the highest reading less the
%% first one (bytes).
peak_start() ->
    Pid = spawn(fun() ->
                        Base = erlang:memory(total),
                        peak_loop(Base, Base)
                end),
    register(bp_peak, Pid),
    ok.

peak_loop(Base, Max) ->
    receive
        {stop, From} -> From ! {peak, Max - Base}
    after 1 ->
        peak_loop(Base, erlang:max(Max, erlang:memory(total)))
    end.

peak_stop() ->
    whereis(bp_peak) ! {stop, self()},
    receive {peak, Bytes} -> Bytes end.

%% A process holding Refs references to each of Count binaries of Size
%% bytes, as a queue holds a payload it received in many messages: each
%% message received makes a reference of its own, and process_info(P,
%% binary) lists the binary once per reference. Returns its pid once it
%% holds them all; the binaries' maker is gone by then.
shared_refs(Count, Size, Refs) ->
    Self = self(),
    Holder = spawn(fun() ->
                           Self ! {ready, self()},
                           Held = [receive {take, B} -> B end
                                   || _ <- lists:seq(1, Count * Refs)],
                           Self ! {holding, self()},
                           hold(Held)
                   end),
    receive {ready, Holder} -> ok end,
    Maker = spawn(fun() ->
                          Binaries = [binary:copy(<<I:8>>, Size)
                                      || I <- lists:seq(1, Count)],
                          [Holder ! {take, B}
                           || B <- Binaries, _ <- lists:seq(1, Refs)],
                          Self ! {made, self()}
                  end),
    receive {made, Maker} -> ok end,
    receive {holding, Holder} -> ok end,
    Holder.

%% A gen_server started by proc_lib under an unregistered supervisor,
%% naming itself {bp_queue_process, Name} in its dictionary (RabbitMQ's
%% queues: {rabbit_amqqueue_process, <<"lq.104">>}). Returns its pid.
named_queue(Name) ->
    {ok, Sup} = supervisor:start_link(?MODULE, {queue_sup, Name}),
    erlang:unlink(Sup),
    [{queue, Pid, worker, _}] = supervisor:which_children(Sup),
    Pid.

start_named_queue(Name) ->
    gen_server:start_link(?MODULE, {queue, Name}, []).

handle_call(_Request, _From, State) ->
    {reply, ok, State}.

handle_cast(_Request, State) ->
    {noreply, State}.
