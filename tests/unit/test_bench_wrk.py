"""The wrk side of the bench: the parser of the driver's output and the request files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.seed import full_document
from bench.throughput import (
    RequestLine,
    paced_delay_ms,
    parse_wrk_output,
    write_requests,
    wrk_reported_rps,
)
from bench.workload import LOSS_MACROS, bid_request, loss_lines, substitute

WRK_OUTPUT = """Running 3s test @ http://127.0.0.1:8000
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  400.00us   9.00ms   90.00%
  Latency Distribution
     50%    2.00ms
     99%    4.50ms
  30000 requests in 3.00s, 4.00MB read
  Non-2xx or 3xx responses: 12
Requests/sec:  10000.00
Transfer/sec:      1.33MB
BENCH_JSON {"duration_us":3000000,"requests":30000,"bytes":4000000,"errors":{"connect":0,\
"read":0,"write":0,"status":12,"timeout":1},"latency_us":{"min":300,"mean":2100.5,"max":9000,\
"p50":2000,"p90":3000,"p99":4500,"p999":8000},"statuses":{"200":29988,"404":10,"503":2},\
"harvested":29988,"exhausted_threads":0}
"""


def test_parse_wrk_output() -> None:
    result = parse_wrk_output("bid", WRK_OUTPUT)
    assert result.requests == 30_000
    assert result.rps == pytest.approx(10_000)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (2.0, 3.0, 4.5)
    assert result.max_ms == 9.0
    assert result.statuses == {200: 29_988, 404: 10, 503: 2}
    assert result.server_errors == 2
    assert result.count(400, 499) == 10
    assert result.socket_errors["timeout"] == 1
    assert not result.exhausted
    assert wrk_reported_rps(WRK_OUTPUT) == pytest.approx(result.rps)


def test_output_without_the_json_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="BENCH_JSON"):
        parse_wrk_output("bid", "Requests/sec: 1.0\n")


def test_request_lines_refuse_tabs_and_newlines(tmp_path: Path) -> None:
    path = tmp_path / "r.tsv"
    assert (
        write_requests(path, [RequestLine("GET", "/healthz"), RequestLine("POST", "/x", "k", "{}")])
        == 2
    )
    assert path.read_text() == "GET\t/healthz\t\t\nPOST\t/x\tk\t{}\n"
    with pytest.raises(ValueError, match="tabs"):
        RequestLine("POST", "/x", "k", "{\n}").render()


def test_paced_delay_gives_the_target_rate() -> None:
    # 16 connections each sending every 8 ms offer 2,000 requests per second.
    assert paced_delay_ms(2_000, 16) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="positive"):
        paced_delay_ms(0)


def test_loss_lines_substitute_the_macros_and_keep_the_signature(tmp_path: Path) -> None:
    lurl = (
        "http://127.0.0.1:8000/functions/v1/openrtb-2-6/loss/abc?reason=${AUCTION_LOSS}"
        "&price=${AUCTION_PRICE}&cur=${AUCTION_CURRENCY}&pub=p&scr=s&ts=1&token=t"
    )
    (tmp_path / "lurls.txt").write_text(lurl + "\n")
    [line] = loss_lines(tmp_path / "lurls.txt")
    assert line.method == "GET"
    assert line.path == (
        "/functions/v1/openrtb-2-6/loss/abc?reason=102&price=3.10&cur=EUR&pub=p&scr=s&ts=1&token=t"
    )
    assert "${" not in substitute(lurl, LOSS_MACROS)


def test_bid_request_is_a_one_imp_fixed_price_video_request() -> None:
    screen = next(s for s in full_document().screens if s.type == "moving")
    body = bid_request(screen, random.Random(1))
    encoded = json.dumps(body, separators=(",", ":"))
    assert 700 <= len(encoded) <= 1_500  # about 1 KB, like the implementation guide's example
    imp = body["imp"][0]
    assert body["at"] == 3
    assert len(body["imp"]) == 1
    assert imp["tagid"] == screen.external_id
    assert (imp["video"]["w"], imp["video"]["h"]) == (screen.width, screen.height)
    assert imp["pmp"]["deals"][0]["at"] == 3
    assert imp["qty"]["multiplier"] > 0
