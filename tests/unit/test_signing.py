"""URL signing (docs/contract.md#6-openrtb-path: HMAC with a rotatable server secret): the
hand-keyed HMAC-SHA256 is RFC 2104's, the token unpadded URL-safe base64, and query values quoted as
`urllib` does."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from bidder.signing import Signer, message, sign, url_value, verify


def reference_token(secret: str, signed: bytes) -> str:
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_rfc_4231_case_2() -> None:
    # RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
    token = Signer("Jefe").token(b"what do ya want for nothing?")
    digest = base64.urlsafe_b64decode(token + "=")
    assert digest.hex() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"


@given(secret=st.text(min_size=1, max_size=200), signed=st.binary(max_size=400))
def test_token_is_hmac_sha256_in_unpadded_url_safe_base64(secret: str, signed: bytes) -> None:
    # Keys longer than SHA-256's 64-byte block are hashed first (RFC 2104): covered by max_size.
    token = Signer(secret).token(signed)
    assert token == reference_token(secret, signed)
    assert len(token) == 43
    assert "=" not in token


@given(secret=st.text(min_size=1), prefix=st.binary(max_size=200), rest=st.binary(max_size=200))
def test_a_started_message_signs_as_the_whole(secret: str, prefix: bytes, rest: bytes) -> None:
    signer = Signer(secret)
    started = signer.started(prefix)
    assert signer.finish(started, rest) == reference_token(secret, prefix + rest)
    # `started` is not consumed: the next message with the same beginning signs the same way.
    assert signer.finish(started, b"x" + rest) == reference_token(secret, prefix + b"x" + rest)


@given(value=st.text())
def test_url_value_quotes_like_urllib(value: str) -> None:
    assert url_value(value) == quote(value, safe="-_.~")


def test_sign_and_verify_over_the_message_lines() -> None:
    params = {"pub": "p 1", "scr": "s&2", "ts": "17"}
    signed = ("pub", "scr", "ts")
    token = sign("new", "/loss/o", params, signed)
    assert token == reference_token("new", b"/loss/o\npub=p 1\nscr=s&2\nts=17")
    assert message("/loss/o", list(params.items())) == b"/loss/o\npub=p 1\nscr=s&2\nts=17"
    assert verify(("new", "old"), "/loss/o", {**params, "token": token}, signed)
    assert verify(("newer", "new"), "/loss/o", {**params, "token": token}, signed)
    assert not verify(("old",), "/loss/o", {**params, "token": token}, signed)
    assert not verify(("new",), "/loss/o", {**params, "ts": "18", "token": token}, signed)
