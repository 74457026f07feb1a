"""The injection study (ap_gym/injection.py) at full size, for RESULTS.md.

    python benchmarks/injection.py [--share 0.3] [--rules 20] [--iterations 3] [--error-rate 0.05]
"""

from ap_gym.injection import main

if __name__ == "__main__":
    main()
