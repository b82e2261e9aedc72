%% Processes shaped like a broker's, for the names every command shows
%% (issue 38, item 1): a gen_server started by proc_lib, unregistered,
%% named only in its dictionary as RabbitMQ names
%% its queues ({bpt_queue, <<"lq.104">>} under process_name), with a heap
%% of ~24 MB as a busy queue has; and one whose dictionary holds ~100 MB,
%% whose heap is past what reading a dictionary may cost on OTP 25.
%% A {grow, Most} message makes a queue grow (proc-window); a {garbage,
%% Count} call leaves a queue references to binaries it dropped (bin-leak).
-module(beam_probe_names_fixture).
-behaviour(gen_server).

-export([queue/2, queues/2, owner/1, init/1, handle_call/3, handle_cast/2,
         handle_info/2]).

%% A queue named {bpt_queue, Name}, whose heap holds about Words words in
%% its state (Ballast words more in its dictionary, under another key).
%% Returns its pid and its total_heap_size in bytes once settled. A name
%% {seq, N} is a list of N small integers made there (a value too large
%% to send: a process_name the size of its heap).
-spec queue(binary() | {seq, pos_integer()},
            {non_neg_integer(), non_neg_integer()}) ->
          {pid(), non_neg_integer()}.
queue(Name, {Words, Ballast}) ->
    %% gen_server:start/3 starts it by proc_lib, unlinked: its
    %% initial_call is proc_lib:init_p/5.
    {ok, Pid} = gen_server:start(?MODULE, {Name, Words, Ballast}, []),
    ok = gen_server:call(Pid, settle, 60000),
    {total_heap_size, Heap} = erlang:process_info(Pid, total_heap_size),
    {Pid, Heap * erlang:system_info(wordsize)}.

init({Name, Words, Ballast}) ->
    erlang:put(process_name, {bpt_queue, name(Name)}),
    %% A list of small integers: two words an element, all on the heap.
    erlang:put(ballast, lists:seq(1, Ballast div 2)),
    {ok, lists:seq(1, Words div 2)}.

%% Count queues as a large broker has, each named {bpt_queue, Name} with
%% a Name of NameBytes characters (a list: a RabbitMQ queue's dictionary
%% is ~780 bytes in the external format) and a heap of ~32 KB, started
%% together without waiting for them to settle.
-spec queues(pos_integer(), pos_integer()) -> ok.
queues(Count, NameBytes) ->
    Pad = lists:duplicate(NameBytes, $q),
    lists:foreach(
      fun(I) ->
              {ok, _} = gen_server:start(
                          ?MODULE,
                          {erlang:integer_to_list(I) ++ Pad, 4000, 0}, [])
      end,
      lists:seq(1, Count)).

%% A process whose '$initial_call' is {bpt_owner, [1..Count], 1} (not
%% proc_lib's: anyone may put the key) and which owns a table of 10,000
%% rows, the node's largest. Returns its pid.
-spec owner(pos_integer()) -> pid().
owner(Count) ->
    Parent = erlang:self(),
    Pid = erlang:spawn(
            fun() ->
                    erlang:put('$initial_call',
                               {bpt_owner, lists:seq(1, Count), 1}),
                    Table = ets:new(bpt_owned, []),
                    ets:insert(Table, [{I, <<0:800>>}
                                       || I <- lists:seq(1, 10000)]),
                    Parent ! {erlang:self(), ready},
                    receive stop -> ok end
            end),
    receive {Pid, ready} -> Pid end.

name({seq, N}) ->
    lists:seq(1, N);
name(Name) ->
    Name.

handle_call(settle, _From, State) ->
    %% Collected so that the heap is what it holds (plus the room a
    %% collection leaves), not the garbage of building it.
    erlang:garbage_collect(),
    {reply, ok, State};
handle_call({garbage, Count}, _From, State) ->
    %% Count refc binaries made and dropped: their references stay on the
    %% heap until the next collection (bin-leak's find), which a heap
    %% this large does not need for a while.
    _ = [binary:copy(<<I:8000>>) || I <- lists:seq(1, Count)],
    {reply, ok, State}.

handle_cast(_, State) ->
    {noreply, State}.

%% grow: a queue that takes on work, 1,000 elements every 20 ms until it
%% holds Most (proc-window's increase), then stays.
handle_info({grow, Most}, State) when length(State) < Most ->
    erlang:send_after(20, self(), {grow, Most}),
    {noreply, lists:seq(1, 1000) ++ State};
handle_info(_, State) ->
    {noreply, State}.
