"""calls and senders: who calls a function, who sends to a process, counted
on the node.

One engine for both (beam_probe_calls:trace/6): a tracer on the node, an
erl_eval fun, counts each trace message under a key in a table of its own
and sends the counts of each interval (FLUSH_MS), never a message per call.
What the key is, the match specification's body puts into each trace
message, computed by the emulator in the traced process: the caller
({caller_line}, else {caller}), the process ({self}), the arguments'
shape (shape_of below: kinds and small values, never a whole argument),
or, for senders, the message's shape. Here the intervals' counts are
summed, ranked, and given a rate.

Safety, enforced on the node (see beam_probe_calls.erl): --duration,
--max calls counted, --rate past which the trace stops itself, a cap on
the tracer's mailbox and memory; whatever ends it removes what it set.
"""

from __future__ import annotations

import time
from typing import (TYPE_CHECKING, Any, Callable, Generator, Iterator,
                    Optional)

from beam_probe.erldist import etf
from beam_probe.erldist.terms import Atom, Pid, format_term
from beam_probe.errors import (EXIT_OVERLOAD, BadReply, NothingToTrace,
                               UsageError)
from beam_probe.node.forms import LIB, Local
from beam_probe.node.replies import Reply, count, shown
from beam_probe.probes.trace_gc import check_duration

if TYPE_CHECKING:
    from beam_probe.probes.results import (CountRow, CountSample,
                                           CountSummary)

HELPER = "beam_probe_calls"
FLUSH_MS = 500
# Unanswered this long, the tracer takes us as gone (a reader stopped
# without closing the connection).
WAIT_MS = 10_000
DEFAULT_DURATION = 10.0
DEFAULT_MAX = 100_000
MAX_MAX = 100_000_000
# The rate past which the trace stops itself. Measured with
# tests/bench_calls.py (OTP 25, 2 cores): a traced call costs the node
# ~3.5-3.8 us in all (its message built and copied in the calling process,
# ~0.8 us; the tracer's take and count, which yields after each message),
# so 20,000 calls a second cost ~7% of a core (up to ~11% with the
# tracer at high priority on a loaded machine: 5.0-5.7 us a call); a
# function called 100,000 times a second stops the trace by this rate in
# ~0.1 s.
DEFAULT_RATE = 20_000
MAX_RATE = 1_000_000
# Keys the node sends an interval (the rest summed as "other"), and keys
# we keep over the whole run: both bound memory whatever the keys are
# (--by args with many small integers, a sender per connection).
NODE_KEYS = 5_000
NODE_KEYS_SHAPED = 1_000  # a shape is ~17 terms an argument
KEPT_KEYS = 20_000
# The tracer's own bounds: messages waiting (a message for senders is a
# copy of the message sent, of any size) and bytes.
MAX_BACKLOG = 20_000
MAX_MEMORY = 64 * 1024 * 1024
# Rows drawn, written a JSON line, and named (a process's description is
# a call to the node): --top.
DEFAULT_TOP = 20
MAX_TOP = 1_000
# beam-probe's own processes kept to leave their rows out: a names lookup
# adds its call's few (guard/3's), at most one lookup an interval.
MAX_OURS = 10_000
# Arguments shaped by --by args (each adds ~17 terms to every message).
MAX_SHAPED_ARGS = 8

BY_CALLS = ("caller", "process", "args")
BY_SENDERS = ("sender", "shape")

# The kinds of a term, in the order shape_of tests them.
KINDS = ("atom", "integer", "float", "binary", "list", "tuple", "map",
         "pid", "reference", "function", "port")
# A small integer is shown, a larger one only as "integer": its digits
# would make a key per value.
SMALL_INT = 1 << 27
# A binary up to this many bytes is shown, as inspect cuts keys.
SHORT_BINARY = 16


