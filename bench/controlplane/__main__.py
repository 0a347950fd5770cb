"""`python -m bench.controlplane`: bench/controlplane/cli.py."""

from bench.controlplane.cli import main

raise SystemExit(main())
