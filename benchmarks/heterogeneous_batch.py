"""A heterogeneous batch of heavy tops under error control, every setting on the command line (the
benchmark itself, and what it measures: ``jaxrot.experiments.bench_heterogeneous``; with its
defaults it is ``jaxrot bench heterogeneous``).

    python benchmarks/heterogeneous_batch.py [--bodies 1000] [--T 10] [--tols 1e-8,1e-12] [--reps 3] [--out figures]
    python benchmarks/heterogeneous_batch.py --bodies 100000 --vs-xla-only   # the GPU target's pair alone
    python benchmarks/heterogeneous_batch.py --quick   # a smoke test: 16 bodies, T = 0.5, one tolerance, Tsit5 only
"""

from jaxrot.experiments.bench_heterogeneous import cli

if __name__ == "__main__":
    cli()
