"""The golden: conversation trees, the recorded model, and its zarr store (codec, layout, checks).

Imports only `replay.utils`; never the server or the judge."""
