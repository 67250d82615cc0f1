import sys

from ctgscore.cli import main

sys.exit(main())
