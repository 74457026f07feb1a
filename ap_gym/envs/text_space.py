"""A Text space that Gymnasium's async vector env can share between processes.

``gymnasium.vector.AsyncVectorEnv`` (``shared_memory=True``, its default) reads its
observation buffer once, when it is built, and relies on what it read being a *view*:
for a ``Box`` it is a numpy array over the shared buffer, so later writes show through.
For ``Text`` it is a tuple of strings decoded at that moment, so every later observation
of every sub-env reads as the initial fill (``'0000…'``), silently (Gymnasium 1.4).

:class:`TextSpace` registers its own three shared-memory functions: the buffer holds one
byte per character, and the read gives :class:`SharedTexts`, a live sequence that decodes
the buffer whenever it is indexed. The vector env deep-copies it before returning it
(``copy=True``, the default), which yields a plain tuple of strings, the same type the
sync vector env returns.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["SharedTexts", "TextSpace"]


class TextSpace(spaces.Text):
    """``gymnasium.spaces.Text`` with shared-memory support for async vector envs.

    Characters outside the charset cannot be stored: an env must sanitise its text first
    (every :class:`~ap_gym.envs.base.TextEnv` does).
    """

    def _codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Byte -> charset index (len(charset) for none) and index -> byte tables."""
        cached = self.__dict__.get("_code_tables")
        if cached is None:
            chars = self.character_list
            if any(ord(c) > 255 for c in chars) or len(chars) > 255:
                raise ValueError("TextSpace shares at most 255 one-byte characters; use a Latin-1 charset")
            encode = np.full(256, len(chars), dtype=np.int32)
            for i, c in enumerate(chars):
                encode[ord(c)] = i
            decode = np.frombuffer("".join(chars).encode("latin-1"), dtype=np.uint8).copy()
            cached = (encode, decode)
            self.__dict__["_code_tables"] = cached
        return cached

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_code_tables", None)
        return state


class SharedTexts(Sequence[str]):
    """``n`` strings decoded from a shared buffer each time they are read (a live view).

    ``copy.deepcopy`` gives a tuple of the current strings.
    """

    def __init__(self, space: TextSpace, buffer: Any, n: int) -> None:
        self._space = space
        self._buffer = buffer
        self._n = n

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        row = _row_bytes(self._space, self._buffer, index)
        length = int(row[:4].view(np.int32)[0])
        _, decode = self._space._codes()
        return decode[row[4:4 + length]].tobytes().decode("latin-1")

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@create_shared_memory.register(TextSpace)
def _create(space: TextSpace, n: int = 1, ctx: ModuleType = mp) -> Any:
    # int32 words (the buffer's type code Gymnasium's helpers expect); a row is a length
    # word, then max_length bytes of charset indices packed four to a word.
    words_per_row = space.max_length // 4 + 2
    return ctx.Array("i", n * words_per_row)


def _row_bytes(space: TextSpace, buffer: Any, index: int) -> np.ndarray:
    words_per_row = space.max_length // 4 + 2
    data = np.frombuffer(buffer.get_obj(), dtype=np.uint8)
    return data[index * words_per_row * 4: (index + 1) * words_per_row * 4]


@read_from_shared_memory.register(TextSpace)
def _read(space: TextSpace, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(TextSpace)
def _write(space: TextSpace, index: int, values: str, shared_memory: Any) -> None:
    encode, _ = space._codes()
    raw = np.frombuffer(values.encode("latin-1", errors="replace")[: space.max_length], dtype=np.uint8)
    codes = encode[raw]
    if (codes == len(space.character_list)).any():
        bad = sorted({chr(b) for b, c in zip(raw, codes, strict=True) if c == len(space.character_list)})
        raise ValueError(f"text holds characters outside the space's charset: {bad!r}")
    row = _row_bytes(space, shared_memory, index)
    row[:4] = np.frombuffer(np.int32(len(codes)).tobytes(), dtype=np.uint8)
    row[4:4 + len(codes)] = codes.astype(np.uint8)
