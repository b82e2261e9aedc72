%% A hostile cluster member, for test_cluster.py only: loaded over the
%% stock erl_eval of one test node, it answers every expression it is
%% given with a term of ~20 MB (a list of four million integers), not
%% with the bytes beam-probe's helpers answer with.
-module(erl_eval).

-export([expr/5]).

expr(_Form, _Bindings, _Local, _NonLocal, _Return) ->
    lists:seq(1, 4000000).
