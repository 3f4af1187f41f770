"""Lesson 04's readers (da_lab.lesson.add_readers): several requests over one corpus, added
together, run in one batch and share the prompt's physical blocks through vLLM's prefix cache,
while each one's kernel still reads its own chunk. Read from the step records, as the lesson's
diagram 2 (panel (e)) draws them; a branch of a LiveSource records every step in both."""

from da_lab_widgets import LiveSource

from da_lab.lesson import READER_CHUNKS, add_readers, reader_corpus


def test_readers_share_the_corpus_blocks_and_each_reads_its_own_chunk(lab):
    lesson = LiveSource(lab)
    other = lab.add_request(lab.encode(" plain text, no layout") * 4, max_tokens=40,
                            request_id="beside-readers")
    assert lesson.ensure(0)
    readers = lesson.branch()
    corpus = reader_corpus(lab)[0].layout
    names = add_readers(lab)
    k = 0
    while any(not lab.requests[n]["finished"] for n in names):
        assert readers.ensure(k)
        k += 1
    lab.abort(other)
    # the branch got exactly the steps run since it was made, the same records as the lesson's
    assert readers.records == lesson.records[1:] and len(readers.records) == k
    full = corpus.tail_start                  # the corpus' full blocks: scaffold and chunks
    for i, rec in enumerate(readers.records):
        rows = [q for q in rec.requests if q.req in names]
        assert len(rows) == len(names), f"step {i}: the readers are not in one batch"
        heads = {tuple(int(p) for p in q.staged_row[:full]) for q in rows}
        assert len(heads) == 1, f"step {i}: the readers' corpus blocks differ: {heads}"
        held = {int(p) for q in rows for p in q.staged_row}
        assert len(held) == full + len(names), f"step {i}: {len(held)} physical blocks"
    first = readers.records[0]
    # one prefill of the corpus: the others' queries are their questions only
    queries = [q.query_len for q in first.requests if q.req in names]
    assert sum(n < 2 * corpus.block_size for n in queries) >= len(names) - 1, queries
    # the KV map the record carries names every reader as an owner of each corpus block
    row = next(q for q in first.requests if q.req == names[0]).staged_row
    owners = {int(p): set(first.kv["assign"][str(int(p))]) for p in row[:full]}
    assert all(set(names) <= o for o in owners.values()), owners
    last = [q for rec in readers.records for q in rec.requests if q.req in names][-len(names):]
    for q, c in zip(sorted(last, key=lambda q: q.req), READER_CHUNKS, strict=True):
        assert q.mode == "focus", (q.req, q.mode)
        kept = set(int(b) for b in q.kept)
        assert set(corpus.chunk_range(c)) <= kept, (q.req, c, sorted(kept))
        for other_c in READER_CHUNKS:
            if other_c != c:
                assert not set(corpus.chunk_range(other_c)) & kept, (q.req, other_c)
