from trainmon.cli import main

raise SystemExit(main())
