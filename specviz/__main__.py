"""`python -m specviz ...`: see specviz/cli.py."""
from .cli import main

raise SystemExit(main())
