"""The LLM access layer against real local HTTP servers, through the real SDKs (no mocks)."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import llm_fakes
import pytest
from llm_fakes import FAKE_KEY, FakeLLMServer, Reply, code_reply

from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.options import Settings
from pytest_maxcode.llm import (
    DEFAULT_ANTHROPIC_MODEL,
    LLMRequest,
    LLMService,
    LLMUnavailable,
    Message,
    Prices,
    make_service,
    parse_llm_spec,
)
from pytest_maxcode.llm.anthropic_client import AnthropicClient
from pytest_maxcode.llm.cassette import ReplayClient, read_cassette
from pytest_maxcode.llm.openai_client import OpenAIClient
from pytest_maxcode.store.sqlite import Store

# the fixtures (a conftest.py could instead say: pytest_plugins = ["llm_fakes"])
fake_anthropic = llm_fakes.fake_anthropic
fake_openai = llm_fakes.fake_openai

SYSTEM = "You write fast CUDA kernels. The reference is:\n" + "def f(x): return x * 2\n" * 20
MODEL = "claude-sonnet-4-6"


def req(text: str = "make it faster", **kw) -> LLMRequest:
    return LLMRequest(system=SYSTEM, messages=(Message("user", text),), **kw)


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE",
                "ANTHROPIC_CONFIG_DIR", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", "/nonexistent-maxcode-test")


def anthropic(fake: FakeLLMServer, model: str = MODEL, **kw) -> AnthropicClient:
    kw.setdefault("api_key", FAKE_KEY)
    kw.setdefault("timeout", 5.0)
    return AnthropicClient(model, base_url=fake.url, **kw)


def service(client, tmp_path: Path | None = None, **kw) -> LLMService:
    store = tmp_path / "maxcode.db" if tmp_path is not None else None
    return LLMService(client, store_path=store, prices=kw.pop("prices", Prices()), **kw)


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg and msg.strip() == msg and msg
    assert "Traceback" not in msg
    return msg


# -- request shape and reply ---------------------------------------------------------------


def test_anthropic_request_shape(fake_anthropic):
    fake_anthropic.script("plain reply")
    r = anthropic(fake_anthropic).complete(req(max_tokens=1234))
    assert r.text == "plain reply" and r.source == "api"
    body = fake_anthropic.last
    assert body["model"] == MODEL
    assert body["max_tokens"] == 1234
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{"role": "user", "content": "make it faster"}]
    assert "thinking" not in body
    assert "temperature" not in body  # 1.0 is the API's default; this SDK has no temperature parameter
    assert fake_anthropic.headers[-1]["authorization"] == f"Bearer {FAKE_KEY}"  # this SDK sends the key as a bearer token


def test_anthropic_thinking_param_and_thinking_blocks_ignored(fake_anthropic):
    fake_anthropic.script(Reply("the answer", thinking="secret musings"))
    r = anthropic(fake_anthropic).complete(req(max_tokens=2000, thinking_tokens=4000))
    body = fake_anthropic.last
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert body["max_tokens"] > 4000
    assert r.text == "the answer"
    assert "secret musings" not in r.text
    assert r.extra["thinking_chars"] == len("secret musings")


def test_temperature_other_than_one_is_sent(fake_anthropic):
    fake_anthropic.script("x")
    anthropic(fake_anthropic).complete(req(temperature=0.3))
    assert fake_anthropic.last["temperature"] == 0.3


def test_temperature_refused_by_the_model_is_dropped(fake_anthropic):
    fake_anthropic.fail(400, message="temperature: not supported for this model", retry_after_ms=None)
    fake_anthropic.script("ok", "ok again")
    client = anthropic(fake_anthropic)
    assert client.complete(req(temperature=0.3)).text == "ok"
    assert [("temperature" in b) for b in fake_anthropic.requests] == [True, False]
    assert client.complete(req(temperature=0.3)).text == "ok again"
    assert "temperature" not in fake_anthropic.last


def test_code_reply_helper_has_a_fenced_block():
    text = code_reply("__global__ void k() {}", lang="cuda")
    assert "```cuda\n__global__ void k() {}\n```" in text


# -- usage and cost ------------------------------------------------------------------------


def test_usage_and_cost_add_up(fake_anthropic, tmp_path):
    fake_anthropic.model = "claude-sonnet-4-5-20250929"  # a priced, non-scripted model name
    fake_anthropic.respond_with(lambda body: "reply to " + body["messages"][0]["content"])
    svc = service(anthropic(fake_anthropic), tmp_path)
    responses = [svc.complete(req(f"attempt {i}"), run_id=None, target_id="t") for i in range(3)]
    first, second = responses[0], responses[1]
    assert first.cache_write_tokens > 0 and first.cache_read_tokens == 0  # the prefix was cached...
    assert second.cache_read_tokens == first.cache_write_tokens and second.cache_write_tokens == 0  # ...and read
    for r in responses:
        expected = (r.input_tokens * 3 + r.output_tokens * 15 + r.cache_write_tokens * 3.75
                    + r.cache_read_tokens * 0.3) / 1e6
        assert r.cost_usd == pytest.approx(expected)
        assert r.cost_usd > 0 and not r.scripted and r.call_id is not None
    t = svc.totals()
    assert t["calls"] == t["api_calls"] == 3
    assert t["tokens"] == sum(r.tokens for r in responses)
    assert t["cost_usd"] == pytest.approx(sum(r.cost_usd for r in responses))
    assert not svc.unpriced_models
    svc.close()
    with Store(tmp_path / "maxcode.db") as store:
        db = store.llm_totals(target_id="t")
        assert db["calls"] == 3 and db["api_calls"] == 3
        assert db["tokens"] == t["tokens"]
        assert db["cost_usd"] == pytest.approx(t["cost_usd"])


def test_scripted_models_are_unpriced_but_flagged(fake_anthropic):
    fake_anthropic.respond_with("ok")
    svc = service(anthropic(fake_anthropic))
    r = svc.complete(req())
    assert r.scripted and r.model.startswith("scripted")
    assert r.cost_usd == 0.0
    assert svc.unpriced_models == {r.model}
    # an explicit price puts a number on it
    svc2 = service(anthropic(fake_anthropic), prices=Prices({r.model: {"input": 1, "output": 2}}))
    assert svc2.complete(req("other")).cost_usd > 0 and not svc2.unpriced_models


def test_price_table():
    p = Prices()
    assert p.price("claude-sonnet-4-5-20250929").input == 3
    assert p.price("claude-opus-4-1-20250805").output == 75
    assert p.price("claude-opus-4-5").input == 5
    assert p.price("claude-haiku-4-5").output == 5
    assert p.price("claude-sonnet-4-5").cache_write == pytest.approx(3.75)
    assert p.price("claude-sonnet-4-5").cache_read == pytest.approx(0.3)
    assert p.price("gpt-4o-mini-2024-07-18").input == 0.15  # the longest prefix wins over gpt-4o
    assert p.price("qwen2.5-coder:32b") is None and p.price("scripted-claude") is None
    q = Prices({"qwen2.5-coder": {"input": 0.1, "output": 0.2}})
    assert q.price("qwen2.5-coder:32b").output == 0.2
    with pytest.raises(MaxcodeError) as e:
        Prices({"m": {"input": "cheap", "output": 1}})
    one_line(e.value)


# -- retries and failures ------------------------------------------------------------------


def test_retries_after_429_and_500_succeed(fake_anthropic):
    fake_anthropic.fail(429).fail(500)
    fake_anthropic.script("finally")
    r = anthropic(fake_anthropic, max_retries=2).complete(req())
    assert r.text == "finally"
    assert len(fake_anthropic.requests) == 3


def test_overloaded_529_is_retried(fake_anthropic):
    fake_anthropic.fail(529)
    fake_anthropic.script("ok")
    assert anthropic(fake_anthropic, max_retries=1).complete(req()).text == "ok"
    assert len(fake_anthropic.requests) == 2


@pytest.mark.parametrize("status", [429, 500])
def test_exhausted_retries_are_llm_unavailable(fake_anthropic, status):
    fake_anthropic.fail(status, times=3)
    with pytest.raises(LLMUnavailable) as e:
        anthropic(fake_anthropic, max_retries=2).complete(req())
    msg = one_line(e.value)
    assert len(fake_anthropic.requests) == 3
    assert "--maxcode-llm-retries" in msg and str(status) in msg
    assert isinstance(e.value, MaxcodeError)


def test_timeout_names_the_timeout_option(fake_anthropic):
    fake_anthropic.delay(1.0, times=1)
    fake_anthropic.script("too late")
    t0 = time.perf_counter()
    with pytest.raises(LLMUnavailable) as e:
        anthropic(fake_anthropic, timeout=0.2, max_retries=0).complete(req())
    assert time.perf_counter() - t0 < 0.9
    msg = one_line(e.value)
    assert "--maxcode-llm-timeout" in msg and "0.2 s" in msg and fake_anthropic.url in msg


def test_missing_key_is_one_line_before_any_request(fake_anthropic, tmp_path):
    with pytest.raises(MaxcodeError) as e:
        AnthropicClient(MODEL, base_url=fake_anthropic.url)
    msg = one_line(e.value)
    assert "ANTHROPIC_API_KEY" in msg and "--maxcode-llm" in msg
    with pytest.raises(MaxcodeError):
        make_service(Settings(llm="anthropic"), tmp_path, None)
    assert fake_anthropic.requests == []


def test_rejected_key_is_one_line_and_never_printed(fake_anthropic):
    fake_anthropic.api_key = "the-right-key"
    secret = "sk-ant-wrong-secret-abcdef123456"
    with pytest.raises(MaxcodeError) as e:
        anthropic(fake_anthropic, api_key=secret).complete(req())
    msg = one_line(e.value)
    assert not isinstance(e.value, LLMUnavailable)
    assert "ANTHROPIC_API_KEY" in msg and "401" in msg
    assert secret not in msg and secret[-8:] not in msg
    assert secret not in repr(e.value.__cause__) and e.value.__suppress_context__


def test_unknown_model_is_one_line(fake_anthropic):
    fake_anthropic.known_models = {MODEL}
    with pytest.raises(MaxcodeError) as e:
        anthropic(fake_anthropic, model="claude-nonesuch").complete(req())
    msg = one_line(e.value)
    assert "claude-nonesuch" in msg and "--maxcode-llm=anthropic:MODEL" in msg
    assert len(fake_anthropic.requests) == 1  # 404 is not retried


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_server_is_one_line():
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(MaxcodeError) as e:
        AnthropicClient(MODEL, api_key=FAKE_KEY, base_url=url, max_retries=0, timeout=2).complete(req())
    msg = one_line(e.value)
    assert url in msg and "--maxcode-llm" in msg
    assert not isinstance(e.value, LLMUnavailable)


# -- the service: cache, record/replay, concurrency ------------------------------------------------


def test_response_cache_hit_makes_no_request(fake_anthropic, tmp_path):
    fake_anthropic.respond_with(lambda body: f"reply {len(fake_anthropic.requests)}")
    svc = service(anthropic(fake_anthropic), tmp_path)
    a = svc.complete(req(), run_id=None, target_id="t")
    b = svc.complete(req(), run_id=None, target_id="t")
    assert len(fake_anthropic.requests) == 1
    assert (a.source, b.source) == ("api", "cache")
    assert b.text == a.text and b.cost_usd == 0 and b.tokens == 0
    c = svc.complete(req(sample=1), run_id=None, target_id="t")  # another sample is another request
    assert c.source == "api" and len(fake_anthropic.requests) == 2
    t = svc.totals()
    assert (t["calls"], t["api_calls"], t["cache_hits"]) == (3, 2, 1)
    svc.close()
    with Store(tmp_path / "maxcode.db") as store:
        row = store.llm_call(b.call_id)
        assert row["source"] == "cache" and row["cost_usd"] == 0 and row["response"] == a.text
        assert store.llm_totals()["calls"] == 3 and store.llm_totals()["api_calls"] == 2
    # a new service on the same store starts warm; cache=False always asks
    svc2 = service(anthropic(fake_anthropic), tmp_path)
    assert svc2.complete(req()).source == "cache" and len(fake_anthropic.requests) == 2
    svc3 = service(anthropic(fake_anthropic), tmp_path, cache=False)
    assert svc3.complete(req()).source == "api" and len(fake_anthropic.requests) == 3


def test_record_then_replay_with_the_server_stopped(tmp_path):
    cassette = tmp_path / "cassettes" / "run.jsonl"
    requests = [req("first"), req("second"), req("first", sample=1), req("first")]
    with FakeLLMServer("anthropic") as srv:
        srv.respond_with(lambda body: code_reply(f"// answer {len(srv.requests)}"))
        svc = LLMService(anthropic(srv), store_path=tmp_path / "a.db", prices=Prices(), record=cassette)
        recorded = [svc.complete(r) for r in requests]
        svc.close()
        assert len(srv.requests) == 3  # the repeated request was a cache hit (and is in the cassette too)
    lines = cassette.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["cassette"] == 1 and header["provider"] == "anthropic" and header["model"] == MODEL
    assert header["base_url"] == srv.url and header["scripted"] is True and header["tool_version"]
    assert "recorded_at" in header and len(lines) == 1 + len(requests)
    # the server is gone: replay from a fresh store answers everything identically, offline
    svc = make_service(Settings(llm="replay:cassettes/run.jsonl"), tmp_path, tmp_path / "b.db")
    replayed = [svc.complete(r, run_id=None, target_id="t") for r in requests]
    assert [r.text for r in replayed] == [r.text for r in recorded]
    assert replayed[0].source == "replay" and all(r.scripted for r in replayed)
    assert [(r.input_tokens, r.output_tokens) for r in replayed[:3]] == \
        [(r.input_tokens, r.output_tokens) for r in recorded[:3]]
    svc.close()
    with Store(tmp_path / "b.db") as store:
        row = store.llm_call(replayed[0].call_id)
        assert row["source"] == "replay" and row["scripted"] is True
    # the miss: a changed prompt
    replay = ReplayClient(cassette)
    with pytest.raises(MaxcodeError) as e:
        replay.complete(req("a prompt nobody recorded"))
    msg = one_line(e.value)
    assert "has no recorded reply" in msg and "--maxcode-record" in msg


def test_identical_requests_replay_in_recorded_order(tmp_path, fake_anthropic):
    cassette = tmp_path / "c.jsonl"
    fake_anthropic.script("one", "two")
    svc = LLMService(anthropic(fake_anthropic), store_path=None, prices=Prices(), record=cassette)
    assert [svc.complete(req()).text for _ in range(2)] == ["one", "two"]  # no store: no cache
    svc.close()
    replay = ReplayClient(cassette)
    assert [replay.complete(req()).text for _ in range(3)] == ["one", "two", "two"]


def test_real_model_cassette_is_not_scripted(fake_anthropic, tmp_path):
    fake_anthropic.model = "claude-sonnet-4-5-20250929"
    fake_anthropic.respond_with("real-looking")
    svc = LLMService(anthropic(fake_anthropic), store_path=tmp_path / "s.db", prices=Prices(),
                     record=tmp_path / "c.jsonl")
    r = svc.complete(req())
    svc.close()
    assert not r.scripted
    assert json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["scripted"] is False
    with Store(tmp_path / "s.db") as store:
        assert store.llm_call(r.call_id)["scripted"] is False


def test_interrupted_cassette_is_readable(fake_anthropic, tmp_path):
    cassette = tmp_path / "c.jsonl"
    fake_anthropic.respond_with("ok")
    svc = LLMService(anthropic(fake_anthropic), store_path=None, prices=Prices(), record=cassette)
    svc.complete(req("a"))
    svc.complete(req("b"))
    # not closed (killed): header says scripted: null; a torn last line is ignored
    with open(cassette, "a") as f:
        f.write('{"key": "abc", "requ')
    c = read_cassette(cassette)
    assert c.header["scripted"] is None and c.scripted is True and len(c.entries) == 2
    assert ReplayClient(cassette).complete(req("b")).text == "ok"
    svc.close()


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("", "empty"),
    ("not json\n", "not a maxcode cassette"),
    ('{"cassette": 1, "provider": "anthropic", "model": "m"}\n{"oops": 1}\n{"key": "k", "response": {"text": "t"}}\n',
     "line 2"),
])
def test_bad_cassettes_are_one_line(tmp_path, content, words):
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(MaxcodeError) as e:
        make_service(Settings(llm="replay:bad.jsonl"), tmp_path, None)
    msg = one_line(e.value)
    assert words in msg and "replay:bad.jsonl" in msg


def test_concurrency_limit_is_respected(fake_anthropic, tmp_path):
    fake_anthropic.delay(0.15)
    fake_anthropic.respond_with(lambda body: body["messages"][0]["content"].upper())
    svc = service(anthropic(fake_anthropic), tmp_path, concurrency=2)
    with ThreadPoolExecutor(max_workers=6) as pool:
        out = list(pool.map(lambda i: svc.complete(req(f"job {i}"), run_id=None, target_id="t"), range(6)))
    assert [r.text for r in out] == [f"JOB {i}" for i in range(6)]
    assert fake_anthropic.max_in_flight == 2
    assert len({r.call_id for r in out}) == 6
    assert svc.totals()["calls"] == 6
    svc.close()
    with Store(tmp_path / "maxcode.db") as store:
        assert store.llm_totals(target_id="t")["calls"] == 6


# -- OpenAI-compatible -----------------------------------------------------------------------


def test_openai_compatible_server_without_a_key(fake_openai, tmp_path):
    fake_openai.respond_with(code_reply("int main() { return 0; }"))
    svc = make_service(Settings(llm=fake_openai.spec("qwen2.5-coder:7b"), llm_timeout=5), tmp_path, tmp_path / "m.db")
    a = svc.complete(req(max_tokens=321, temperature=0.2))
    b = svc.complete(req("again", max_tokens=321, temperature=0.2))
    body = fake_openai.last
    assert body["model"] == "qwen2.5-coder:7b" and body["max_tokens"] == 321 and body["temperature"] == 0.2
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert body["messages"][1] == {"role": "user", "content": "again"}
    assert fake_openai.headers[-1]["authorization"] == "Bearer maxcode-no-key"
    assert "```cpp" in a.text and a.stop_reason == "stop"
    assert b.cache_read_tokens > 0 and a.cache_read_tokens == 0
    assert a.scripted and svc.unpriced_models == {"scripted-qwen2.5-coder:7b"}
    svc.close()


def test_openai_errors_map_the_same_way(fake_openai):
    fake_openai.known_models = {"served-model"}
    client = OpenAIClient("other-model", base_url=fake_openai.url, max_retries=1, timeout=5)
    with pytest.raises(MaxcodeError) as e:
        client.complete(req())
    msg = one_line(e.value)
    assert "other-model" in msg and "--maxcode-llm=openai:MODEL@URL" in msg
    fake_openai.known_models = None
    fake_openai.fail(429, times=2)
    with pytest.raises(LLMUnavailable) as e:
        client.complete(req())
    one_line(e.value)
    assert len(fake_openai.requests) == 3


def test_openai_default_url_needs_a_key(tmp_path):
    with pytest.raises(MaxcodeError) as e:
        make_service(Settings(llm="openai:gpt-4o"), tmp_path, None)
    assert "OPENAI_API_KEY" in one_line(e.value)


# -- configuration -------------------------------------------------------------------------------


def test_parse_llm_spec():
    assert parse_llm_spec(None) is None and parse_llm_spec("  ") is None
    s = parse_llm_spec("anthropic")
    assert (s.provider, s.model, s.base_url) == ("anthropic", DEFAULT_ANTHROPIC_MODEL, None)
    s = parse_llm_spec("anthropic:claude-opus-4-5@https://proxy.example/anthropic")
    assert (s.model, s.base_url) == ("claude-opus-4-5", "https://proxy.example/anthropic")
    s = parse_llm_spec("anthropic:claude-opus-4@20250514")  # Vertex-style ids keep their @
    assert (s.model, s.base_url) == ("claude-opus-4@20250514", None)
    s = parse_llm_spec("openai:qwen2.5-coder:32b@http://127.0.0.1:11434/v1")
    assert (s.provider, s.model, s.base_url) == ("openai", "qwen2.5-coder:32b", "http://127.0.0.1:11434/v1")
    assert parse_llm_spec("replay:cassettes/x.jsonl").path == "cassettes/x.jsonl"
    assert parse_llm_spec("none").provider == "none"
    for bad in ("gemini:pro", "openai", "openai:", "replay:", "anthropic:m@localhost:8000"):
        with pytest.raises(MaxcodeError) as e:
            parse_llm_spec(bad)
        msg = one_line(e.value)
        assert "--maxcode-llm" in msg and "replay:PATH" in msg


def test_default_llm_depends_on_the_key(monkeypatch, tmp_path):
    assert make_service(Settings(), tmp_path, None) is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    svc = make_service(Settings(), tmp_path, None)
    assert svc is not None and svc.provider == "anthropic" and svc.model == DEFAULT_ANTHROPIC_MODEL
    svc.close()
    assert make_service(Settings(llm="none"), tmp_path, None) is None


def test_settings_reach_the_client(fake_anthropic, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    svc = make_service(Settings(llm=fake_anthropic.spec(), llm_retries=0, llm_timeout=3, llm_concurrency=3,
                                llm_cache=False, record="rec.jsonl",
                                prices={"scripted-claude": {"input": 1, "output": 1}}), tmp_path, None)
    assert svc.client.max_retries == 0 and svc.client.timeout == 3 and svc.concurrency == 3 and not svc.cache
    fake_anthropic.fail(500)
    with pytest.raises(LLMUnavailable):
        svc.complete(req())
    assert len(fake_anthropic.requests) == 1
    fake_anthropic.script("priced")
    assert svc.complete(req()).cost_usd > 0
    svc.close()
    assert (tmp_path / "rec.jsonl").exists()
    with pytest.raises(MaxcodeError) as e:
        make_service(Settings(llm="anthropic", llm_concurrency=0), tmp_path, None)
    assert "--maxcode-llm-concurrency" in one_line(e.value)