def shape_of(term: Any) -> tuple[Any, ...]:
    """A match-specification expression (body) giving the shape of
    ``term`` (an expression: Atom("$_") and hd/tl of it): a tuple of its
    kind tests, its value if an atom, a small integer or a short binary,
    a tuple's size and its first element if an atom, a list's emptiness.
    Everything in it is an immediate or a binary of at most SHORT_BINARY
    bytes: nothing large is ever copied into the trace message."""
    a = Atom
    tests = tuple((a(f"is_{kind}"), term) for kind in KINDS)
    values: tuple[Any, ...] = (
        (a("andalso"), (a("is_atom"), term), term),
        (a("andalso"), (a("is_integer"), term),
         (a("<"), term, SMALL_INT), (a(">"), term, -SMALL_INT), term),
        (a("andalso"), (a("is_binary"), term),
         (a("=<"), (a("byte_size"), term), SHORT_BINARY), term),
        (a("andalso"), (a("is_tuple"), term), (a("size"), term)),
        (a("andalso"), (a("is_tuple"), term), (a(">"), (a("size"), term), 0),
         (a("is_atom"), (a("element"), 1, term)), (a("element"), 1, term)),
        (a("=:="), term, []),
    )
    # A tuple in a body is a call unless wrapped: {{...}} builds one.
    return ((*tests, *values),)


def _argument(i: int) -> Any:
    """The ith argument (0-based) of a traced call, in a body: hd of i tl's
    of '$_' (the argument list)."""
    expr: Any = Atom("$_")
    for _ in range(i):
        expr = (Atom("tl"), expr)
    return (Atom("hd"), expr)


def shape_text(shape: Any) -> dict[str, Any]:
    """A shape (see shape_of) as JSON: {"kind": ..., "value": ...} with
    value only where shape_of sent one."""
    if not (isinstance(shape, tuple) and len(shape) == len(KINDS) + 6):
        raise BadReply(f"{HELPER}: a shape of {shown(shape)}")
    tests, (atom, small, binary, size, tag, empty) = \
        shape[:len(KINDS)], shape[len(KINDS):]
    kind = next((k for k, t in zip(KINDS, tests) if t is True), "other")
    out: dict[str, Any] = {"kind": kind}
    if kind == "atom":
        out["value"] = str(format_term(atom))
    elif kind == "integer" and small is not False:
        out["value"] = small
    elif kind == "binary" and isinstance(binary, bytes):
        out["value"] = str(format_term(binary))
    elif kind == "tuple" and isinstance(size, int) \
            and not isinstance(size, bool):
        out["size"] = size
        if tag is not False:
            out["tag"] = str(format_term(tag))
    elif kind == "list":
        out["empty"] = empty is True
    return out


def caller_text(key: Any) -> dict[str, Any]:
    """A caller key: {M, F, A}, {M, F, A, {File, Line}} or undefined (a
    tail call: the caller is not on the stack)."""
    if isinstance(key, tuple) and len(key) in (3, 4):
        m, f, a = key[:3]
        if isinstance(m, Atom) and isinstance(f, Atom) and \
                isinstance(a, int) and not isinstance(a, bool):
            out: dict[str, Any] = {"caller": f"{format_term(m)}:"
                                             f"{format_term(f)}/{a}"}
            where = key[3] if len(key) == 4 else None
            if isinstance(where, tuple) and len(where) == 2:
                path, line = where
                if isinstance(path, list):
                    path = "".join(chr(c) for c in path
                                   if isinstance(c, int))
                if isinstance(path, str) and isinstance(line, int):
                    out["line"] = f"{path.rsplit('/', 1)[-1]}:{line}"
            return out
    if key == Atom("undefined"):
        return {"caller": None, "tail_call": True}
    return {"caller": format_term(key)}


def check_limits(duration: float, max_calls: int, rate: int,
                 top: int) -> None:
    check_duration(duration)
    if not 1 <= max_calls <= MAX_MAX:
        raise UsageError(f"--max must be between 1 and {MAX_MAX:,}, not "
                         f"{max_calls}")
    if not 1 <= rate <= MAX_RATE:
        raise UsageError(f"--rate must be between 1 and {MAX_RATE:,} a "
                         f"second, not {rate}")
    if not 1 <= top <= MAX_TOP:
        raise UsageError(f"--top must be between 1 and {MAX_TOP}, not {top}")


