"""`python -m lowbit` runs the `lowbit` command."""

import sys

from lowbit.cli import main

sys.exit(main())
