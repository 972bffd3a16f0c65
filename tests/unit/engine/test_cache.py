"""The KV pool, radix tree and cache tiers on their own: no model, made-up page contents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replay.engine.faults import Faults
from replay.engine.host_tier import make_host_pool
from replay.engine.kv_pool import KVPool, OutOfPages, PageAllocator
from replay.engine.model import SSMState
from replay.engine.radix_cache import RadixCache
from replay.engine.storage_tier import FileStorage

P = 4  # page size
INTERVAL = 8  # track interval: every second page


def make_cache(pages: int = 16, *, hybrid: bool = False, host_pages: int = 0,
               layout: str = "page_first", policy: str = "write_through",
               storage: FileStorage | None = None) -> RadixCache:
    pool = KVPool(pages, P, layers=2, kv_heads=2, head_dim=3, device="cpu")
    host = make_host_pool(layout, host_pages, pool.page_shape, Faults()) if host_pages else None
    return RadixCache(pool, track_interval=INTERVAL, hybrid=hybrid, host=host, storage=storage,
                      write_policy=policy)


def state(value: float) -> list[SSMState]:
    return [SSMState(conv=torch.full((3, 5), value), h=torch.full((5, 2), -value))]


def put(cache: RadixCache, tokens: list[int], *, checkpoints: bool = False) -> list[int]:
    """Fill pages for `tokens` with recognisable values and insert them; returns the pages."""
    n = len(tokens) // P
    pages = cache.alloc(n)
    rng = np.random.default_rng(tokens[0])
    cache.pool.kv[:, :, pages] = torch.from_numpy(
        rng.standard_normal(cache.pool.kv[:, :, pages].shape, dtype=np.float32))
    ckpts = {end: state(float(end)) for end in range(INTERVAL, n * P + 1, INTERVAL)} if checkpoints else {}
    cache.insert(tokens, pages, n, ckpts)
    return pages


def seq(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_allocator_hands_out_at_most_its_capacity():
    alloc = PageAllocator(4)
    pages = alloc.alloc(4)
    assert sorted(pages) == [0, 1, 2, 3] and alloc.available == 0
    with pytest.raises(OutOfPages):
        alloc.alloc(1)
    alloc.free(pages[:1])
    assert alloc.alloc(1) == pages[:1]


def test_kv_pool_gather_returns_what_write_stored_across_pages():
    pool = KVPool(4, P, layers=2, kv_heads=1, head_dim=2, device="cpu")
    kv = [(torch.arange(12.0).reshape(6, 1, 2) + layer, -torch.arange(12.0).reshape(6, 1, 2))
          for layer in range(2)]
    pool.write([2, 0], 1, kv)  # positions 1..6 over pages 2 and 0
    got = pool.gather([2, 0], 7)
    for (k, v), (gk, gv) in zip(kv, got):
        assert torch.equal(gk[1:], k) and torch.equal(gv[1:], v)


def test_radix_match_finds_the_longest_inserted_prefix_in_whole_pages():
    cache = make_cache()
    put(cache, seq(0, 16))
    match = cache.match(seq(0, 10) + [999] * 6)
    assert match.length == 8  # two whole pages agree
    assert cache.match(seq(0, 16)).length == 12  # the last prompt token is always computed
    assert cache.match([999] * 16).length == 0


def test_radix_insert_shares_the_common_prefix_and_adopts_only_new_pages():
    cache = make_cache()
    put(cache, seq(0, 16))
    pages = cache.alloc(4)
    _, adopted = cache.insert(seq(0, 8) + seq(100, 8), pages, 4, {})
    assert adopted == set(pages[2:])  # the shared first two pages stay the tree's own
    assert cache.match(seq(0, 8) + seq(100, 8) + [1]).length == 16


def test_radix_evicts_least_recently_used_unlocked_leaves_first():
    cache = make_cache(pages=6)
    put(cache, seq(0, 8))
    put(cache, seq(100, 8))
    put(cache, seq(200, 8))
    cache.match(seq(0, 8) + [1])  # touches (and locks) the first sequence
    cache.alloc(2)  # room for 2: the least recently used leaves go
    assert cache.match(seq(100, 8) + [1]).length == 0
    assert cache.match(seq(200, 8) + [1]).length == 8
    assert cache.match(seq(0, 8) + [1]).length == 8


def test_radix_never_evicts_locked_pages():
    cache = make_cache(pages=4)
    put(cache, seq(0, 16))
    match = cache.match(seq(0, 16) + [1])
    assert match.length == 16
    assert not cache.can_fit(match, 1)
    cache.unlock(match.last)
    assert cache.can_fit(cache.match([5] * 5), 4)


def test_hybrid_hit_rounds_down_to_the_last_ssm_checkpoint():
    cache = make_cache(hybrid=True)
    put(cache, seq(0, 20), checkpoints=True)  # checkpoints at 8 and 16
    assert cache.match(seq(0, 20) + [1]).length == 16
    assert cache.match(seq(0, 14) + [7] * 10).length == 8  # agrees on 14 tokens
    assert cache.match(seq(0, 7) + [99] * 10).length == 0
    put(cache, seq(500, 20))  # no checkpoints: nothing usable
    assert cache.match(seq(500, 20) + [1]).length == 0


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_evicted_pages_come_back_from_host_bit_identical(layout):
    cache = make_cache(pages=6, hybrid=True, host_pages=12, layout=layout)
    pages = put(cache, seq(0, 16), checkpoints=True)
    original = cache.pool.read_pages(pages).clone()
    put(cache, seq(100, 8))
    cache.alloc(2)  # the least recently used leaves: the first sequence's last two pages
    match = cache.match(seq(0, 16) + [1])
    cached, ssm, _ = cache.load(match)
    assert (cached.device, cached.host, cached.storage) == (8, 8, 0)
    assert torch.equal(cache.pool.read_pages([n.page for n in match.nodes]), original)
    assert torch.equal(ssm[0].conv, state(16.0)[0].conv) and torch.equal(ssm[0].h, state(16.0)[0].h)


def test_write_back_copies_to_host_only_on_eviction():
    cache = make_cache(pages=4, host_pages=8, policy="write_back")
    put(cache, seq(0, 16))
    assert cache.stats.host_backups == 0
    cache.pool.allocator.free(cache.alloc(2))
    assert cache.stats.host_backups == 2
    cached, _, _ = cache.load(cache.match(seq(0, 16) + [1]))
    assert cached.host == 8


def test_write_through_selective_copies_a_page_once_it_was_hit_twice():
    cache = make_cache(pages=8, host_pages=8, policy="write_through_selective")
    put(cache, seq(0, 8))
    for expected in (0, 2):
        match = cache.match(seq(0, 8) + [1])
        cache.load(match)
        cache.unlock(match.last)
        assert cache.stats.host_backups == expected


def test_pages_the_host_evicts_go_to_storage_and_come_back(tmp_path):
    cache = make_cache(pages=4, hybrid=True, host_pages=4, storage=FileStorage(str(tmp_path)))
    pages = put(cache, seq(0, 16), checkpoints=True)
    original = cache.pool.read_pages(pages).clone()
    put(cache, seq(100, 16))  # replaces the first sequence on the device, then on host
    assert cache.stats.storage_writes == 4 and any(tmp_path.iterdir())
    match = cache.match(seq(0, 16) + [1])
    cached, ssm, _ = cache.load(match)
    assert (cached.device, cached.host, cached.storage) == (0, 0, 16)
    assert torch.equal(cache.pool.read_pages([n.page for n in match.nodes]), original)
    assert torch.equal(ssm[0].h, state(16.0)[0].h)
    cache.reset()
    assert not any(tmp_path.iterdir())


def test_layouts_store_pages_differently_but_read_the_same_bytes():
    shape = (2, 2, P, 2, 3)
    pages = torch.from_numpy(np.random.default_rng(0).standard_normal((3, *shape), dtype=np.float32))
    pools = {layout: make_host_pool(layout, 5, shape, Faults()) for layout in ("layer_first", "page_first")}
    for pool in pools.values():
        pool.save([4, 0, 2], pages)
        assert np.array_equal(pool.load([4, 0, 2]), pages.numpy())
    assert pools["layer_first"].buffer.shape != pools["page_first"].buffer.shape


def test_an_engine_finds_the_pages_another_engine_wrote_to_a_shared_storage_directory(tmp_path):
    writer = make_cache(pages=8, host_pages=8, storage=FileStorage(str(tmp_path), shared=True))
    pages = put(writer, seq(0, 16))
    original = writer.pool.read_pages(pages).clone()
    reader = make_cache(pages=8, host_pages=8, storage=FileStorage(str(tmp_path), shared=True))
    match = reader.match(seq(0, 16) + [1])
    cached, _, _ = reader.load(match)
    assert (cached.device, cached.host, cached.storage) == (0, 0, 16)
    assert torch.equal(reader.pool.read_pages([n.page for n in match.nodes]), original)


def test_a_private_storage_tier_is_written_only_when_the_host_evicts(tmp_path):
    cache = make_cache(pages=8, host_pages=8, storage=FileStorage(str(tmp_path)))
    put(cache, seq(0, 16))
    assert cache.stats.storage_writes == 0 and not any(tmp_path.iterdir())


def test_a_shared_storage_tier_never_deletes_what_another_engine_may_read(tmp_path):
    storage = FileStorage(str(tmp_path), shared=True)
    storage.save("k", np.zeros((2, 2), np.float32), None)
    storage.delete("k")
    assert storage.has("k")


def test_clearing_a_shared_storage_tier_that_another_engine_is_clearing_too_does_not_fail(
        tmp_path, monkeypatch):
    """The router sends /flush_cache to every worker at once: both engines empty the one shared
    directory, so a file one of them listed may be gone by the time it unlinks it."""
    storage = FileStorage(str(tmp_path), shared=True)
    storage.save("k", np.zeros((2, 2), np.float32), None)
    listed = list(tmp_path.glob("*.npy"))
    for path in listed:  # the other engine got there first
        path.unlink()
    monkeypatch.setattr(type(tmp_path), "glob", lambda self, pattern: iter(listed))
    storage.clear()
    assert not storage.has("k")
