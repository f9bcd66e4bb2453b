"""bailinghub-mcp: an MCP server for one BailingHub workspace, over the public agent API only."""

__version__ = "0.1.0"
