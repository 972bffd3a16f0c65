"""SGLang reports the vocabulary's last token id as 0 in `input_token_logprobs` (0.5.17-0.5.23).

    python scripts/sglang_last_id_repro.py http://127.0.0.1:30000 VOCAB_SIZE

Against any SGLang server (stock `python -m sglang.launch_server`, --skip-tokenizer-init or not).
Exit 1 and the positions when the reported prompt ids differ from those sent. Only the standard
library: docs/findings/sglang-ids.md.
"""
import json, sys, urllib.request  # noqa: E401

url, last = sys.argv[1], int(sys.argv[2]) - 1
ids = [11, 12, last, 13, last - 1]
body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True, "logprob_start_len": 0}
req = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
got = [e[1] for e in json.load(urllib.request.urlopen(req))["meta_info"]["input_token_logprobs"]]
print("sent    ", ids, "\nreported", got)
sys.exit(0 if got == ids else f"differ at positions {[i for i, (a, b) in enumerate(zip(ids, got)) if a != b]}")
