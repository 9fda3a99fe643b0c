import sys

from kcl_mp.cli import main

sys.exit(main())
