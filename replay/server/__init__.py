"""Talking to a server: the HTTP transport, API adapters, launch profiles and process groups.

Imports only `replay.utils`; never the golden or the judge."""
