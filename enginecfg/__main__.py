import sys

from enginecfg.cli import main

sys.exit(main())
