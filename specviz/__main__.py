"""`python -m specviz ...`: see specviz/cli/."""
from .cli import main

raise SystemExit(main())
