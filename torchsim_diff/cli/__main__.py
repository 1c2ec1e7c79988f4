import sys

from torchsim_diff.cli import main

sys.exit(main())
