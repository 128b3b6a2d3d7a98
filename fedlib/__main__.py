from fedlib.cli import main

raise SystemExit(main())
