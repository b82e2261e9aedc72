%% What `beam-probe snapshot` and `leak-hunt` ask the node for: the whole
%% node in one call, for the three-snapshot method.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl; pmap/3, others/0, settled/1, watch's sample/8
%% and alloc's rss/0 arrive as funs. The process pass runs in pmap's slices, each
%% with compiled calls only (process_info over the slice, match
%% specifications to pick the group and the columns); the rows travel as
%% term_to_binary(..., [{compressed, 1}]) chunks, about 0.3 MB per 100k
%% processes instead of 20-30 MB.
-module(beam_probe_snapshot).

-export([snapshot/9]).

%% One chunk of processes, compressed: a map of columns, one element per
%% process, each column a binary of fixed-width records so that a reader
%% takes it whole (beam-probe decoded a million rows of term lists in 1.4 s,
%% and these in a few ms):
%%   pids         term_to_binary(Pid) of each process, one after another
%%                (all of one node, so all of one width)
%%   memory, message_queue_len, total_heap_size, binary_count,
%%   binary_bytes   integers, eight bytes each (below)
%%   names        {Unique, Indices}: the registered names, [] for none
%%   groups, current_function, initial_call   {Unique, Indices}
%% {Unique, Indices}: each distinct value once, and per process its index
%% in Unique, eight bytes each. An integer is written as
%% binary:encode_unsigned(N + 2^56), big-endian: the shortest form of a
%% number at least 2^56 is eight bytes, so every value below 2^64 - 2^56
%% (far above any memory size) has one width, led by a byte the reader
%% subtracts. A group is the process's "constructor":
%%   {label, Term}        the process label (OTP 28, proc_lib:set_label)
%%   {initial_call, MFA}  proc_lib's '$initial_call' (OTP 26.2+, read as
%%                        that one key, never the whole dictionary), or
%%                        the initial call itself unless it is proc_lib's
%%   {name, Atom}         the registered name
%%   {parent, Pid}        a proc_lib process without either: beam-probe
%%                        names it after its parent (OTP 25+)
-type chunk() :: binary().
-type snapshot() :: #{sample := map(),
                      items := [atom()],
                      processes := [chunk()],
                      tables := binary(),
                      ports := binary(),
                      atom_count := non_neg_integer(),
                      creation := non_neg_integer(),
                      otp_release := string(),
                      elixir := boolean(),
                      atoms := [atom()],
                      atoms_from := non_neg_integer()}.

%% Chunk rows a chunk; the names of at most MaxAtoms of the newest atoms
%% (by index, an undocumented encoding, guarded).
-spec snapshot(pos_integer(), non_neg_integer(), non_neg_integer(), fun(),
               fun(), fun(), fun(), fun(), fun()) -> snapshot().
