"""`python -m git_xet` is the `git-xet` command."""

import sys

from .cli import main

sys.exit(main())
