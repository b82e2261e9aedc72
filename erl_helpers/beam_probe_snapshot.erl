%% What `beam-probe snapshot` and `leak-hunt` ask the node for: the whole
%% node in one call, for the three-snapshot method.
%%
%% Sent as text and run by the node's erl_eval under the rules at the top
%% of beam_probe_scan.erl; pmap/3, others/0, settled/1, watch's sample/8
%% and alloc's rss/0 arrive as funs. The process pass runs in pmap's slices, each
%% with compiled calls only (process_info over the slice, match
%% specifications to pick the group and the columns); the rows travel as
%% term_to_binary(..., [{compressed, 1}]) chunks, about 0.5 MB per 100k
%% processes (in chunks of 256 rows) instead of 20-30 MB.
-module(beam_probe_snapshot).

-export([snapshot/12, parts/1]).

%% One chunk of processes, compressed: a map of columns, one element per
%% process, each column a binary of fixed-width records so that a reader
%% takes it whole (beam-probe decoded a million rows of term lists in 1.4 s,
%% and these in a few ms):
%%   pids         term_to_binary(Pid) of each process, one after another
%%                (all of one node, so all of one width)
%%   memory, message_queue_len, binary_count (references),
%%   binary_bytes (each binary once)   integers, eight bytes each (below)
%%   names        {Unique, Indices}: the registered names, [] for none
%%   groups, initial_call   {Unique, Indices}
%% (Format 3 keeps what diff reads: total_heap_size and current_function,
%% in formats 1 and 2, cost 0.1 s a million processes and were never read.)
%% {Unique, Indices}: each distinct value once, and per process its index
%% in Unique, eight bytes each. An integer is written as
%% binary:encode_unsigned(N + 2^56), big-endian: the shortest form of a
%% number at least 2^56 is eight bytes, so every value below 2^64 - 2^56
%% (far above any memory size) has one width, led by a byte the reader
%% subtracts. A group is the process's "constructor", the first of:
%%   {label, Term}        the process label (OTP 27+, proc_lib:set_label)
%%   {name, Atom}         the registered name
%%   {parent, Id, Pid}    a process started by proc_lib (init_p/3 from a
%%                        fun, init_p/5 from M:F/A) or spawned from a fun
%%                        (erlang:apply/2), whose code says little: Id is
%%                        proc_lib's '$initial_call' (see "Names from the
%%                        dictionary" below), else the initial call; Pid
%%                        its parent, from which beam-probe walks up to
%%                        the nearest named ancestor (see ancestors below)
%%   {initial_call, MFA}  the initial call
%%
%% Names from the dictionary: a proc_lib process (every gen_server, every
%% RabbitMQ queue, channel, reader and writer) is known by the
%% '$initial_call' proc_lib put in its dictionary ({rabbit_prequeue,
%% init, 1}), on every release, so that a fixture groups the same on OTP
%% 25, 27 and 28 (and as a crash dump of the node does, crashdump/
%% snapshot.py). Only {Atom, Atom, Arity} counts (anyone may put() the
%% key), and only for proc_lib's init_p/3 and init_p/5.
%%   OTP 26.2+: process_info(P, {dictionary, '$initial_call'}), one key,
%%     in the pass itself, for every process.
%%   Before (badarg): only the whole dictionary can be had, and
%%     process_info(P, dictionary) copies it whole and flat. So it is read
%%     only for the unregistered proc_lib processes of the batch whose
%%     total_heap_size (asked in the pass, in place of the single key) is
%%     at most DictionaryHeapCap bytes: without shared subterms the
%%     dictionary lives on the heap, so the heap bounds the copy. One
%%     process at a time, by proc_lib:translate_initial_call/1 (stock,
%%     compiled: it copies the dictionary, keeps the key with
%%     lists:keyfind/3, and the copy is garbage at once; a process gone,
%%     or a key missing or not a triple, gives {proc_lib, init_p, 5},
%%     taken as unread). A process over the cap keeps init_p's group and
%%     is counted (dictionaries_unread). A dictionary whose terms share
%%     subterms can still copy larger than its heap (a 2.7 KB process
%%     gave 6 MB, measured by the lead): a known limit, as for the rows
%%     beam_probe_lib:describe/1 names.
%%
%% ancestors: the parents of those processes, their parents and so on up
%% to MaxDepth levels, each process once, as [{Pid, Class}]:
%%   {label, Term} | {name, Atom}   a named ancestor: the walk ends here
%%   {up, Parent, Id}     an unnamed proc_lib or fun-spawned process: the
%%                        walk goes on to Parent (Id as above)
%%   {call, MFA}          any other process: the walk ends at its code
%% A process that died meanwhile, or past MaxDepth or MaxAncestors, is
%% absent. Walked level by level with compiled calls (process_info over
%% the level, a match specification to classify): one process_info per
%% distinct ancestor, not one per process.
-type chunk() :: binary().
-type snapshot() :: #{sample := map(),
                      items := [atom()],
                      processes := [chunk()],
                      process_count := non_neg_integer(),
                      ancestors := binary(),
                      tables := binary(),
                      ports := binary(),
                      atom_count := non_neg_integer(),
                      creation := non_neg_integer(),
                      otp_release := string(),
                      elixir := boolean(),
                      atoms := [atom()],
                      atoms_from := non_neg_integer(),
                      dictionary_heap_cap := pos_integer(),
                      dictionaries_read := non_neg_integer(),
                      dictionaries_unread := non_neg_integer()}.

