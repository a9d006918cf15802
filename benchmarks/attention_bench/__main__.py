"""``python -m attention_bench``: see `attention_bench.cli`."""

import sys

from attention_bench.cli import main

sys.exit(main())
