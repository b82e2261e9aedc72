%% Processes whose snapshot groups come from proc_lib's '$initial_call'
%% (issue 38, item 1: leak-hunt's and diff's groups, test_snapshot.py).
%%
%% grow/1 puts, under the registered top supervisor bp_groups_sup, one
%% unregistered per-item supervisor per item, each with:
%%   * a gen_server (proc_lib:init_p/5; '$initial_call' {?MODULE, init, 1}),
%%   * a worker spawned by proc_lib from a fun (proc_lib:init_p/3),
%%   * a proc_lib worker that overwrote its '$initial_call' with a term
%%     proc_lib never writes ({<<"x">>, 1, a}): it keeps init_p/5's group
%%     on every release,
%% and, with Big, one gen_server whose heap is past the 64 MiB under
%% which OTP 25's snapshot copies a dictionary.
-module(beam_probe_groups_fixture).
-behaviour(gen_server).

-export([top/0, grow/2, heap/1]).
-export([init/1, handle_call/3, handle_cast/2, start_item_sup/0,
         start_fun_worker/0, start_liar/0, liar/1, start_big/0]).

%% A heap past 64 MiB once collected: 9.5M words of list on a 64-bit
%% node (76 MB), and what a collection leaves beside it.
-define(BIG_ELEMENTS, 4750000).

-spec top() -> ok.
top() ->
    {ok, Sup} = supervisor:start_link({local, bp_groups_sup}, ?MODULE, top),
    erlang:unlink(Sup),
    ok.

%% Items per-item supervisors, and the big gen_server when Big; the big
%% one's pid.
-spec grow(non_neg_integer(), boolean()) -> pid() | none.
grow(Items, Big) ->
    [{ok, _} = supervisor:start_child(bp_groups_sup, [])
     || _ <- lists:seq(1, Items)],
    case Big of
        true ->
            {ok, Pid} = supervisor:start_child(bp_groups_sup, []),
            {ok, BigPid} = supervisor:start_child(
                             Pid, #{id => big, start => {?MODULE, start_big,
                                                         []}}),
            BigPid;
        false ->
            none
    end.

%% A process's total_heap_size, in bytes.
-spec heap(pid()) -> non_neg_integer().
heap(Pid) ->
    {total_heap_size, Words} = erlang:process_info(Pid, total_heap_size),
    Words * erlang:system_info(wordsize).

init(top) ->
    {ok, {#{strategy => simple_one_for_one},
          [#{id => item, type => supervisor,
             start => {?MODULE, start_item_sup, []}}]}};
init(item) ->
    {ok, {#{strategy => one_for_one},
          [#{id => server, start => {gen_server, start_link,
                                     [?MODULE, server, []]}},
           #{id => 'fun', start => {?MODULE, start_fun_worker, []}},
           #{id => liar, start => {?MODULE, start_liar, []}}]}};
init(server) ->
    {ok, server};
init(big) ->
    State = lists:seq(1, ?BIG_ELEMENTS),
    erlang:garbage_collect(),
    {ok, State}.

start_item_sup() ->
    supervisor:start_link(?MODULE, item).

start_fun_worker() ->
    {ok, proc_lib:spawn_link(fun() -> receive stop -> ok end end)}.

start_liar() ->
    proc_lib:start_link(?MODULE, liar, [self()]).

liar(Parent) ->
    erlang:put('$initial_call', {<<"x">>, 1, a}),
    proc_lib:init_ack(Parent, {ok, self()}),
    receive stop -> ok end.

start_big() ->
    gen_server:start_link(?MODULE, big, []).

handle_call(_Request, _From, State) ->
    {reply, ok, State}.

handle_cast(_Request, State) ->
    {noreply, State}.
