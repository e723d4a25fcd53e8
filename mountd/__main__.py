"""``python -m mountd``: the same as the ``mountd`` command."""

from mountd._entry import main

raise SystemExit(main())
