"""One module per question asked of a node.

A probe takes a :class:`beam_probe.remote.Remote`, asks the node in a few
calls, and returns plain Python values (dicts, lists, ints, strings) ready to
render. Probes know nothing of sockets or terminals.
"""
