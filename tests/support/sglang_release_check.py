"""Judge /generate bodies with one SGLang release's own request class, as its HTTP server does.

Run as a script on SGLang's venv Python with PYTHONPATH set to a release folder made by
scripts/fetch_sglang_releases.sh (`sglang/` of that release's wheel). Reads a JSON list of bodies
on stdin; prints one JSON object: the release's version and, per body, `accepted` (bool),
`error` (the release's ValueError, else null) and `kept` (the body's keys the release knows; its
HTTP server drops the others, as pydantic does for a dataclass body).

What the server does with a body, step by step (http_server.generate_request, 0.5.14-0.5.23):
FastAPI validates the JSON into `GenerateReqInput` (pydantic: unknown keys dropped), then the
TokenizerManager calls `normalize_batch_and_arguments()`, whose ValueErrors become HTTP 400.

Older releases register transformers configs that newer transformers already has ('qwen3_asr');
`exist_ok` lets them import beside the venv's transformers (nothing else is changed).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings


def _tolerate_known_configs() -> None:
    import transformers

    register = transformers.AutoConfig.register

    def lenient(*args, **kwargs):
        kwargs["exist_ok"] = True
        return register(*args, **kwargs)

    transformers.AutoConfig.register = lenient


def main() -> None:
    warnings.filterwarnings("ignore")
    _tolerate_known_configs()
    import sglang
    from pydantic import TypeAdapter
    from sglang.srt.managers.io_struct import GenerateReqInput

    known = {f.name for f in dataclasses.fields(GenerateReqInput)}
    adapter = TypeAdapter(GenerateReqInput)
    verdicts = []
    for body in json.load(sys.stdin):
        kept = sorted(k for k in body if k in known)
        try:
            adapter.validate_python(body).normalize_batch_and_arguments()
            verdicts.append({"accepted": True, "error": None, "kept": kept})
        except ValueError as exc:
            verdicts.append({"accepted": False, "error": str(exc), "kept": kept})
    json.dump({"version": sglang.__version__, "file": sglang.__file__, "verdicts": verdicts},
              sys.stdout)


if __name__ == "__main__":
    main()
