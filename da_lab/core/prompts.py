"""The scaffold texts the lab's models were trained with: a DA prompt written for one of them
starts this way (the training tasks, the server's prompt builder and the lessons share these).

  HEAD    da-tiny-tags' scaffold head (training/data/task.py: records in chunks)
  SYSTEM  SmolLM2-DA's system message: how to tag (training/data/nl_task.py)
  INTRO   the first line of SmolLM2-DA's user message, before the documents
"""

HEAD = ("You are reading a document in chunks. Each chunk has records. "
        "Answer the question using only the relevant chunk.")
SYSTEM = ("You answer questions about the documents C1, C2, ... in the user's message. First "
          "write the documents you need as a tag, <focus C3> or <focus C2,C7>, or <local> when "
          "the question needs no document; then answer in one sentence.")
INTRO = "Here are the documents.\n"
