from bailinghub_mcp.cli import main

raise SystemExit(main())
