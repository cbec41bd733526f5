"""Stand-in for the pip bootstrap script that ansible-test downloads.

ansible-test fetches ``get-pip-<version>.py`` from a CI file host that these machines cannot
reach, and uses a copy cached under ``~/.ansible/test/cache`` when one exists. This script does
the same job with what every CPython has: ensurepip, then pip upgrades itself to the version
ansible-test asked for and installs the packages it was given.
"""

import subprocess
import sys

DROPPED = {"--no-setuptools", "--no-wheel"}

args = [arg for arg in sys.argv[1:] if arg not in DROPPED]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
