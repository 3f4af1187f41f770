"""The paper's unpadded chunks drawn: a block kept whole although it holds hidden tokens
(rounded outward) is drawn dashed in diagram 2's kernel row and in diagram 4's rows, exactly the
blocks the step record names (partial_logical), on the page that needs no kernel."""

import numpy as np
from page_lab import open_page, write_page

from da_lab.core.layout import seed_texts
from da_lab.trace import load

TAGS = [(1, '<focus magic_chunks="3">'), (30, "</focus>")]


def test_partially_kept_blocks_are_drawn_dashed(lab, browser, tmp_path):
    trace = tmp_path / "paper.jsonl.gz"
    prompt = lab.paper_prompt("What is the value of key 31?", seed_texts()[1])
    lab.record(trace)
    da_id = lab.add_request(prompt, tags=TAGS, max_tokens=40)
    lab.run()
    lab.stop_recording()
    run = load(trace)
    steps = [i for i, rec in enumerate(run.records)
             if (h := rec.request(da_id)) is not None and h.partial_logical is not None]
    assert steps, "no step kept a partial block: the test would prove nothing"
    i = steps[len(steps) // 2]
    h = run.records[i].request(da_id)
    page = open_page(browser, write_page(trace, tmp_path / "paper.html", eager=True))
    drawn = page.evaluate("""(i) => { daLab.goto(i);
      const runs = (sel) => [...document.querySelectorAll(sel)].map((r) => r.dataset.run
        .split(',').map(Number));
      return { kernel: runs('[data-da-diagram="2"] [data-strip="kernel"] rect[data-partial]'),
               d4: runs('[data-da-diagram="4"] rect[data-partial]') }; }""", i)
    kept = np.asarray(h.kept_logical)
    # Diagram 2's kernel row holds the kept blocks in order: slot k is kept[k].
    slots = [k for a, b in drawn["kernel"] for k in range(a, b)]
    assert sorted(int(kept[k]) for k in slots) == sorted(int(b) for b in h.partial_logical)
    assert drawn["d4"], "diagram 4 drew no partially kept block"
    assert page.errors == []
