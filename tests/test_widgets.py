"""The player's kernel side: what it sends the page and what it does with the page's messages,
checked against the records. Replay tests use the shipped traces and no engine; live tests drive
the session's real Lab through LiveSource: one engine step per step the page asks for, steering
and "new request". (What the page draws from it: tests/test_page.py, tests/test_browser.py.)"""

import json
from pathlib import Path

import numpy as np
import pytest
from da_lab_widgets import (
    BlocksDiagram,
    DAHookDiagram,
    Highlight,
    LiveSource,
    MetadataPathDiagram,
    Player,
    SkeletonDiagram,
    TraceSource,
)
from da_lab_widgets.packets import MAGIC

from da_lab.core.record import StepRecord

TRACES = Path(__file__).resolve().parents[1] / "traces"


def _head(packet: bytes) -> dict:
    """The JSON part of a packet (packets.py): where it starts and its steps."""
    assert packet[:4] == MAGIC
    n = int(np.frombuffer(packet[4:8], dtype=np.uint32)[0])
    return json.loads(packet[8:8 + n])


class Page:
    """Stands in for the page's side of the comm: records what the kernel sends, and sends
    what the page would (static/app.js)."""

    def __init__(self, player: Player) -> None:
        self.player, self.sent = player, []
        player.widget.send = lambda content, buffers=None: self.sent.append(
            (content, [_head(bytes(b)) for b in buffers or []]))

    def say(self, **msg) -> tuple[dict, list]:
        self.sent.clear()
        self.player._on_msg(self.player.widget, msg, [])
        return self.sent[-1] if self.sent else (None, [])


@pytest.fixture(scope="module", params=["seed_cpu", "h200_8b_64k"])
def source(request):
    return TraceSource(TRACES / f"{request.param}.jsonl.gz")


def test_a_replay_is_sent_once_and_python_moves_the_page(source):
    hl = Highlight()
    h = source.header
    player = Player(source, [SkeletonDiagram(h, hl), BlocksDiagram(h, hl),
                             MetadataPathDiagram(h, hl), DAHookDiagram(h, hl)], interval_ms=50)
    n = len(source.records)
    cfg = player.widget.config
    assert [d["kind"] for d in cfg["diagrams"]] == [1, 2, 3, 4] and cfg["speed"] == 20
    assert not cfg["live"] and cfg["link"] == hl.key and cfg["kernel"]
    base = _head(bytes(player.widget._base))       # the whole recording, in the state
    assert base["from"] == 0 and [s["s"] for s in base["steps"]] == [r.step for r in source.records]
    assert player.i == 0
    page = Page(player)
    assert player.step() and player.i == 1
    content, packets = page.sent[-1]
    assert content == {"type": "state", "go": 1, "note": ""} and packets == []   # nothing new
    assert player.goto(13) and page.sent[-1][0]["go"] == 13
    assert not player.goto(n + 5) and player.i == n - 1     # past the end: the last, and why
    assert "end of the recording" in player.note and page.sent[-1][0]["go"] == n - 1
    # a new view (a second tab) says what it has; it gets the rest and where we are
    content, packets = page.say(type="hello", have=3)
    assert content["go"] == n - 1 and packets[0]["from"] == 3 and len(packets[0]["steps"]) == n - 3
    # the page's step on screen becomes player.i
    page.say(type="at", i=7)
    assert player.i == 7
    content, _ = page.say(type="steer", mode="local", chunks=[], i=7)   # a replay: refused
    assert player.diagrams[3].steering.status.startswith("could not steer: a recording")
    assert page.say(type="nonsense") == (None, [])


def test_the_page_gets_diagram_1s_and_3s_words(source):
    h = source.header
    d1, d3 = SkeletonDiagram(h), MetadataPathDiagram(h)
    c1, c3 = d1.config(h, source.records), d3.config(h, source.records)
    boxes = [b for row in c1["rows"] for b in row["boxes"]]
    attn = [b for b in boxes if b["attn"]]
    backends = {s["backend"] for s in h["skeleton"]["slots"] if s.get("slot") == "attention"}
    assert attn and all(any(p[0] == next(iter(backends)) for ln in b["lines"] for p in ln)
                        for b in attn)
    assert c1["n_attn"] == sum(s.get("slot") == "attention" for s in h["skeleton"]["slots"])
    assert [s["key"] for s in c3["stages"]] == ["scheduler", "block_table", "hook", "builder",
                                                "context", "layer", "impl"]
    assert c3["stages"][-1]["title"] == c3["impl"] and c3["impl"] in {
        s["impl"] for s in h["skeleton"]["slots"] if s.get("slot") == "attention"}


