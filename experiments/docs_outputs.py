"""Regenerate the command outputs quoted in the docs from the current checkout and install.

    python experiments/docs_outputs.py                # every block
    python experiments/docs_outputs.py sweep-spec     # only these

A quoted block in a doc sits between ``<!-- output: NAME -->`` and ``<!-- end output -->``; this
script rewrites it from ``BLOCKS[NAME]``: a file of the repository quoted verbatim, or a command
run in a scratch folder (``results/docs/``) with its printed output. The figures therefore come
from whatever the default install prices with (the kernel database when the ``kernels-db`` extra
is installed, else the roofline), and the cost model is named above each block. The test suite
checks that every quoted file is the repository's own (``tests/test_docs_outputs.py``).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BLOCKS = {
    "sweep-spec": {"doc": "docs/planning.md", "file": "experiments/sweep_rate.yaml", "lang": "yaml"},
    "capacity-8b": {"doc": "docs/planning.md", "lang": "", "command": (
        "servesim capacity --set scheduler.name=vllm_v1 --slo-ttft-p99 2 --slo-tpot-p99 0.1 --workers 2 "
        "--quiet --out results/docs/cap8b")},
    "plan-8b": {"doc": "docs/planning.md", "lang": "", "keep": r"^(\| 1 \||servesim plan)", "command": (
        "servesim plan --model llama-3.1-8b --rate 48 --gpus h100-sxm --tp 1 --schedulers vllm_v1 --slo-ttft-p99 2 "
        "--slo-tpot-p99 0.1 --workers 2 --quiet --out results/docs/plan8b")},
}

MARK = re.compile(r"(<!-- output: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end output -->)", re.S)


def text_of(name: str) -> str:
    """The block's new contents: the quoted file, or ``$ command`` plus what it printed."""
    b = BLOCKS[name]
    if "file" in b:
        return f"```{b['lang']}\n# {b['file']}\n{(REPO / b['file']).read_text().rstrip()}\n```\n"
    cmd = b["command"]
    run = subprocess.run([sys.executable, "-m", "sim.cli", *cmd.split()[1:]], cwd=REPO, capture_output=True,
                         text=True, check=True)
    lines = [cmd] + run.stdout.rstrip().splitlines()
    if "keep" in b:
        lines = [ln for ln in lines if re.search(b["keep"], ln)]
    return f"```{b['lang']}\n" + "\n".join(lines) + "\n```\n"


def rewrite(doc_text: str, texts: dict[str, str]) -> str:
    """``doc_text`` with each named block's body replaced (other blocks as they are)."""
    return MARK.sub(lambda m: m.group(1) + texts[m["name"]] + m.group(4) if m["name"] in texts else m.group(0),
                    doc_text)


def blocks_in(doc_text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in MARK.finditer(doc_text)}


def main(names: list[str]) -> None:
    for name in names or list(BLOCKS):
        doc = REPO / BLOCKS[name]["doc"]
        print(f"{name}: {BLOCKS[name].get('command') or BLOCKS[name]['file']}", flush=True)
        doc.write_text(rewrite(doc.read_text(), {name: text_of(name)}))


if __name__ == "__main__":
    main(sys.argv[1:])
