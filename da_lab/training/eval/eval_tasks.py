"""The two tasks `da-lab eval` knows, behind one small interface, and the ablations' choices.

    records   da_lab.training.data.task: 12 chunks of key -> value records (da-tiny-tags); the
    answer
              is right when the text after the tag equals the expected one exactly
    nl        da_lab.training.data.nl_gen: prose documents of many domains, a chat prompt
              (smollm2-da); the answer is right when the reply's first sentence, normalised
              (lower case, no punctuation, articles or tags), names exactly the expected values,
              in order, among every value of the asked attribute in the prompt
              (`nl_task.answer_correct`); gen["split"] picks the training domains (default) or
              the held-out ones
    prompts   a prompts file (eval_prompts: the user's own documents and questions), the nl
              task's prompt and answer rule, candidates = the file's answer + wrong values

The ablations need, per prompt, the chunks that hold the answer (`needed`: the chunks of the
right tag) and a wrong tag: each needed chunk replaced by the next chunk after it (counting
round) that holds none of the answer, so the choice is deterministic and never the answer's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from da_lab.core.tags import Directive, Mode, tag_text

NL_MODELS = ("smollm2", "smollm2-da", "gemma3", "gemma3-da")


class RecordsTask:
    name = "records"
    base_model = None                    # no pretrained base: nothing to compare with
    max_tokens = 24
    answer_rule = "exact: the text after the first tag equals the expected answer"

    def __init__(self) -> None:
        from da_lab.training.data import task as T

        self.T = T
        self.default_seed = T.EVAL_SEED

    def samples(self, n: int, seed: int, gen: dict) -> list:
        if gen:
            raise ValueError("--context / --chunks apply to the nl task (smollm2-da) only")
        return self.T.held_out(n, seed)

    def correct(self, answer: str, s) -> bool:
        return answer == s.answer

    def expected_values(self, s) -> list:
        return [list(k) for k in s.keys]

    def chance(self, s) -> float | None:
        return None

    def plain_prompt(self, s) -> list[int] | None:
        return None


class NLTask(RecordsTask):
    name = "nl"
    max_tokens = 64
    answer_rule = ("normalised exact match (da_lab.training.data.nl_task.answer_correct): the "
                   "reply's first sentence, lower-cased, without tags, punctuation or articles, "
                   "names exactly the expected values, in order, among every value of the asked "
                   "attribute in the prompt; a value word inside a phrase restated from the "
                   "question (the entity's name) is not a mention (since 2026-12-07)")

    def __init__(self, model=None) -> None:
        from da_lab.training.data import nl_gen as G
        from da_lab.training.data import nl_task as N

        self.N, self.G = N, G
        self.default_seed = G.EVAL_SEED
        self.model = model
        self._tok = None

    @property
    def tok(self):
        """The evaluated model's tokenizer and chat template (SmolLM2's when no model is named):
        prompts are built with the tokens the model reads."""
        if self._tok is None:
            if self.model is None:
                self._tok = self.N.tokens()
            else:
                from da_lab.models.tiny import model_path

                self._tok = self.N.tokens(str(model_path(self.model)))
        return self._tok

    @property
    def base_model(self) -> str:
        """The base model of the evaluated one (its plain-prompt run): Gemma 3's for a Gemma 3
        folder, else SmolLM2's."""
        try:
            cfg = json.loads((Path(self.tok.folder) / "config.json").read_text())
        except (OSError, ValueError, AttributeError):
            cfg = {}
        return "gemma3" if cfg.get("model_type") == "gemma3_text" else "smollm2"

    def samples(self, n: int, seed: int, gen: dict) -> list:
        gen = dict(gen)
        return self.G.held_out(n, seed, split=gen.pop("split", "train"), tok=self.tok, **gen)

    def correct(self, answer: str, s) -> bool:
        return self.N.answer_correct(answer, s)

    def expected_values(self, s) -> list:
        return list(s.keys)

    def chance(self, s) -> float | None:
        """A uniform guess of len(keys) distinct values among the prompt's candidates, in
        order, being right (what a wrong chunk leaves the model: the question's wording)."""
        m, k = len(s.meta["candidates"]), len(s.keys)
        p = 1.0
        for j in range(k):
            p /= max(1, m - j)
        return p

    def plain_prompt(self, s) -> list[int]:
        return self.N.plain_prompt(s, self.tok)


class PromptsTask(NLTask):
    name = "prompts"
    answer_rule = ("normalised exact match (da_lab.training.data.nl_task.answer_correct): the "
                   "reply's first sentence, lower-cased, without tags, punctuation or articles, "
                   "names exactly the file's answer values, in order, among answer + wrong; a "
                   "value word inside a phrase restated from the question is not a mention "
                   "(since 2026-12-07)")

    def __init__(self, path, model=None) -> None:
        super().__init__(model)
        self.path = path
        self.default_seed = None

    def samples(self, n: int | None, seed, gen: dict) -> list:
        from da_lab.training.eval import eval_prompts as P

        if gen:
            raise ValueError("--prompts takes its documents from the file: no --context, "
                             "--chunks or --domains")
        return P.samples(self.path, n, self.tok)


def task_for(task: str, model, prompts=None) -> RecordsTask:
    """The task by name, or ("auto") by model: the SmolLM2 and Gemma 3 names and any folder
    whose tokenizer has a chat template get the nl task, everything else the records task; a
    prompts file gets the prompts task (a chat model's). The nl tasks build their prompts
    with the model's own tokenizer."""
    if prompts is not None:
        if task == "records" or task_for(task, model).name != "nl":
            raise ValueError("--prompts needs a chat model that writes its tags (smollm2-da)")
        return PromptsTask(prompts, model)
    if task == "auto":
        name = str(model or "")
        chat = False
        if name and name not in NL_MODELS:
            cfg = Path(name) / "tokenizer_config.json"
            try:
                chat = "chat_template" in json.loads(cfg.read_text())
            except (OSError, ValueError):
                chat = False
        task = "nl" if name in NL_MODELS or chat else "records"
    if task == "nl":
        return NLTask(model)
    if task == "records":
        return RecordsTask()
    raise ValueError(f"unknown task {task!r} (records, nl or auto)")


def needed(s) -> tuple[int, ...]:
    """The chunks that hold the answer (none for a question that needs no document)."""
    return s.directive.chunks if s.directive.mode is Mode.FOCUS else ()


def wrong_chunks(s) -> tuple[int, ...] | None:
    """For each needed chunk, the next chunk after it (round) holding none of the answer and
    not picked yet; None when there is no such choice (no chunk needed, or too few chunks)."""
    need = needed(s)
    n = s.prompt.layout.n_chunks
    avoid = set(need) | set(s.meta.get("holders", ()))
    picked: list[int] = []
    for c in need:
        for step in range(1, n):
            w = (c - 1 + step) % n + 1
            if w not in avoid and w not in picked:
                picked.append(w)
                break
        else:
            return None
    return tuple(picked) or None


def wrong_tag(s) -> str | None:
    chunks = wrong_chunks(s)
    # In the prompt's own dialect: a paper-trained reply forced a card tag is off its format.
    return None if chunks is None else tag_text(Directive(Mode.FOCUS, chunks=chunks),
                                                s.meta.get("protocol", "card"))


def hidden_layout(s) -> dict | None:
    """The prompt's layout with its needed chunks in `hidden`: FOCUS on them keeps the scaffold,
    the question and the response, but not the chunks (core/mask.py)."""
    need = needed(s)
    if not need:
        return None
    return dataclasses.replace(s.prompt.layout, hidden=tuple(need)).to_dict()
