# %% [markdown]
# # 7 · DA inside `vllm serve`
#
# The same hook, in vLLM's OpenAI server: `da-lab serve` starts it with da_lab's plugins, a client sends DA prompts over HTTP (the layout travels in `vllm_xargs`), and the server records the hook's steps to a trace that the diagrams follow while it grows.

# %%
# Start `da-lab serve` in the background (the embedded model that writes
# its own tags): three processes, the API server, the engine core and the worker where the
# hook runs. DA_LAB_TRACE: the worker records its steps there. A line counts the seconds while
# it starts (tens of seconds; minutes on a busy machine); the last says how long it took here,
# and how busy the machine was.
import atexit, os, re, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path
from da_lab.engine.startup import Progress

WORK = Path(tempfile.mkdtemp(prefix="da-lab-serve-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)   # runs after the server is stopped
TRACE, LOG = WORK / "server_trace.jsonl.gz", WORK / "server.log"
log = open(LOG, "w")
server = subprocess.Popen([sys.executable, "-m", "da_lab.cli", "serve", "--port", "0",
                           "--num-gpu-blocks-override", "96", "--max-model-len", "2048"],
                          env=dict(os.environ, DA_LAB_TRACE=str(TRACE)), stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
atexit.register(lambda: server.poll() is None and os.killpg(server.pid, signal.SIGTERM))
url, t0, load0 = None, time.perf_counter(), os.getloadavg()[0]
starting = Progress(what="starting da-lab serve")
starting.start("API server, engine core and worker; waiting for it to serve")
for _ in range(600):
    m = re.search(r"serving .* at (http://\S+)/v1", LOG.read_text())
    if m:
        url = m.group(1)
        break
    if server.poll() is not None:
        starting.fail()
        raise RuntimeError(LOG.read_text()[-3000:])
    time.sleep(1)
starting.done(f"server at {url}")
print(f"started in {time.perf_counter() - t0:.0f} s on {os.cpu_count()} CPUs, load average "
      f"{load0:.1f} -> {os.getloadavg()[0]:.1f}")

# %% [markdown]
# Three held-out questions of the tiny model's task, sent at once. The client builds each DA prompt with the server's tokenizer (chunks padded to whole blocks), sends the token ids and the layout, streams the reply, then asks the server for the request's DA stats.

# %%
from concurrent.futures import ThreadPoolExecutor
from da_lab.client import DAClient
from da_lab.training.data.task import held_out

client = DAClient(url)
samples = held_out(3)

def ask(s):
    question = s.prompt.tail.removeprefix(" Question: ").removesuffix(" Answer:")
    return client.ask(list(s.prompt.chunks), question, max_tokens=12)

with ThreadPoolExecutor(3) as ex:
    replies = list(ex.map(ask, samples))
for s, r in zip(samples, replies):
    print(f"{r.text!r:32} tags {r.tags}  expected {s.tag} {s.answer!r}  blocks read "
          f"{r.stats['blocks_read']} of {r.stats['blocks_total']}, summed over its "
          f"{r.stats['steps']} steps")

# %% [markdown]
# The server's own numbers: the `da_lab:` series on `/metrics`, beside vLLM's.

# %%
import httpx
lines = httpx.get(url + "/metrics").text.splitlines()
print("\n".join(x for x in lines if x.startswith("da_lab:") and "_bucket" not in x))

# %% [markdown]
# Diagrams 2–4 from the server's trace (a recording: no steering, no new request button; the server's header has no skeleton). `follow=True`: stepping past the last record reads what the server appended since (send more requests and step on). The player opens at the first step the server ran the request followed.

# %%
from collections import Counter
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Highlight, Player
from da_lab_widgets import TraceSource
from da_lab_widgets.metadata_path import MetadataPathDiagram

# The worker's trace writer (a process of its own) appends a moment after the replies end:
# wait until the trace holds the three requests (a minute at most).
asked = {r.request_id for r in replies}
for _ in range(120):
    if TRACE.exists():
        source = TraceSource(TRACE, follow=True)
        if asked <= {q.req for rec in source.records for q in rec.requests if q.hooked}:
            break
    time.sleep(0.5)
else:
    raise RuntimeError(f"the server's trace {TRACE} does not hold the requests {sorted(asked)}; "
                       f"its log: {LOG.read_text()[-2000:]}")
# One request through every diagram: the one the server ran the most steps of.
ran = Counter(q.req for rec in source.records for q in rec.requests if q.hooked)
da_id = ran.most_common(1)[0][0]
print(f"following {da_id}: {ran[da_id]} of the trace's {len(source.records)} steps "
      f"({len(ran)} requests ran)")
highlight = Highlight()
diagrams = [DAHookDiagram(source.header, highlight, req=da_id),
            BlocksDiagram(source.header, highlight, req=da_id),
            MetadataPathDiagram(source.header, highlight)]
player = Player(source, diagrams)
player.goto(next(i for i, rec in enumerate(source.records)
                 if any(q.req == da_id and q.hooked for q in rec.requests)))
player.widget

# %% [markdown]
# **Predict, then run.** Each question's prompt is a scaffold, 12 one-block chunks and a question; the model names one chunk. After its tag, how many blocks does the kernel read per step for the request followed? Type a number, run the cell (the trace's records answer, and the player moves to the request's first step after its tag).

# %%
PREDICT = None          # a number
from da_lab.predict import check, guessed

if guessed(PREDICT, f"the blocks {da_id} reads after its tag"):
    focus = [(i, q) for i, rec in enumerate(source.records) for q in rec.requests
             if q.req == da_id and q.hooked and q.mode == "focus"]
    after = [q.blocks_read for _, q in focus]
    check(PREDICT, after[0] if after else "(no FOCUS step)",
          f"the blocks {da_id} read after its tag",
          f"then {after[-1]} at its last step: its response grew"
          if after and after[-1] != after[0] else "")
    if focus:
        player.goto(focus[0][0])
        rec = source.records[player.i]
        print(f"engine step {rec.step}: " + ", ".join(
            f"{q.req} {q.mode} {q.blocks_read}/{q.blocks_total}" for q in rec.requests))

# %% [markdown]
# Stop the server this notebook started (its engine processes go with it). The player keeps every step the server recorded and now says the run is complete; the temporary folder with the trace and the server's log is removed.

# %%
client.close()
server.send_signal(signal.SIGTERM)
print("server exited with", server.wait(60))
player.source_ended("the server has stopped")      # reads the last records first
shutil.rmtree(WORK, ignore_errors=True)
print(f"{len(source.records)} steps recorded; {WORK} removed")

# %% [markdown]
# ## What you can now explain
# - How a request carries its layout through vLLM's OpenAI server, and where a bad one is refused (HTTP 400, before the engine).
# - Why the per-request stats come from the worker process, and how they reach the client and /metrics.
# - What a server's trace holds that a Lab's does, and what it can't see.
