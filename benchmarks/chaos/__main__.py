"""``python -m benchmarks.chaos``: run the chaos suite."""

from benchmarks.chaos.cli import main

raise SystemExit(main())
