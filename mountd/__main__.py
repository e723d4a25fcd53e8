"""``python -m mountd``: the same as the ``mountd`` command."""

from mountd.cli import main

raise SystemExit(main())
