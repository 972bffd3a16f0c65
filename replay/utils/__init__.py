"""The ground floor every package may import: errors, bit comparison, asyncio glue, redaction."""
