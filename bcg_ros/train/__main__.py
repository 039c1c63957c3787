"""``python -m bcg_ros.train``: the same as ``bcg-train``."""

from bcg_ros.train.cli import main

raise SystemExit(main())
