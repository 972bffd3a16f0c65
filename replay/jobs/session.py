"""The session layer: a whole record or replay, from a server (URL or launch profile) to a
golden or a report, in one call. Every entry point goes through here: `golden record`,
`replay`, `matrix`, `update`, `demo`, the pytest plugin and the detection matrix, so each of
them takes the same options, speaks every API and launches every profile the same way.

- `replay_golden(...)` returns the report document (docs/report.md); anything that prevents a
  verdict (a GoldenError: unreadable golden, unreachable server, model mismatch...) becomes an
  `error` report, never an exception and never a pass or fail.
- `record_golden(...)` owns the journal (crash-safe `resume`), the determinism check and the
  atomic write; `record_in_memory(...)` records without writing (update, detection).
Progress is reported through a `ProgressBar` callback (label, total) -> context of a tick, so
the library prints nothing itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ContextManager

from replay.utils import aio
from replay.judge.cache_check import server_flag
from replay.server.transport import ClientOptions
from replay.server.apis.base import Api
from replay.server.connection import Connection, connect
from replay.server.target import ServerTarget
from replay.utils.errors import (GoldenError, GoldenFormatError, ModelMismatch, NumericsMismatch,
                                 UsageError)
from replay.golden.fingerprint import model_identity, redact_url
from replay.golden.model import Golden
from replay.golden.meaning import check_meaning
from replay.golden.store import content_checksum, open_golden, write_golden
from replay.run.journal import Journal, journal_path
from replay.run.recorder import RecordOptions, record, server_facts
from replay.run.record_stream import Recorded, RequestSink, record_streamed
from replay.golden.stream import GoldenWriter
from replay.utils.redact import argv_secrets, scrub, scrubbed_errors, url_secrets
from replay.run.replayer import ReplayOptions, replay
from replay.report.document import RunSetup, report_dict
from replay.golden.scenario import Plan
from replay.golden.shard import parse_shard, shard_golden

Tick = Callable[[str, bool], None]  # (request id, whether it failed) for each finished request
ProgressBar = Callable[[str, int], ContextManager[Tick]]  # (label, total) -> context of a tick
Notify = Callable[[str], None]
DEBUG_ENV = "GOLDEN_DEBUG"  # the CLI's --debug: an unexpected exception keeps its traceback


def load_golden(golden: Path | Golden, shard: str | None = None) -> Golden:
    """The golden to replay, its meaning checked (replay/golden/meaning.py), then sharded; its
    `checksum` names the whole golden's content (a shard keeps it). One on disk is checked
    whole but read request by request as the replay goes (`open_golden`), never held."""
    loaded = open_golden(golden) if isinstance(golden, Path) else golden
    check_meaning(loaded, str(golden) if isinstance(golden, Path) else "the golden")
    if loaded.checksum is None:
        loaded = replace(loaded, checksum=content_checksum(loaded))
    return shard_golden(loaded, shard) if shard else loaded


def shard_of(golden: Golden) -> str | None:
    """"i/n" for a sharded golden (sharded here or by the caller, e.g. the matrix), else None."""
    meta = golden.meta.get("shard")
    return f"{meta['index']}/{meta['count']}" if isinstance(meta, dict) else None


def run_setup(target: "ServerTarget", options: ReplayOptions, shard: str | None,
              checksum: str | None = None, client: ClientOptions | None = None) -> RunSetup:
    """What a replay report records of what was asked (docs/report.md); a new run id."""
    return RunSetup(golden_sha256=checksum, shard=str(parse_shard(shard)) if shard else None,
                    repeat=options.repeat, expect_cache=options.expect_cache,
                    require_tier=options.require_tier, target=target.setup_label,
                    concurrency=client.concurrency if client else None,
                    schedule=str(options.schedule))


@contextlib.contextmanager
def _progress(bar: ProgressBar | None, label: str, total: int) -> Iterator[Tick | None]:
    if bar is None:
        yield None
        return
    with bar(label, total) as tick:
        yield tick


# ---------------------------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------------------------


def replay_golden(golden: Path | Golden, target: ServerTarget,
                  options: ReplayOptions = ReplayOptions(),
                  client: ClientOptions = ClientOptions(), *, api: str = "auto",
                  shard: str | None = None, progress: ProgressBar | None = None,
                  name: str | None = None, control: ServerTarget | None = None,
                  debug: bool = False) -> dict[str, Any]:
    """Replay a golden (a path or one in memory) against the target; the report document.
    With a `control` target, the same replay against it too, after the target's, and each
    failure attributed (replay/report/control.py); a control that cannot be replayed makes the
    report an error that still holds the target's requests. `debug`: an unexpected exception
    propagates instead of becoming an error report."""
    name = name or (str(golden) if isinstance(golden, Path) else "in-memory")
    server = target.label
    secrets = known_secrets(client, target) + (known_secrets(client, control) if control else ())
    setup = run_setup(target, options, shard, client=client)
    try:
        loaded = load_golden(golden, shard)
        setup = replace(setup, golden_sha256=loaded.checksum, shard=shard_of(loaded))
        served: list[str] = []  # the URL once the server is up: error reports name it
        try:
            result = _replay_on(target, loaded, name, options, client, api, progress, served)
        finally:
            server = served[0] if served else server
        compared_nothing(result)
        if control is not None:
            problem = _attribute_to_control(result, control, loaded, name, options, client,
                                            api, progress)
            if problem:
                return report_dict(result, golden=name, server=server,
                                   policy=str(options.policy), setup=setup,
                                   error=scrub(problem, secrets))
    except GoldenError as exc:
        doc = report_dict(None, golden=name, server=server, policy=str(options.policy),
                          error=scrub(str(exc), secrets), setup=setup)
        if isinstance(exc, NumericsMismatch) and exc.numerics is not None:
            doc["numerics"] = exc.numerics  # which fields differed, as documented
        return doc
    except Exception as exc:  # a bug or an input nobody foresaw: an error, never a verdict
        if debug:
            raise
        return report_dict(None, golden=name, server=server, policy=str(options.policy),
                           error=scrub(unexpected(exc), secrets), setup=setup)
    return report_dict(result, golden=name, server=server, policy=str(options.policy),
                       setup=setup)


def _replay_on(target: ServerTarget, golden: Golden, name: str, options: ReplayOptions,
               client: ClientOptions, api: str, progress: ProgressBar | None,
               served: list[str], label: str = "replay") -> Any:
    """One replay of `golden` against `target` (launched and stopped around it); the server's
    redacted URL goes into `served` as soon as it is known."""
    with target.serving(client.api_key) as url:
        served.append(redact_url(url))
        total = len(golden.requests) * options.repeat
        with _progress(progress, f"{label} {Path(name).name}", total) as tick:
            result = aio.run(_replay(url, golden, name, options, client, api, tick))
        routed(result, golden, url)
    return result


def _attribute_to_control(result: Any, control: ServerTarget, golden: Golden, name: str,
                          options: ReplayOptions, client: ClientOptions, api: str,
                          progress: ProgressBar | None) -> str | None:
    """Replay against the control and attribute the target's failures; the error line when the
    control could not be replayed (then nothing is attributed)."""
    from replay.report.control import attribute

    try:
        theirs = _replay_on(control, golden, name, options, client, api, progress, [],
                            label="control")
    except GoldenError as exc:
        return f"the control replay ({control.setup_label}) failed, so no failure is attributed: {exc}"
    attribute(result, theirs, control.setup_label)
    return None


def routed(result: Any, golden: Golden, url: str) -> None:
    """Through a launched topology (workers behind SGLang's router): who served each request,
    and which misses the routing caused (replay/jobs/routing.py)."""
    from replay.server.topology import RoutedURL

    if isinstance(url, RoutedURL):
        from replay.jobs.routing import apply_routing

        apply_routing(result, golden, url.topology)


def unexpected(exc: BaseException) -> str:
    """The one line for an exception that is not a GoldenError."""
    text = " ".join(str(exc).split())[:300]
    return f"unexpected {type(exc).__name__}: {text} (set {DEBUG_ENV}=1 for the traceback)"


def compared_nothing(result: Any) -> None:
    """A replay that compared no token proves nothing: an error, never a pass."""
    if sum(o.diff.compared for o in result.outcomes) == 0:
        raise GoldenFormatError("the replay compared no tokens (an empty golden proves nothing)")


def known_secrets(client: ClientOptions, target: "ServerTarget") -> tuple[str, ...]:
    """The secret values this run knows: the API keys, the server URL's password and the values
    of secret-named `--server-arg`s."""
    return tuple(s for s in (client.api_key, client.admin_api_key, *url_secrets(target.url or ""),
                             *argv_secrets(target.extra_args)) if s)


async def _replay(url: str, golden: Golden, name: str, options: ReplayOptions,
                  client: ClientOptions, api: str, tick: Tick | None) -> Any:
    async with connect(url, client, api) as conn:
        return await replay(conn, golden, name, options, progress=tick)


# ---------------------------------------------------------------------------------------------
# Record
# ---------------------------------------------------------------------------------------------


class NonDeterministicRecording(GoldenError):
    """Repeated recordings of the reference differ: nothing was written."""


class ModelChanged(ModelMismatch):
    """The server's model changed while the reference was being recorded: nothing was written."""


def reference_warnings(server_info: dict[str, Any], api: Api) -> list[str]:
    """What is suspicious about a server used to record a reference (through `api`, whose own
    requests may turn reuse off: its `bypasses_cache` trait). The radix-cache warning comes from
    what the server reports: only when it says its cache is on (`disable_radix_cache` false); a
    server that does not say (an OpenAI-compatible one) gets no warning the tool cannot know."""
    if api.bypasses_cache or "disable_radix_cache" not in server_info:
        return []
    if not server_flag(server_info, "disable_radix_cache"):
        return ["the server has its radix cache on; a reference should be recorded with the "
                "cache disabled (a reference profile such as sglang-reference)"]
    return []


def record_golden(plan: Plan, out: Path, target: ServerTarget,
                  options: RecordOptions = RecordOptions(),
                  client: ClientOptions = ClientOptions(), *, api: str = "auto",
                  force: bool = False, resume: bool = False,
                  progress: ProgressBar | None = None, notify: Notify | None = None,
                  chunk_rows: int | None = None) -> Recorded:
    """Record `plan` into the golden `out`, atomically. Completed requests are journalled beside
    `out` as they arrive, so an interrupted run continues with `resume`; the journal goes once
    the golden is written (or the reference proved non-deterministic). One recording (the
    default) is written as it goes (replay.golden.stream), so its memory does not grow with the
    golden; a determinism check (several recordings, compared whole) is recorded in memory,
    then written. `chunk_rows` (tests): a golden larger than that many output positions is
    written in chunks of that many (the writer's own sizes otherwise)."""
    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass --force to overwrite")
    journal = journal_path(out)
    try:
        if options.check_determinism > 1:
            golden = record_in_memory(plan, target, options, client, api=api, progress=progress,
                                      notify=notify, journal_at=journal, resume=resume)
            write_golden(golden, out, force=force)
            recorded = recorded_summary(golden)
        else:
            sizes = {} if chunk_rows is None else {"chunk_rows": chunk_rows,
                                                    "whole_rows": chunk_rows}
            with GoldenWriter(out, plan.prefixes, plan.spec.top_k, force=force,
                              **sizes) as writer:
                recorded = _recording(plan, target, options, client, api, progress, notify,
                                      journal, resume, writer)
                writer.finish(len(plan.requests), recorded.scenario, recorded.sampling,
                              recorded.meta)
    except (NonDeterministicRecording, ModelChanged):
        journal.unlink(missing_ok=True)
        raise
    journal.unlink(missing_ok=True)
    return recorded


def recorded_summary(golden: Golden) -> Recorded:
    """What `record_golden` tells of a golden recorded in memory."""
    return Recorded(requests=len(golden.requests),
                    output_tokens=sum(len(r.output_ids) for r in golden.requests),
                    hits={int(r.cached_tokens) for r in golden.requests}, meta=golden.meta,
                    scenario=golden.scenario, sampling=golden.sampling)


def record_in_memory(plan: Plan, target: ServerTarget, options: RecordOptions = RecordOptions(),
                     client: ClientOptions = ClientOptions(), *, api: str = "auto",
                     progress: ProgressBar | None = None, notify: Notify | None = None,
                     journal_at: Path | None = None, resume: bool = False) -> Golden:
    """Record `plan` against the target and return the golden without writing it."""
    return _recording(plan, target, options, client, api, progress, notify, journal_at, resume)


def _recording(plan: Plan, target: ServerTarget, options: RecordOptions, client: ClientOptions,
               api: str, progress: ProgressBar | None, notify: Notify | None,
               journal_at: Path | None, resume: bool, sink: RequestSink | None = None) -> Any:
    """Serve the target and record `plan` from it: the Golden, or with a `sink` (each request
    handed to it as it completes) the `Recorded` summary."""
    with scrubbed_errors(known_secrets(client, target)), target.serving(client.api_key) as url:
        total = len(plan.requests) * options.check_determinism
        with _progress(progress, f"record {plan.spec.name}", total) as tick:
            return aio.run(_record(url, plan, options, client, api, tick, notify, journal_at,
                                   resume, sink))


async def _record(url: str, plan: Plan, options: RecordOptions, client: ClientOptions, api: str,
                  tick: Tick | None, notify: Notify | None, journal_at: Path | None,
                  resume: bool, sink: RequestSink | None) -> Any:
    async with connect(url, client, api, reference=True) as conn:
        return await record_connected(conn, plan, options, tick, notify, journal_at, resume,
                                      sink=sink)


async def record_connected(conn: Connection, plan: Plan, options: RecordOptions,
                           tick: Tick | None = None, notify: Notify | None = None,
                           journal_at: Path | None = None, resume: bool = False, *,
                           sink: RequestSink | None = None) -> Any:
    """Record over an open connection (the journal, when asked for, around it): the Golden,
    or with a `sink` the `Recorded` summary of what was handed to it."""
    from replay.run.recorder import CACHE_OFF, NonDeterministicReference

    facts = await server_facts(conn)
    warnings = reference_warnings(facts.server_info, conn.api) \
        if options.reference == CACHE_OFF else []
    for warning in warnings:
        if notify:
            notify(f"warning: {warning}")
    journal, already = None, {}
    if journal_at is not None:
        header = {"scenario": plan.spec.to_dict(), "model": facts.model}
        journal, already = Journal.start(journal_at, header, resume)
    try:
        if sink is not None:
            result: Any = await record_streamed(conn, plan, options, sink, tick, facts=facts,
                                                journal=journal, already=already)
        else:
            result = await record(conn, plan, options, tick, facts=facts, journal=journal,
                                  already=already)
        misreported = result.meta.get("server_misreported_prompt_ids")
        if misreported and notify:
            notify(f"warning: the server reported prompt token ids other than sent in "
                   f"{misreported} request(s) (its bug: docs/findings/sglang-ids.md); the "
                   "logprobs are the sent tokens' and were recorded")
        after = model_identity(await conn.model_info(), facts.server_info).label
        if after != facts.model:
            raise ModelChanged(f"the server's model changed during the recording ({facts.model!r} "
                               f"at the start, {after!r} at the end): nothing was written")
        return result
    except NonDeterministicReference as exc:
        raise NonDeterministicRecording(f"the reference is not deterministic: {exc}") from None
    finally:
        if journal:
            journal.close()
