"""The entry point of :class:`ap_gym.processes.Child` processes (``python -m ap_gym._child``).

A module of its own: run as ``-m ap_gym.processes``, the module that ``ap_gym``'s own
imports had already loaded ran a second time as ``__main__``, and every child printed
runpy's warning about it.
"""

from __future__ import annotations

import sys

from ap_gym.processes import _main

if __name__ == "__main__":
    _main(sys.argv)