snapshot(Chunk, MaxAtoms, Jobs, Pmap, Others, Top, Settled, Sample, Rss) ->
    %% rex carries every call of ours (and of anyone using rpc): its heap
    %% grows with our own traffic, which would show as a process growing
    %% in both intervals (measured on OTP 28). It is collected first.
    case erlang:whereis(rex) of
        undefined -> ok;
        Rex -> erlang:garbage_collect(Rex)
    end,
    Header = Sample(none, 0, Jobs, Pmap, Others, Top, Settled, Rss),
    Supported = fun(Item) ->
                        try erlang:process_info(erlang:self(), Item) of
                            _ -> true
                        catch
                            error:badarg -> false
                        end
                end,
    Label = Supported(label),
    Dictionary = Supported({dictionary, '$initial_call'}),
    %% Each item in a fixed place; one the node lacks is asked as
    %% registered_name again, and its place is not looked at.
    Items = [registered_name, initial_call, parent,
             case Label of true -> label; false -> registered_name end,
             case Dictionary of
                 true -> {dictionary, '$initial_call'};
                 false -> registered_name
             end,
             memory, message_queue_len, total_heap_size, current_function,
             binary],
    Pattern = {'$10', [{registered_name, '$1'}, {initial_call, '$2'},
                       {parent, '$3'}, {'_', '$4'}, {'_', '$5'},
                       {memory, '$6'}, {message_queue_len, '$7'},
                       {total_heap_size, '$8'}, {current_function, '$9'},
                       {binary, '$11'}]},
    Row = fun(Group) ->
                  [{{{{'$10', Group, '$1', '$6', '$7', '$8', '$9', '$2'}},
                     '$11'}}]
          end,
    %% The first clause that matches gives the group, in this order. A
    %% process that died meanwhile has 'undefined' for its info list and
    %% matches none.
    Clauses =
        [{Pattern, [{'=/=', '$4', undefined}], Row({{label, '$4'}})}
         || Label]
        ++ [{Pattern, [{'=/=', '$5', undefined}],
             Row({{initial_call, '$5'}})}
            || Dictionary]
        ++ [{Pattern, [{'=/=', '$1', []}], Row({{name, '$1'}})},
            {Pattern, [{'=/=', '$2', {const, {proc_lib, init_p, 5}}}],
             Row({{initial_call, '$2'}})},
            {Pattern, [{is_pid, '$3'}], Row({{parent, '$3'}})},
            {Pattern, [], Row({{initial_call, '$2'}})}],
    Compiled = ets:match_spec_compile(Clauses),
    %% A chunk as columns, the repeated terms (groups, functions) each
    %% once, with an index per row: decoding a million rows of tuples
    %% took beam-probe 14 s, and most of it was the same few hundred
    %% MFAs again and again. All compiled calls.
    Column = fun(K, Rows) ->
                     lists:zipwith(fun erlang:element/2,
                                   lists:duplicate(erlang:length(Rows), K),
                                   Rows)
             end,
    %% 58 ns a number, compiled calls only (measured, 5,000 numbers).
    Pack = fun(Numbers) ->
                   Offset = lists:duplicate(erlang:length(Numbers), 1 bsl 56),
                   erlang:list_to_binary(
                     lists:map(fun binary:encode_unsigned/1,
                               lists:zipwith(fun erlang:'+'/2, Numbers,
                                             Offset)))
           end,
    Intern = fun(Values) ->
                     Unique = lists:usort(Values),
                     Index = maps:from_list(
                               lists:zip(Unique,
                                         lists:seq(0, erlang:length(Unique)
                                                      - 1))),
                     {Unique,
                      Pack(lists:zipwith(fun maps:get/2, Values,
                                         lists:duplicate(
                                           erlang:length(Values), Index)))}
             end,
    Encode = fun(Rows, Counts, Bytes) ->
                     #{pids => erlang:list_to_binary(
                                 lists:map(fun erlang:term_to_binary/1,
                                           Column(1, Rows))),
                       groups => Intern(Column(2, Rows)),
                       names => Intern(Column(3, Rows)),
                       memory => Pack(Column(4, Rows)),
                       message_queue_len => Pack(Column(5, Rows)),
                       total_heap_size => Pack(Column(6, Rows)),
                       current_function => Intern(Column(7, Rows)),
                       initial_call => Intern(Column(8, Rows)),
                       binary_count => Pack(Counts),
                       binary_bytes => Pack(Bytes)}
             end,
    %% A slice is read Chunk processes at a time, each batch encoded and
    %% compressed before the next is read, so a worker never holds more
    %% than one batch of process_info lists. Read whole, a slice of 250k
    %% processes is ~120 MB of live lists whose garbage collections cost
    %% more than the pass (measured at 1M: 6.6 s with 4 slices, 22.7 s
    %% with one). lists:split/2 raises badarg when fewer remain; no length
    %% is taken of the rest at each step.
    Batch =
        fun Batch([], Acc) ->
                lists:reverse(Acc);
            Batch(Pids, Acc) ->
                {Now, Rest} = try
                                  lists:split(Chunk, Pids)
                              catch
                                  error:badarg -> {Pids, []}
                              end,
                Infos = lists:zipwith(fun erlang:process_info/2, Now,
                                      lists:duplicate(erlang:length(Now),
                                                      Items)),
                {Rows, Binaries} =
                    lists:unzip(ets:match_spec_run(lists:zip(Now, Infos),
                                                   Compiled)),
                %% Each binary is {Id, Size, RefCount}.
                Unzipped = lists:map(fun lists:unzip3/1, Binaries),
                Sizes = lists:zipwith(fun erlang:element/2,
                                      lists:duplicate(erlang:length(Unzipped),
                                                      2),
                                      Unzipped),
                Encoded = Encode(Rows, lists:map(fun erlang:length/1,
                                                 Binaries),
                                 lists:map(fun lists:sum/1, Sizes)),
                Batch(Rest, [erlang:term_to_binary(Encoded, [{compressed, 1}])
                             | Acc])
        end,
    Take = fun(Pids) -> Batch(Pids, []) end,
    Processes = lists:append(Pmap(Take, Others(), Jobs)),
    Tables = lists:map(fun(T) ->
                               {T, ets:info(T, name), ets:info(T, owner),
                                ets:info(T, size), ets:info(T, memory),
                                ets:info(T, type)}
                       end,
                       ets:all()),
    Ports = lists:map(fun(P) ->
                              {P, erlang:port_info(P, name),
                               erlang:port_info(P, connected),
                               erlang:port_info(P, memory)}
                      end,
                      erlang:ports()),
    AtomCount = erlang:system_info(atom_count),
    From = erlang:max(0, AtomCount - MaxAtoms),
    %% Atom indices are dense below the count; an index the node refuses
    %% (the encoding is undocumented) gives no names at all rather than
    %% wrong ones. One compiled lists:map: an interpreted loop with a try
    %% per atom cost ~0.2 ms each (measured, 2,000 atoms).
    Atoms = try
                lists:map(fun erlang:binary_to_term/1,
                          [<<131, 75, Index:24>>
                           || Index <- lists:seq(From, AtomCount - 1)])
            catch
                _:_ -> []
            end,
    #{sample => Header,
      items => [Item || Item <- [label], Label]
               ++ [dictionary_initial_call || Dictionary],
      processes => Processes,
      tables => erlang:term_to_binary(Tables, [{compressed, 1}]),
      ports => erlang:term_to_binary(Ports, [{compressed, 1}]),
      atom_count => AtomCount,
      creation => erlang:system_info(creation),
      otp_release => erlang:system_info(otp_release),
      %% Whether the node runs Elixir: diff, offline, shows its names in
      %% the node's syntax.
      elixir => lists:keymember(elixir, 1,
                                application:loaded_applications()),
      atoms => [Atom || Atom <- Atoms, erlang:is_atom(Atom)],
      atoms_from => From}.
