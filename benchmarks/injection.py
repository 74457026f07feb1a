"""The injection study (ap_gym/injection.py) at full size, for RESULTS.md.

    python benchmarks/injection.py [--share 0.3] [--rules 20] [--iterations 3] [--error-rate 0.05]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.injection import main  # noqa: E402

from benchmarks._bench import emit  # noqa: E402

if __name__ == "__main__":
    emit("injection", "`injection.py`: the measuring apparatus validated by injection", main())
