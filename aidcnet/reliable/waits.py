"""When a reliable source waited on its protocol, not on our software (docs/time-and-fidelity.md, "Held").

The fidelity verdict counts a host as *held* while it had data due and not yet sent and its link sat
idle: the signature of a host our software slows. A reliable source has another reason to hold data: its
window or its send budget is full, or what is left waits for a retransmission timer, and until an answer
comes back across the fabric it may send nothing. Over a long round trip that is most of a run, and it is
the protocol's pace, which the fabric's time includes; it is not ours.

:class:`ProtocolWaits` keeps those spans. One opens after a pass of the source's transport that sent
everything the protocol allowed while flows are still open, and closes at the first thing that may let it
send again: the kernel's receive stamp of feedback for its flows after which it can send, a new op coming
due, or the retransmission timer the pass set. What our software adds after that (feedback left unread,
a pass late) is not in the span, so it still counts as held.

Pure: every call takes the time (wall ns on the realtime clock, as the replay's op times and the kernel's
receive stamps are).
"""

from __future__ import annotations


class ProtocolWaits:
    """The spans, [start, end) in wall ns, in which a source could send nothing until its peers answered or
    a timer ran out."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []
        self._since: int | None = None
        self._until: int | None = None

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def begin(self, now_ns: int, until_ns: int | None) -> None:
        """A pass left nothing the protocol lets the source send; ``until_ns``: when its next timer runs
        out (None: only feedback can end the wait). A wait already open goes on (an earlier start)."""
        if self._since is None:
            self._since = now_ns
        self._until = until_ns

    def end(self, at_ns: int) -> None:
        """Something may let the source send from ``at_ns`` on (or the timer did, if earlier)."""
        if self._since is None:
            return
        stop = at_ns if self._until is None else min(at_ns, self._until)
        if stop > self._since:
            self.spans.append((self._since, stop))
        self._since = self._until = None

    def reset(self) -> None:
        """A new run: the spans of the last one go."""
        self.spans = []
        self._since = self._until = None
