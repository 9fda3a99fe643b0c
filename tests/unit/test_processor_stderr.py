"""A processor's stderr into the log: whole lines, cut ones marked, a line and a byte budget per window."""

from kcl_mp.multilang.child_stderr import Dropped, Line, StderrLines


def logged(events):
    return [e.render() for e in events if isinstance(e, Line) and e.logged]


def test_lines_are_whole_at_every_terminator_and_across_reads():
    lines = StderrLines(lines_per_window=100)
    assert logged(lines.feed(b"a\nb\r", 0.0)) == ["a", "b"]
    assert logged(lines.feed(b"\nc" + b"x" * 5000, 0.0)) == []  # the \n ends b's \r\n, c waits
    assert logged(lines.feed(b"y\r\n", 0.0)) == ["c" + "x" * 5000 + "y"]


def test_a_long_line_is_cut_says_by_how_much_and_its_rest_is_not_more_lines():
    lines = StderrLines(lines_per_window=100, max_line_bytes=10)
    assert lines.feed(b"0123456789abc", 0.0) == []
    assert lines.feed(b"defg", 0.0) == []
    events = lines.feed(b"h\nnext\n", 0.0)
    assert events == [Line("0123456789", 8, True), Line("next", 0, True)]
    assert events[0].render() == "0123456789 ... [cut: 8 more bytes]"


def test_the_budget_drops_past_it_and_reports_when_the_window_closes():
    lines = StderrLines(lines_per_window=3, window_s=10.0)
    events = lines.feed(b"".join(b"line %d\n" % i for i in range(10)), 100.0)
    assert logged(events) == ["line 0", "line 1", "line 2"]
    assert [e.logged for e in events] == [True] * 3 + [False] * 7  # kept for error messages all the same
    assert lines.report_due() == 110.0
    assert lines.tick(109.9) == []
    assert lines.tick(110.0) == [Dropped(7, 10.0, bytes=7 * len("line 0"))]
    assert lines.report_due() is None and lines.tick(200.0) == []
    # a new window starts with the next line, with the whole budget
    assert logged(lines.feed(b"x\ny\nz\nw\n", 300.0)) == ["x", "y", "z"]
    # a line after the window reports the drops before itself
    events = lines.feed(b"late\n", 310.5)
    assert events[0] == Dropped(1, 10.0, bytes=1) and logged(events) == ["late"]


def test_end_gives_the_unterminated_line_and_the_last_drops():
    lines = StderrLines(lines_per_window=1)
    assert logged(lines.feed(b"first\nsecond\nlast words", 0.0)) == ["first"]
    assert lines.end(1.0) == [Line("last words", 0, False), Dropped(2, 10.0, bytes=len("secondlast words"))]
    assert lines.end(2.0) == []


def test_zero_means_no_limit_and_blank_lines_are_not_counted():
    lines = StderrLines(lines_per_window=0)
    assert len(logged(lines.feed(b"x\n" * 50_000, 0.0))) == 50_000
    assert lines.tick(100.0) == []
    budget = StderrLines(lines_per_window=2)
    assert logged(budget.feed(b"\n  \n\r\na\n\nb\n", 0.0)) == ["a", "b"]


def test_the_byte_budget_drops_long_lines_the_line_budget_would_let_through():
    lines = StderrLines(lines_per_window=100, max_line_bytes=10, bytes_per_window=25)
    events = lines.feed(b"0123456789 and more\n" * 4 + b"short\n", 0.0)
    assert [e.logged for e in events] == [True, True, False, False, True]  # 10 + 10, then 10 over 25, then 5 fits
    assert logged(events)[:1] == ["0123456789 ... [cut: 9 more bytes]"]
    assert lines.tick(10.0) == [Dropped(2, 10.0, bytes=20)]
    unbounded = StderrLines(lines_per_window=0, bytes_per_window=0)
    assert len(logged(unbounded.feed((b"x" * 1000 + b"\n") * 20_000, 0.0))) == 20_000
