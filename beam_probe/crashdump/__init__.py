"""A dead node's crash dump, read as a node: the reader (reader.py), the
section parsers (fields.py), heap terms (heap.py), the answers the live
probes give (answers.py) and the overview a person reads first
(overview.py). Nothing here connects to anything."""
