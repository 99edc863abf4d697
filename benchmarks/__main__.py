"""``python -m benchmarks``: run the benchmark suite."""

from benchmarks.cli import main

raise SystemExit(main())
