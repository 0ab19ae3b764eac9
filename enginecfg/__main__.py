import sys

from enginecfg.pipeline.cli import main

sys.exit(main())