def test_live_each_asked_step_runs_one_engine_step_and_steering_answers(lab):
    src = LiveSource(lab)
    da_id = lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=12,
                          request_id="widgets-live")
    hook = DAHookDiagram(src.header, Highlight(), lab=lab)
    player = Player(src, [hook, BlocksDiagram(src.header)])   # draws step 0: one engine step
    assert len(src.records) == 1 and hook.req == da_id
    st = player.widget.config["state"]["steer"]
    assert st["chunks"] == ["C1", "C2", "C3", "C4"] and st["req"] == da_id
    assert st["reasons"]["global"] and "already" in st["reasons"]["global"]
    page = Page(player)
    content, packets = page.say(type="pick", chunks=[2])
    assert content["steer"]["picked"] == [2]
    content, _ = page.say(type="steer", mode="focus", chunks=[2], i=0)
    assert "writes <focus C2>" in content["steer"]["status"]
    ran = 0
    while True:
        n = len(src.records)
        content, packets = page.say(type="need", have=n)
        ran += 1
        assert len(src.records) <= n + 1                   # one engine step per ask, at most
        if len(src.records) == n:
            assert content["none"] and content["done"]
            break
        assert packets[0]["from"] == n and len(packets[0]["steps"]) == 1
    # asking for a step the page already has runs no engine step
    n = len(src.records)
    page.say(type="need", have=n - 3)
    assert len(src.records) == n
    assert all(isinstance(r, StepRecord) for r in src.records)
    steps = [r.step for r in src.records]
    assert steps == list(range(steps[0], steps[0] + len(steps)))
    hs = [h for r in src.records if (h := r.request(da_id)) is not None and h.hooked]
    trapped = [e["text"] for h in hs for e in h.events if e["kind"] == "tag_trapped"]
    assert trapped == ["<focus C2>"]
    assert any(h.mode == "focus" and h.blocks_read < h.blocks_total for h in hs)
    assert len(player.step_ms) == ran + 1    # the first at creation; the last ask found none
    assert f"{da_id} has finished" in content["steer"]["why"]


def test_steering_off_with_a_reason_and_new_request_keeps_playing(lab):
    """Issue 15: a finished request left the buttons on (a press then failed), LOCAL while LOCAL
    wrote a second <local>, and ▶ at the end silently started over at step 0."""
    def add(lab):
        return lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=12)

    src = LiveSource(lab, new_request=add)
    da_id = add(lab)
    hook = DAHookDiagram(src.header, Highlight(), lab=lab)
    player = Player(src, [hook])
    page = Page(player)
    assert player.widget.config["can_add"]
    content, _ = page.say(type="steer", mode="local", chunks=[], i=0)
    assert "the director writes <local>" in content["steer"]["status"]
    assert content["steer"]["reasons"]["local"]            # LOCAL while LOCAL: off
    player.step()
    content, _ = page.say(type="steer", mode="global", chunks=[], i=0)   # an earlier step
    assert "you are looking at step" in content["steer"]["status"]
    # ...unless ▶ follows the engine, which runs the step the page asks for: one step ahead
    content, _ = page.say(type="steer", mode="global", chunks=[], i=0, following=True)
    assert "the director writes <global>" in content["steer"]["status"]
    while player.step():
        pass
    assert lab.requests[da_id]["text"].count("<local>") == 1
    assert "finished" in player.note and page.sent[-1][0]["done"]
    assert f"{da_id} has finished" in hook.steering.state()["why"]
    new = player.new_request()
    assert new != da_id and hook.req == new
    last = page.sent[-1][0]
    assert last["play"] and "finished" not in player.note
    assert any(c.get("follow") == new for c, _ in page.sent)
    assert any(new in (c.get("notes") or {}) for c, _ in page.sent)   # its stream note
    assert src.records[-1].request(new) is not None          # one engine step ran it
    assert hook.steering.state()["reasons"]["local"] is None
    # a new view (a reload) follows the new request in every diagram, as the others do
    content, _ = page.say(type="hello", have=0)
    assert content["follow"] == new
    assert hook.steering.state()["status"] == f"following {new}: steer it while it runs"
    while player.step():
        pass
    assert lab.requests[new]["finished"] and len(lab.requests[new]["token_ids"]) == 12
    # finished: the status no longer invites steering beside "steering is off" (issue 56)
    assert hook.steering.state()["status"] == f"following {new}"


def test_a_lesson_with_its_own_way_to_add_a_request_says_it(lab):
    """06 adds questions with its Ask button: a finished player says that, not "in a cell"."""
    src = LiveSource(lab, add_hint="Press Ask above with another question")
    lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=4)
    hook = DAHookDiagram(src.header, Highlight(), lab=lab)
    player = Player(src, [hook])
    assert player.widget.config["add_hint"] == "Press Ask above with another question"
    while player.step():
        pass
    assert "Press Ask above with another question, then ▶" in player.note
    assert "(Press Ask above with another question)" in hook.live_state(src.records)["steer"]["why"]
    assert "in a cell" not in player.note
