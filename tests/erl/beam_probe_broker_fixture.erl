%% Test-only: processes and tables shaped as a message broker's are
%% (issue 38), on any release the tests run (OTP 25, 27, 28), and the
%% load that gives a real RabbitMQ queues with a backlog.
%%
%% start/0 makes, under a registered keeper (bpt_broker_keeper) that owns
%% them and answers info/0:
%%   queue   a proc_lib gen_server (this module), started by an
%%           UNREGISTERED supervisor, named ONLY in its dictionary as
%%           RabbitMQ names its queues: put(process_name, {bpt_queue,
%%           <<"lq.104">>}); '$initial_call' is {?MODULE, init, 1}. Its
%%           state holds a list of ~24 MB (a heap of 24 MB or more after
%%           its collections) and 1,000 refc binaries of 4 KiB.
%%   holder  a plain receive loop (no sys messages), registered as
%%           bpt_refc_holder, holding 5,000 refc binaries of 4,096 bytes
%%           (20,480,000 bytes), the first 1,000 of them also held by
%%           sharer (an unregistered plain loop), and 200 waiting
%%           messages it never takes ({bpt_delivery, I, <<"lq.104">>}).
%%   tables  bpt_queue_metrics (named_table, set): {#resource{}, Stats},
%%           keyed by the record, 200 rows; bpt_queue_stat_pairs
%%           (named_table, set): {{#resource{}, Stat}, Count}, keyed by a
%%           pair of the record and an atom, 600 rows; and an UNNAMED
%%           table that ets:all/0 lists as bpt_unnamed_metrics, with the
%%           rows of bpt_queue_metrics; bpt_struct_keyed (named_table,
%%           set), 200 rows keyed by an Elixir struct,
%%           %Broker.Queue{vhost: "/", name: "q1"} (a map with
%%           '__struct__' => 'Elixir.Broker.Queue'; no Elixir needed).
%% Nothing here is loaded on a node beam-probe is tested as a user's
%% would be, only on nodes the tests start (and on the tests' RabbitMQ,
%% for backlog/3).
-module(beam_probe_broker_fixture).
-compile(debug_info).

-behaviour(gen_server).

-export([start/0, info/0, stop/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).
-export([keeper/1, holder/1, sharer/0, plain_loop/1]).
%% For tests/rabbit.py, run on the tests' RabbitMQ node.
-export([backlog/3, queues/0]).

%% RabbitMQ's resource record (rabbit_common's rabbit.hrl), field for
%% field: what its tables are keyed by.
-record(resource, {virtual_host :: binary(),
                   kind :: atom(),
                   name :: binary()}).

-define(KEEPER, bpt_broker_keeper).
-define(QUEUE_NAME, <<"lq.104">>).
%% 1,500,000 list cells of two words: 24,000,000 bytes of live heap.
-define(HEAP_CELLS, 1500000).
-define(HOLDER_BINARIES, 5000).
-define(SHARED_BINARIES, 1000).
-define(BINARY_BYTES, 4096).
-define(WAITING_MESSAGES, 200).
-define(RESOURCES, 200).

%% Start every shape (once: a second call answers as the first did).
-spec start() -> ok.
start() ->
    case whereis(?KEEPER) of
        undefined ->
            Caller = self(),
            Keeper = spawn(?MODULE, keeper, [Caller]),
            receive
                {Keeper, ready} -> ok
            after 120000 ->
                exit(Keeper, kill),
                error(fixture_start_timeout)
            end;
        _ ->
            ok
    end.

%% What was made: #{queue, supervisor, holder, sharer => pid(),
%% unnamed_table => ets:tid(), ...}.
-spec info() -> map().
info() ->
    Ref = make_ref(),
    ?KEEPER ! {info, self(), Ref},
    receive
        {Ref, Info} -> Info
    after 30000 ->
        error(fixture_not_running)
    end.

-spec stop() -> ok.
stop() ->
    case whereis(?KEEPER) of
        undefined -> ok;
        Keeper -> exit(Keeper, kill), ok
    end.

%% --- the keeper: owns the tables, links nothing it could be killed by.

-spec keeper(pid()) -> no_return().
keeper(Caller) ->
    true = register(?KEEPER, self()),
    process_flag(trap_exit, true),
    {ok, Sup} = supervisor:start_link(?MODULE, supervisor),
    [{queue, Queue, worker, _}] = supervisor:which_children(Sup),
    %% The holder makes its binaries itself, so the keeper's heap never
    %% references them (a third reference, until its next collection).
    Holder = spawn_link(?MODULE, holder, [self()]),
    Sharer = receive {Holder, sharer, S} -> S end,
    true = register(bpt_refc_holder, Holder),
    [Holder ! {bpt_delivery, I, ?QUEUE_NAME}
     || I <- lists:seq(1, ?WAITING_MESSAGES)],
    Unnamed = make_tables(),
    Info = #{queue => Queue, supervisor => Sup, holder => Holder,
             sharer => Sharer, unnamed_table => Unnamed,
             queue_name => ?QUEUE_NAME,
             holder_binaries => ?HOLDER_BINARIES,
             shared_binaries => ?SHARED_BINARIES,
             binary_bytes => ?BINARY_BYTES,
             waiting_messages => ?WAITING_MESSAGES,
             resources => ?RESOURCES},
    Caller ! {self(), ready},
    keeper_loop(Info).

keeper_loop(Info) ->
    receive
        {info, From, Ref} ->
            From ! {Ref, Info},
            keeper_loop(Info);
        {'EXIT', _, _} ->
            keeper_loop(Info)
    end.

%% A binary of exactly 4,096 bytes, off the heap (refc: over 64 bytes),
%% made in one construction so no release keeps room to grow it.
refc_binary(I) ->
    <<I:32, 0:(8 * (?BINARY_BYTES - 4))>>.

make_tables() ->
    Named = ets:new(bpt_queue_metrics, [set, named_table, public]),
    Pairs = ets:new(bpt_queue_stat_pairs, [set, named_table, public]),
    Unnamed = ets:new(bpt_unnamed_metrics, [set, public]),
    Rows = [{queue_resource(I), [{messages, I}, {consumers, 0},
                                 {memory, I * 1000}]}
            || I <- lists:seq(1, ?RESOURCES)],
    true = ets:insert(Named, Rows),
    true = ets:insert(Unnamed, Rows),
    true = ets:insert(Pairs, [{{Resource, Stat}, 0}
                              || {Resource, _} <- Rows,
                                 Stat <- [messages, publish, deliver]]),
    %% An Elixir struct is a map with '__struct__': keys as an Elixir
    %% broker's are, made without Elixir on the node.
    Structs = ets:new(bpt_struct_keyed, [set, named_table, public]),
    true = ets:insert(Structs, [{#{'__struct__' => 'Elixir.Broker.Queue',
                                   vhost => <<"/">>, name => Name},
                                 Stats}
                                || {#resource{name = Name}, Stats} <- Rows]),
    Unnamed.

queue_resource(I) ->
    #resource{virtual_host = <<"/">>, kind = queue,
              name = iolist_to_binary(["q", integer_to_list(I)])}.

%% --- a plain receive loop: no sys messages, holds what it was given.

-spec holder(pid()) -> no_return().
holder(Keeper) ->
    Binaries = [refc_binary(I) || I <- lists:seq(1, ?HOLDER_BINARIES)],
    Sharer = spawn_link(?MODULE, sharer, []),
    Sharer ! {hold, lists:sublist(Binaries, ?SHARED_BINARIES)},
    Keeper ! {self(), sharer, Sharer},
    plain_loop(Binaries).

-spec sharer() -> no_return().
sharer() ->
    receive
        {hold, Shared} -> plain_loop(Shared)
    end.

-spec plain_loop(list()) -> no_return().
plain_loop(Held) ->
    receive
        {bpt_ping, From} ->
            From ! {bpt_pong, self(), length(Held)},
            plain_loop(Held)
    end.

%% --- the supervisor and the queue (one module, told apart by init/1's
%% argument).

init(supervisor) ->
    {ok, {#{strategy => one_for_one, intensity => 0, period => 1},
          [#{id => queue,
             start => {gen_server, start_link, [?MODULE, queue, []]}}]}};
init(queue) ->
    put(process_name, {bpt_queue, ?QUEUE_NAME}),
    Backlog = [refc_binary(I) || I <- lists:seq(1, 1000)],
    Cells = lists:seq(1, ?HEAP_CELLS),
    {ok, #{name => ?QUEUE_NAME, cells => Cells, backlog => Backlog}}.

handle_call(ping, _From, State) ->
    {reply, pong, State}.

handle_cast(_Request, State) ->
    {noreply, State}.

handle_info(_Message, State) ->
    {noreply, State}.

%% --- RabbitMQ: run on the tests' broker (3.10.8) to give it backlogs.

%% Declare Queues classic queues bpt.backlog.1..N on vhost "/" and
%% publish Messages transient messages to each through the default
%% exchange, bodies of 1,024-4,096 bytes (refc binaries, kept in the
%% queue process's memory: transient and under the memory watermark);
%% and bpt.idle.1..2, empty. Returns the queues' names.
-spec backlog(pos_integer(), pos_integer(), pos_integer()) -> [binary()].
backlog(Queues, Messages, Seed) ->
    rand:seed(exsss, {Seed, Seed, Seed}),
    Names = [<<"bpt.backlog.", (integer_to_binary(I))/binary>>
             || I <- lists:seq(1, Queues)],
    Idle = [<<"bpt.idle.", (integer_to_binary(I))/binary>>
            || I <- lists:seq(1, 2)],
    [declare(Name) || Name <- Names ++ Idle],
    Exchange = rabbit_misc:r(<<"/">>, exchange, <<>>),
    [publish(Exchange, Name, I)
     || Name <- Names, I <- lists:seq(1, Messages)],
    Names.

declare(Name) ->
    Resource = rabbit_misc:r(<<"/">>, queue, Name),
    {_, _} = rabbit_amqqueue:declare(Resource, false, false, [], none,
                                     <<"beam-probe-tests">>),
    ok.

publish(Exchange, Name, I) ->
    Size = 1024 + rand:uniform(3072),
    Body = <<I:32, 0:(8 * (Size - 4))>>,
    _ = rabbit_basic:publish(Exchange, Name, [], Body),
    ok.

%% The broker's queues on vhost "/": {Name, Pid, Messages} each, Messages
%% as the queue counts them (ready and unacknowledged).
-spec queues() -> [{binary(), pid(), non_neg_integer()}].
queues() ->
    [{Name, amqqueue:get_pid(Q), messages(Q)}
     || Q <- rabbit_amqqueue:list(<<"/">>),
        #resource{name = Name} <- [amqqueue:get_name(Q)]].

messages(Q) ->
    case rabbit_amqqueue:info(Q, [messages]) of
        [{messages, N}] -> N;
        _ -> 0
    end.
