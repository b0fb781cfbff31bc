import sys

from policyguard.cli import main

sys.exit(main())