def rate_text(text: str) -> int:
    """--rate as written: N, N/s."""
    word = text.strip().lower()
    for suffix in ("/s", "/sec", "per_s"):
        if word.endswith(suffix):
            word = word[:-len(suffix)]
    try:
        return int(word.replace("_", "").replace(",", ""))
    except ValueError:
        raise UsageError(f"--rate must be a number of calls a second "
                         f"(20000 or 20000/s), not {text!r}") from None


def calls_request(function: str, match: Optional[str], by: str,
                  allow: bool) -> dict[Any, Any]:
    """What the node's tracer is asked for `calls`, checked whole before
    anything connects (call_spec reads the function and the match, and
    refuses what would flood the node)."""
    from beam_probe.probes.call_spec import (check_safe, parse_function,
                                             parse_match)

    spec = parse_function(function)
    head = parse_match(match, spec.arity, spec.elixir) \
        if match is not None else None
    check_safe(spec, head, allow)
    if spec.module == "_":
        raise UsageError(f"{spec.text}: name the module (calls traces one "
                         "module's functions)")
    arity = spec.arity if spec.arity is not None else (
        len(head) if head is not None else None)
    if by == "args":
        if arity is None:
            raise UsageError("--by args needs the arity (m:f/2, not m:f/_): "
                             "the shape is one an argument")
        if arity > MAX_SHAPED_ARGS:
            raise UsageError(f"--by args shapes at most {MAX_SHAPED_ARGS} "
                             f"arguments; {spec.text} takes {arity}")
        # The message's key: a tuple (wrapped: built, not called) of
        # shapes, one an argument.
        bodies: list[Any] = [
            (tuple(shape_of(_argument(i)) for i in range(arity)),)]
    elif by == "process":
        bodies = [(Atom("self"),)]
    else:
        # caller_line names the line too (OTP 25 has it, checked on 25.2,
        # 27 and 28); the node takes the first its release accepts.
        bodies = [(Atom("caller_line"),), (Atom("caller"),)]
    match_head: Any = head if head is not None else Atom("_")
    specs: list[Any] = [[(match_head, [], [(Atom("message"), body)])]
                        for body in bodies]
    return {"spec": spec, "head": head, "by": by,
            "what": {Atom("kind"): Atom("calls"),
                     Atom("module"): spec.module.encode("utf-8"),
                     Atom("function"): spec.function.encode("utf-8"),
                     Atom("arity"): arity if arity is not None
                     else Atom("any"),
                     Atom("specs"): etf.encode(specs)}}


def senders_request(process: str, by: str) -> dict[Any, Any]:
    """What the node's tracer is asked for `senders`."""
    from beam_probe.probes.info import target

    wanted = target(process)
    body: list[Any] = [] if by == "sender" else \
        [(Atom("message"), shape_of((Atom("hd"), (Atom("tl"),
                                                  Atom("$_")))))]
    return {"process": process, "by": by,
            "what": {Atom("kind"): Atom("senders"),
                     Atom("target"): wanted, Atom("key"): Atom(by),
                     Atom("body"): etf.encode(body)}}


