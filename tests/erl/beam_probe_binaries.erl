%% Processes that reference one binary many times, for the binary figures
%% (issue 38, item 4: top showed 928.6 GiB for one RabbitMQ queue on a
%% node of 1.1 GiB). A sub-binary sent to a process arrives with a
%% reference of its own to the binary under it, so a list of 1,000
%% slices of 100 bytes of one 1 MB binary is listed 1,000 times by
%% process_info(P, binary), each time with the whole binary's size:
%% recon's binary_memory says ~1 GB, the bytes the process holds ~1 MB.
%%
%% Loaded only into nodes the tests and benchmarks start.
-module(beam_probe_binaries).

-export([slices/2, holders/3, flood/2, keeps_one/2]).

%% A process holding Count slices of 100 bytes of one binary of Size
%% bytes (a slice of 64 bytes or less is copied whole when sent: no
%% reference to the binary under it), received in one message from a
%% maker that is gone by the time this returns its pid.
-spec slices(pos_integer(), pos_integer()) -> pid().
slices(Count, Size) ->
    [Holder] = holders(1, Count, Size),
    Holder.

%% Count processes, each holding Refs such slices of one binary of Size
%% bytes (the same binary for all of them: a broadcast payload), made
%% by one maker; returns their pids once every one holds its slices.
-spec holders(pos_integer(), pos_integer(), pos_integer()) -> [pid()].
holders(Count, Refs, Size) ->
    Self = erlang:self(),
    Holders = [erlang:spawn(fun() -> take(Self) end)
               || _ <- lists:seq(1, Count)],
    Maker = erlang:spawn(
              fun() ->
                      Binary = binary:copy(<<7>>, Size),
                      Room = erlang:max(1, Size - 100),
                      Parts = [binary:part(Binary, I rem Room,
                                           erlang:min(100, Size))
                               || I <- lists:seq(1, Refs)],
                      lists:foreach(fun(Holder) -> Holder ! {take, Parts} end,
                                    Holders),
                      Self ! {made, erlang:self()}
              end),
    receive {made, Maker} -> ok end,
    lists:foreach(fun(Holder) -> receive {holding, Holder} -> ok end end,
                  Holders),
    Holders.

-spec take(pid()) -> non_neg_integer().
take(Parent) ->
    receive
        {take, Parts} ->
            Parent ! {holding, erlang:self()},
            hold(Parts)
    end.

%% Until told to stop; the slices stay live till then (used after the
%% receive), so no collection frees them.
-spec hold([binary()]) -> non_neg_integer().
hold(Parts) ->
    receive
        stop -> erlang:length(Parts)
    end.

%% Count messages sent to Pid, which leaves them waiting (a holder
%% takes only stop): a mailbox whose length is a count past a thousand.
-spec flood(pid(), non_neg_integer()) -> ok.
flood(Pid, Count) ->
    lists:foreach(fun(I) -> Pid ! {waiting, I} end, lists:seq(1, Count)).

%% A process that received Count slices of one binary of Size bytes and
%% kept the first: until it collects, it still references the binary
%% Count times (what bin-leak's collection frees: Count - 1 references),
%% and holds the binary's Size bytes after. Its heap and binary heap are
%% set large, so that nothing collects it before bin-leak does.
-spec keeps_one(pos_integer(), pos_integer()) -> pid().
keeps_one(Count, Size) ->
    Self = erlang:self(),
    Holder = erlang:spawn_opt(
               fun() ->
                       receive
                           {take, [Kept | _]} ->
                               Self ! {holding, erlang:self()},
                               hold([Kept])
                       end
               end,
               [{min_heap_size, 100000}, {min_bin_vheap_size, 1 bsl 28}]),
    Maker = erlang:spawn(
              fun() ->
                      Binary = binary:copy(<<7>>, Size),
                      Holder ! {take, [binary:part(Binary, I, 100)
                                       || I <- lists:seq(1, Count)]},
                      Self ! {made, erlang:self()}
              end),
    receive {made, Maker} -> ok end,
    receive {holding, Holder} -> ok end,
    Holder.