%% Chunk is {Rows, Stream}: Rows rows a chunk; Stream none, or {Sink, Tag,
%% WaitMs}: the chunks streamed to Sink as Remote.stream reads them, {Tag,
%% Sender, [chunk()]} a slice, each waiting for {Tag, more}, and
%% processes => [] in the reply. The names of at most MaxAtoms of the
%% newest atoms (by index, an undocumented encoding, guarded); ancestors
%% MaxDepth levels up, at most MaxAncestors of them.
-spec snapshot({pos_integer(), none | {pid(), reference(), timeout()}},
               non_neg_integer(), pos_integer(),
               pos_integer(), non_neg_integer(), fun(), fun(), fun(),
               fun(), fun(), fun(), fun()) -> snapshot().
snapshot(Chunk, MaxAtoms, MaxDepth, MaxAncestors, Jobs, Pmap, Others, Top,
         Settled, Sample, Rss, Parts) ->
    %% (Others/0 collects rex first: our traffic would show as rex
    %% growing in both intervals, measured on OTP 28.)
    Header = Sample(none, 0, Jobs, Pmap, Others, Top, Settled, Rss),
    #{take := Take, fold := Fold, label := Label, dictionary := Dictionary,
      items := Items, head := Head, candidate := Candidate, kinds := Kinds,
      triple := Triple, pick := Pick,
      dictionary_heap_cap := DictionaryHeapCap} = Parts(Chunk),
    {Batches, _} = Pmap(Take, Fold, [], Others(), Jobs),
    {Processes, ParentLists, Tallies} = lists:unzip3(lists:append(Batches)),
    {Counts, Reads, Unreads} = lists:unzip3(Tallies),
    %% The ancestors, level by level: each level's processes read in one
    %% compiled pass, classified by Kinds, their unnamed ones' parents the
    %% next level; a process already known is not read again.
    AncestorItems = lists:sublist(Items, 5),
    AncestorPattern = {'$10', Head ++ [{'_', '$5'}]},
    Classify = ets:match_spec_compile(
                 case Dictionary of
                     true ->
                         [];
                     false ->
                         [{AncestorPattern, [Candidate], [skip]}]
                 end
                 ++ Kinds(AncestorPattern,
                          fun({{parent, Id, Parent}}) ->
                                  [{{'$10', {{up, Parent, Id}}}}];
                             ({{initial_call, Call}}) ->
                                  [{{'$10', {{call, Call}}}}];
                             (Known) ->
                                  [{{'$10', Known}}]
                          end)
                 ++ case Dictionary of
                        true ->
                            [];
                        false ->
                            [{{'$10', Head ++ [{'_', '_'}], '$5'},
                              [{is_pid, '$3'} | Triple],
                              [{{'$10', {{up, '$3', '$5'}}}}]},
                             {{'$10', Head ++ [{'_', '_'}], '_'},
                              [], [{{'$10', {{up, '$3', '$2'}}}}]}]
                    end),
    UpOf = ets:match_spec_compile([{{'_', {up, '$1', '_'}}, [], ['$1']}]),
    Walk = fun Walk(_, [], Known, _) ->
                   Known;
               Walk(0, _, Known, _) ->
                   Known;
               Walk(Depth, Level, Known, Room) ->
                   Now = lists:sublist(Level, Room),
                   Infos = lists:zipwith(fun erlang:process_info/2, Now,
                                         lists:duplicate(erlang:length(Now),
                                                         AncestorItems)),
                   %% As in Batch: the ancestors' '$initial_call' too.
                   Pairs = lists:zip(Now, Infos),
                   Input = case Dictionary of
                               true ->
                                   Pairs;
                               false ->
                                   {Copy, _} =
                                       lists:partition(
                                         fun erlang:is_tuple/1,
                                         ets:match_spec_run(Pairs, Pick)),
                                   lists:zipwith(
                                     fun erlang:append_element/2, Copy,
                                     lists:map(
                                       fun proc_lib:translate_initial_call/1,
                                       lists:zipwith(fun erlang:element/2,
                                                     lists:duplicate(
                                                       erlang:length(Copy),
                                                       1),
                                                     Copy)))
                                   ++ Pairs
                           end,
                   Classes = lists:filter(fun erlang:is_tuple/1,
                                          ets:match_spec_run(Input,
                                                             Classify)),
                   Seen = maps:merge(Known, maps:from_list(Classes)),
                   Next = lists:filter(fun(Pid) ->
                                               not maps:is_key(Pid, Seen)
                                       end,
                                       lists:usort(ets:match_spec_run(
                                                     Classes, UpOf))),
                   Walk(Depth - 1, Next, Seen,
                        Room - erlang:length(Now))
           end,
    Ancestors = Walk(MaxDepth, lists:usort(lists:append(ParentLists)), #{},
                     MaxAncestors),
    Tables = lists:map(fun(T) ->
                               {T, ets:info(T, name), ets:info(T, owner),
                                ets:info(T, size), ets:info(T, memory),
                                ets:info(T, type)}
                       end,
                       ets:all()),
    %% Our connection's port (TCP distribution) is ours, as our processes
    %% are: not the node's to report.
    Ours = case erlang:get('$beam_probe_ours') of
               undefined -> [];
               List -> List
           end,
    Ports = lists:map(fun(P) ->
                              {P, erlang:port_info(P, name),
                               erlang:port_info(P, connected),
                               erlang:port_info(P, memory)}
                      end,
                      lists:subtract(erlang:ports(), Ours)),
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
      %% Streamed, each chunk's place holds 'sent'.
      processes => lists:filter(fun erlang:is_binary/1, Processes),
      %% Every process but ours: the rows, counted.
      process_count => lists:sum(Counts),
      ancestors => erlang:term_to_binary(maps:to_list(Ancestors),
                                         [{compressed, 1}]),
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
      atoms_from => From,
      %% Whole dictionaries copied for their '$initial_call' (OTP 25),
      %% and the proc_lib processes left in init_p's group for a heap
      %% past the cap: the rows' only (an ancestor is read again).
      dictionary_heap_cap => DictionaryHeapCap,
      dictionaries_read => lists:sum(Reads),
      dictionaries_unread => lists:sum(Unreads)}.