class Counting:
    """A live probe for `calls` and `senders`: open() starts the tracer,
    samples() yields the ranked counts after each interval, summary() the
    whole run. close() ends the trace (the node's tracer also ends when
    our connection goes)."""

    def __init__(self, connect: Callable[[], Any], kind: str,
                 request: dict[Any, Any], duration: float, max_calls: int,
                 rate: int, top: int, progress: Callable[[str], None],
                 syntax: str = "erlang") -> None:
        check_limits(duration, max_calls, rate, top)
        self._connect, self.kind, self.request = connect, kind, request
        self.by = request["by"]
        # Keys the node may send an interval (the rest summed as other).
        self.node_keys = NODE_KEYS_SHAPED if self.by in ("args", "shape") \
            else NODE_KEYS
        self.duration, self.max_calls, self.rate, self.top = \
            duration, max_calls, rate, top
        self._progress = progress
        # --syntax, and whether the node runs Elixir (asked at open for
        # auto): the view's names follow it.
        self.syntax_wanted = syntax
        self.elixir = False
        self._attached: Any = None
        self.remote: Any = None
        self._stream: Generator[Any, None, Any] | None = None
        self.node = ""
        self.mode = ""
        self.matched = 0
        self.target: dict[str, Any] | None = None
        self.counts: dict[Any, int] = {}
        self.last: dict[Any, int] = {}
        self.other = 0
        self.total = 0
        self.elapsed = 0.0
        self.interval = 0.0
        self.ended: dict[str, Any] = {}
        self._names: dict[Pid, dict[str, Any]] = {}
        # beam-probe's own processes on the node since the trace began
        # (the names lookups'): their rows are left out.
        self._ours: set[Pid] = set()
        # When we stop reading whatever the node says: --duration is the
        # node's to keep, and one that streams on (a hostile one, or one
        # not running our tracer) must not keep us past it.
        self._until = float("inf")

    # -- what is traced, in words -------------------------------------------

    @property
    def what(self) -> str:
        if self.kind == "calls":
            return str(self.request["spec"].text)
        return str(self.request["process"])

    @property
    def key_name(self) -> str:
        return {"caller": "caller", "process": "process", "args": "args",
                "sender": "sender", "shape": "sender"}[self.by]

    # -- the run ------------------------------------------------------------

    def open(self) -> None:
        self._attached = self._connect()
        remote = self.remote = self._attached.__enter__()
        self.node = remote.node
        if self.syntax_wanted == "auto":
            from beam_probe.probes.basic import runs_elixir

            self.elixir = runs_elixir(remote)
        limits = {Atom("duration_ms"): max(1, int(self.duration * 1000)),
                  Atom("max"): self.max_calls, Atom("rate"): self.rate,
                  Atom("flush_ms"): FLUSH_MS, Atom("wait_ms"): WAIT_MS,
                  Atom("max_keys"): self.node_keys,
                  Atom("max_backlog"): MAX_BACKLOG,
                  Atom("max_memory"): MAX_MEMORY}
        self._progress(f"tracing for {self.duration:g} s")
        self._stream = remote.stream(
            HELPER, "trace", self.request["what"], limits,
            Local("resolve", LIB), Local("follow"),
            timeout=FLUSH_MS / 1000 + remote.timeout, limit=4)
        try:
            first = next(self._stream)
        except StopIteration as done:
            self._refused(done.value)
            raise  # not reached: _refused raises
        started = Reply(f"{HELPER}:trace's first chunk", first)
        if started["kind"] != Atom("started"):
            raise BadReply(f"{HELPER}:trace began with "
                           f"{shown(started['kind'])}")
        # Past --duration the tracer ends, sends its last counts and its
        # summary within an interval, its clean-up given the call's timeout.
        self._until = time.monotonic() + self.duration + FLUSH_MS / 1000 \
            + remote.timeout
        self.mode = "session" if started["mode"] == Atom("session") \
            else "trace/3"
        self.matched = started.count("matched")
        if self.kind == "calls" and self.matched == 0:
            raise NothingToTrace(f"{self.node}: no function "
                                 f"{self.what} on the node")
        pid = started["target"]
        if isinstance(pid, Pid):
            self.target = {"pid": str(pid), **self._name_of([pid])[pid]}

    def _refused(self, value: Any) -> None:
        reply = Reply(f"{HELPER}:trace", value)
        if reply["reason"] != Atom("refused"):
            raise BadReply(f"{HELPER}:trace ended before it began: "
                           f"{shown(reply['reason'])}")
        why, detail = str(reply["why"]), reply["detail"]
        what = self.what
        text = {
            "not_loaded": f"module {_text(detail)} is not loaded on the "
                          "node (beam-probe loads nothing)",
            "no_function": f"no function {what} in the module loaded on "
                           "the node",
            "unknown_atom": f"--match names an atom the node has never "
                            f"seen: no call of {what} can match it",
            "bad_spec": f"the node's release refused the match "
                        f"specification for {what}",
            "not_found": f"no such process {what}",
            "ours": f"{what} is one of beam-probe's own processes",
            "pattern": f"{what} is traced already by another tool "
                       f"({format_term(detail)[:200]}); OTP 25-26 keep one "
                       "pattern a function: beam-probe leaves it alone",
            "send_pattern": "another tool has set the node's send trace "
                            f"pattern ({format_term(detail)[:200]}); OTP "
                            "25-26 keep one: beam-probe leaves it alone",
            "tracer": "another tracer is at work on the node ("
                      + ", ".join(format_term(t) for t in (
                          detail if isinstance(detail, list) else [detail])
                          )[:200]
                      + "); on OTP 25-26 tracing every process would take "
                      "its processes from it: beam-probe leaves them alone",
        }.get(why, f"the node refused the trace ({why})")
        raise NothingToTrace(f"{self.node}: {text}")

    def samples(self) -> Iterator[CountSample]:
        assert self._stream is not None
        stream = self._stream
        while True:
            try:
                chunk = next(stream)
            except StopIteration as done:
                summary = Reply(f"{HELPER}:trace", done.value)
                self.ended = {"reason": str(summary["reason"]),
                              **{key: summary.count(key) for key in
                                 ("counted", "reductions", "backlog",
                                  "memory")}}
                return
            if time.monotonic() > self._until:
                raise BadReply(f"{HELPER}:trace went on past --duration "
                               f"({self.duration:g} s): stopped reading it")
            batch = Reply(f"{HELPER}:trace chunk", chunk)
            if batch["kind"] != Atom("rows"):
                continue
            self._add(batch)
            yield self.sample()

    def _add(self, batch: Reply) -> None:
        ms = batch.count("ms") / 1000
        self.interval, self.elapsed = max(ms - self.elapsed, 1e-3), ms
        self.last = {}
        rows = batch.list("rows")
        if len(rows) > self.node_keys:
            # Asked for at most node_keys: a node sending more would have
            # us hold and rank what it likes (a frame holds millions).
            raise BadReply(f"{HELPER}: {len(rows):,} rows in an interval, "
                           f"where at most {self.node_keys:,} were asked")
        for row in rows:
            if not (isinstance(row, tuple) and len(row) == 2):
                raise BadReply(f"{HELPER}: a row of {shown(row)}")
            key, n = row
            n = count(f"{HELPER}'s count", n)
            if self.by != "caller" and self.by != "args" \
                    and self._pid_of(key) in self._ours:
                continue
            self.last[key] = self.last.get(key, 0) + n
            self.total += n
            if key in self.counts or len(self.counts) < KEPT_KEYS:
                self.counts[key] = self.counts.get(key, 0) + n
            else:
                self.other += n
        other = batch.count("other")
        self.other += other
        self.total += other

    def ranked(self, name: bool = True) -> list[CountRow]:
        """The top rows, largest first, each with its count, its share,
        its rate over the last interval, and its key in words. ``name``:
        ask the node for the names of processes not yet named (the
        connection is still open)."""
        keys = sorted(self.counts, key=lambda k: -self.counts[k])[:self.top]
        pids = [p for p in (self._pid_of(k) for k in keys)
                if p is not None and p not in self._names]
        if pids and name:
            self._name_of(pids)
        out: list[Any] = []  # CountRow: a key's fields, then its count
        for key in keys:
            n = self.counts[key]
            row = self._key_row(key)
            row.update({"count": n,
                        "per_s": round(self.last.get(key, 0)
                                       / self.interval, 1)
                        if self.interval else 0.0,
                        "share": round(n / self.total, 4)
                        if self.total else 0.0})
            out.append(row)
        return out

    def _pid_of(self, key: Any) -> Pid | None:
        if isinstance(key, Pid):
            return key
        if isinstance(key, tuple) and len(key) == 2 and \
                isinstance(key[0], Pid):
            return key[0]
        return None

    def _key_row(self, key: Any) -> dict[str, Any]:
        if self.by == "caller":
            return caller_text(key)
        if self.by == "args":
            if not isinstance(key, tuple):
                raise BadReply(f"{HELPER}: arguments' shapes of "
                               f"{shown(key)}")
            return {"args": [shape_text(s) for s in key]}
        pid = self._pid_of(key)
        who = {"pid": str(pid) if pid is not None else format_term(key),
               **self._names.get(pid, {})} if pid is not None else \
            {"pid": format_term(key)}
        if self.by == "process":
            return {"process": who["pid"], **_named(who)}
        row = {"sender": who["pid"], **_named(who)}
        if self.by == "shape" and isinstance(key, tuple) and len(key) == 2:
            row["shape"] = shape_text(key[1])
        return row

    def _name_of(self, pids: list[Pid]) -> dict[Pid, dict[str, Any]]:
        """Each process's name as the other tables give it (describe/1):
        its registered name, else its label or process_name, and its
        initial call."""
        from beam_probe.probes.processes import rows

        reply = self.remote.run(HELPER, "names", pids,
                                Local("describe", LIB))
        if not (isinstance(reply, tuple) and len(reply) == 2
                and isinstance(reply[1], list)):
            raise BadReply(f"{HELPER}:names gave {shown(reply)}")
        described = rows(reply[0], "value")
        # This call's own processes: traced as any new process, their
        # calls and sends are ours, not the node's (see _add).
        if len(self._ours) < MAX_OURS:
            self._ours.update(p for p in reply[1][:16] if isinstance(p, Pid))
        by_pid = {row["pid"]: row for row in described}
        for pid in pids:
            row = by_pid.get(str(pid))
            self._names[pid] = {
                "name": (row.get("name") or row.get("label")) if row
                else None,
                "initial_call": row.get("initial_call") if row else None}
        return self._names

    def sample(self) -> CountSample:
        return {"node": self.node, "by": self.by,
                "elapsed": round(self.elapsed, 3),
                "counted": self.total, "other": self.other,
                "rows": self.ranked()}

    def summary(self) -> CountSummary:
        reason = self.ended.get("reason", "interrupted")
        return {"node": self.node, "command": self.kind,
                "traced": self.what, "by": self.by, "mode": self.mode,
                "target": self.target,
                "ended_by": reason, "elapsed": round(self.elapsed, 3),
                "counted": self.total,
                "per_s": round(self.total / self.elapsed, 1)
                if self.elapsed else 0.0,
                "other": self.other,
                "limits": {"duration": self.duration, "max": self.max_calls,
                           "rate": self.rate},
                "tracer_reductions": self.ended.get("reductions"),
                # The tracer's bytes and mailbox when it stopped (its
                # bounds: MAX_MEMORY, MAX_BACKLOG).
                "tracer_memory": self.ended.get("memory"),
                "tracer_backlog": self.ended.get("backlog"),
                # Named as the samples named them: the connection is
                # closed by now.
                "rows": self.ranked(name=False)}

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._attached is not None:
            attached, self._attached = self._attached, None
            attached.__exit__(None, None, None)

    def exit_code(self) -> int:
        """EXIT_OVERLOAD when the trace stopped early (the rate, the
        tracer's mailbox or memory, or another tool removed it): the
        counts shown are those up to then."""
        return EXIT_OVERLOAD if self.ended.get("reason") in (
            "rate", "overload", "removed") else 0


def _text(value: Any) -> str:
    """A name the node sent back as it was given (a binary)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return format_term(value)


def _named(who: dict[str, Any]) -> dict[str, Any]:
    return {"name": who.get("name"),
            "initial_call": who.get("initial_call")}


__all__ = ["Counting", "calls_request", "caller_text", "check_limits",
           "rate_text", "senders_request", "shape_of", "shape_text"]
