"""`python -m jobtrail.cli`: the same command line as the `jobtrail` script."""

from jobtrail.cli.main import main

main()