%% What a snapshot's pass needs, made where only Chunk is bound: Take, the
%% work of a slice (for pmap/5), and the patterns snapshot/12 uses again
%% for the ancestors. Made inside snapshot/12, every fun there held its
%% parameters (pmap's, sample's and describe's clauses among them), and
%% each worker got Take flat: ~1 million words, 8 MB a worker (measured:
%% a snapshot of 300,000 processes raised the node by 104 MB, 56 of them
%% its four workers' copies; issue 39).
-spec parts({pos_integer(), none | {pid(), reference(), timeout()}}) ->
          #{atom() => term()}.
parts({Chunk, Stream}) ->
    %% The columns' funs first, before anything else is bound: an erl_eval
    %% fun holds the variables bound before it that its function uses
    %% anywhere, and each worker gets Batch's whole, flat, nested funs and
    %% all. Bound after the patterns below, they made a snapshot of 100k
    %% plain processes cost the node ~0.2 s more CPU (measured side by
    %% side, 2 cores).
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
                       initial_call => Intern(Column(6, Rows)),
                       binary_count => Pack(Counts),
                       binary_bytes => Pack(Bytes)}
             end,
    Supported = fun(Item) ->
                        try erlang:process_info(erlang:self(), Item) of
                            _ -> true
                        catch
                            error:badarg -> false
                        end
                end,
    Label = Supported(label),
    Dictionary = Supported({dictionary, '$initial_call'}),
    %% The heap, in bytes, past which a process's whole dictionary is not
    %% copied (OTP 25: above). The same figure as the rows' names
    %% (beam_probe_lib:describe/1's PerCopy), so that a process is named
    %% alike in top and in a snapshot: a RabbitMQ queue's heap is 16-24
    %% MB and its dictionary ~1 KB, and a tester's process held a 317 MB
    %% dictionary.
    DictionaryHeapCap = 64 * 1024 * 1024,
    %% How a process is known, first match first, as match specification
    %% clauses over Pattern's variables ($1 registered name, $2 initial
    %% call, $3 parent, $4 label, $5 '$initial_call'), each giving
    %% Result(Kind): for the rows, their group; for the ancestors, their
    %% class. Code that says little (proc_lib's, a fun's) is known by its
    %% place in the tree: {parent, Id, Parent}.
    %% (As few clauses as can be: each clause tried matches the whole
    %% pattern again, ~150 ns a process; one clause per vague call made a
    %% snapshot of 1M processes 0.3 s slower, measured.)
    ProcLib = {'orelse', {'==', '$2', {const, {proc_lib, init_p, 5}}},
               {'==', '$2', {const, {proc_lib, init_p, 3}}}},
    %% proc_lib's own {M, F, Arity} in $5; what translate_initial_call/1
    %% gives for none is none.
    Triple = [{is_tuple, '$5'}, {'==', {size, '$5'}, 3},
              {is_atom, {element, 1, '$5'}}, {is_atom, {element, 2, '$5'}},
              {is_integer, {element, 3, '$5'}},
              {'=/=', '$5', {const, {proc_lib, init_p, 5}}}],
    Kinds = fun(Pattern, Result) ->
                    Vague = {'orelse', {'==', '$2', {const, {erlang, apply, 2}}},
                             ProcLib},
                    [{Pattern, [{'=/=', '$4', undefined}],
                      Result({{label, '$4'}})}
                     || Label]
                    ++ [{Pattern, [{'=/=', '$1', []}],
                         Result({{name, '$1'}})}]
                    ++ [{Pattern, [{is_pid, '$3'}, ProcLib | Triple],
                         Result({{parent, '$5', '$3'}})}
                        || Dictionary]
                    ++ [{Pattern, [{is_pid, '$3'}, Vague],
                         Result({{parent, '$2', '$3'}})},
                        {Pattern, [], Result({{initial_call, '$2'}})}]
            end,
    %% Each item in a fixed place; one the node lacks is asked as
    %% registered_name again, and its place is not looked at.
    %% Fifth: the single key, or (before OTP 26.2) the heap that says
    %% whether the whole dictionary may be copied.
    Items = [registered_name, initial_call, parent,
             case Label of true -> label; false -> registered_name end,
             case Dictionary of
                 true -> {dictionary, '$initial_call'};
                 false -> total_heap_size
             end,
             memory, message_queue_len, binary],
    %% What a pass matches: {Pid, Info}, and before OTP 26.2 also {Pid,
    %% Info, Id} for a process whose dictionary was copied (Batch), Id its
    %% '$initial_call'. In {Pid, Info}, $5 is the single key where the
    %% node reads one, else the heap.
    Head = [{registered_name, '$1'}, {initial_call, '$2'}, {parent, '$3'},
            {'_', '$4'}],
    Tail = [{memory, '$6'}, {message_queue_len, '$7'}, {binary, '$11'}],
    Pattern = {'$10', Head ++ [{'_', '$5'} | Tail]},
    %% Before OTP 26.2, over [{Pid, Info}] ($5 the heap): a process whose
    %% dictionary is copied, and Pick, which gives each as {Pid, Info},
    %% and 'over' for each left unread for its heap. In the pass itself
    %% such a {Pid, Info} gives 'skip' (its {Pid, Info, Id} gives its
    %% row), taken out after. (Each clause or pass over every process
    %% costs: a match specification clause more is ~0.3 us a process, a
    %% pass that builds a list of every process ~0.6 us, measured. With
    %% this, 100k plain processes cost the node what they did, 0.91 s of
    %% CPU against 0.86, and 100k gen_servers 1.49 s against 0.78: ~7 us
    %% a dictionary read, 2 cores, medians of 15.)
    Candidate = {'andalso', {'==', '$1', []},
                 {'andalso', {is_pid, '$3'},
                  {'andalso', ProcLib,
                   {'=<', '$5', DictionaryHeapCap
                                div erlang:system_info(wordsize)}}}},
    Pick = ets:match_spec_compile(
             [{{'_', [{registered_name, '$1'}, {initial_call, '$2'},
                      {parent, '$3'}, '_', {total_heap_size, '$5'} | '_']},
               [Candidate], ['$_']},
              {{'_', [{registered_name, []}, {initial_call, '$2'},
                      {parent, '$3'} | '_']},
               [{is_pid, '$3'}, ProcLib], [over]}]),
    Row = fun(Group) ->
                  [{{{{'$10', Group, '$1', '$6', '$7', '$2'}}, '$11'}}]
          end,
    %% The first clause that matches gives the group, in this order. A
    %% process that died meanwhile has 'undefined' for its info list and
    %% matches none.
    Clauses = case Dictionary of
                  true ->
                      Kinds(Pattern, Row);
                  false ->
                      [{Pattern, [Candidate], [skip]} | Kinds(Pattern, Row)]
                      ++ [{{'$10', Head ++ [{'_', '_'} | Tail], '$5'},
                           [{is_pid, '$3'} | Triple],
                           Row({{parent, '$5', '$3'}})},
                          {{'$10', Head ++ [{'_', '_'} | Tail], '_'}, [],
                           Row({{parent, '$2', '$3'}})}]
              end,
    Compiled = ets:match_spec_compile(Clauses),
    ParentOf = ets:match_spec_compile([{{parent, '_', '$1'}, [], ['$1']}]),
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
                %% What the match specification runs over, and how many
                %% dictionaries were copied and left unread for the heap.
                Pairs = lists:zip(Now, Infos),
                {Input, Read, Unread} =
                    case Dictionary of
                        true ->
                            {Pairs, 0, 0};
                        false ->
                            {Copy, Over} =
                                lists:partition(fun erlang:is_tuple/1,
                                                ets:match_spec_run(Pairs,
                                                                   Pick)),
                            %% {Pid, Info, Id}, Id the '$initial_call'.
                            {lists:zipwith(
                               fun erlang:append_element/2, Copy,
                               lists:map(
                                 fun proc_lib:translate_initial_call/1,
                                 lists:zipwith(fun erlang:element/2,
                                               lists:duplicate(
                                                 erlang:length(Copy), 1),
                                               Copy)))
                             ++ Pairs,
                             erlang:length(Copy), erlang:length(Over)}
                    end,
                {Rows, Binaries} =
                    lists:unzip(lists:filter(fun erlang:is_tuple/1,
                                             ets:match_spec_run(Input,
                                                                Compiled))),
                %% Each binary is {Id, Size, RefCount}, listed once per
                %% reference: binary_bytes counts each Id once (the Id is
                %% its address), so no process shows more than the node
                %% holds; binary_count stays the references.
                Distinct = lists:zipwith(fun lists:ukeysort/2,
                                         lists:duplicate(
                                           erlang:length(Binaries), 1),
                                         Binaries),
                Unzipped = lists:map(fun lists:unzip3/1, Distinct),
                Sizes = lists:zipwith(fun erlang:element/2,
                                      lists:duplicate(erlang:length(Unzipped),
                                                      2),
                                      Unzipped),
                Encoded = Encode(Rows, lists:map(fun erlang:length/1,
                                                 Binaries),
                                 lists:map(fun lists:sum/1, Sizes)),
                %% The parents the walk starts from, from the batch's
                %% distinct groups.
                {Groups, _} = maps:get(groups, Encoded),
                Parents = ets:match_spec_run(Groups, ParentOf),
                Batch(Rest, [{erlang:term_to_binary(Encoded,
                                                    [{compressed, 1}]),
                              Parents, {erlang:length(Rows), Read, Unread}}
                             | Acc])
        end,
    Take = fun(Pids) -> Batch(Pids, []) end,
    %% How pmap/5 folds the slices' batches: kept whole for the reply, or
    %% (Stream given) each slice's chunks sent to beam-probe as soon as
    %% they are folded, the next fold waiting for its {Tag, more}, and
    %% only the batches' parents and tallies kept. Streamed, the node holds
    %% the chunks of a slice and of the workers' slices waiting to be
    %% folded (one a worker), not every chunk of the pass: 4.4 MB at
    %% 1,000,000 processes (issue 39). Made last: an erl_eval fun holds
    %% the bindings made before it, and Take, copied to every worker,
    %% must not hold this one.
    Fold = case Stream of
               none ->
                   list;
               {Sink, Tag, WaitMs} ->
                   fun(Batches, Acc) ->
                           {Chunks, Parents, Tallies} =
                               lists:unzip3(Batches),
                           %% noconnect: were beam-probe gone, a plain
                           %% send would make the node connect back.
                           erlang:send(Sink, {Tag, erlang:self(), Chunks},
                                       [noconnect]),
                           receive
                               {Tag, more} -> ok
                           after WaitMs ->
                                   erlang:exit(beam_probe_reader_gone)
                           end,
                           [lists:zip3(lists:duplicate(erlang:length(Chunks),
                                                       sent),
                                       Parents, Tallies)
                            | Acc]
                   end
           end,
    #{take => Take, fold => Fold, label => Label, dictionary => Dictionary,
      items => Items, head => Head, candidate => Candidate, kinds => Kinds,
      triple => Triple, pick => Pick,
      dictionary_heap_cap => DictionaryHeapCap}.
