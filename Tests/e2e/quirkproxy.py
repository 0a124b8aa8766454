"""Provider quirks for the fault proxy (faultproxy.FaultProxy.quirk): each reproduces ONE documented behaviour of a
preset's provider in front of the Django OAuth Toolkit fixture, so the real agent meets it end to end. A quirk is
fn(method, path, headers, body, forward) -> (status, headers, payload); `forward()` relays the request to the
fixture. The documentation each copies is cited beside it and in the test that uses it (test_provider_quirks.py).
"""
from __future__ import annotations

import hashlib
import json
import threading
from urllib.parse import parse_qsl, urlencode

TOKEN_PATH = "/o/token/"


def form_of(body: bytes) -> dict[str, str]:
    return dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))


def json_answer(status: int, obj: dict):
    return status, [("Content-Type", "application/json")], json.dumps(obj).encode()


def is_refresh(path: str, body: bytes) -> bool:
    return path.startswith(TOKEN_PATH) and form_of(body).get("grant_type") == "refresh_token"


def is_code_exchange(path: str, body: bytes) -> bool:
    return path.startswith(TOKEN_PATH) and form_of(body).get("grant_type") == "authorization_code"


def rewrite_json(answer, fn):
    """Applies fn(dict) -> dict to a JSON 200 answer; anything else passes unchanged."""
    status, headers, payload = answer
    if status != 200:
        return answer
    return json_answer(200, fn(json.loads(payload)))


# ---------------------------------------------------------------------------------------------------------------
# Microsoft identity platform (v2.0 endpoints)

def microsoft_scope_required(method, path, headers, body, forward):
    """https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-auth-code-flow#refresh-the-access-token
    lists `scope` as required on the refresh_token grant ("A space-separated list of scopes. The scopes requested in
    this leg must be equivalent to or a subset of the scopes requested in the original authorization_code request
    leg."); without it the token endpoint answers HTTP 400 AADSTS900144."""
    if is_refresh(path, body) and not form_of(body).get("scope"):
        return json_answer(400, {
            "error": "invalid_request", "error_codes": [900144],
            "error_description": "AADSTS900144: The request body must contain the following parameter: 'scope'. "
                                 "Trace ID: 0000 Correlation ID: 0000 Timestamp: 2026-01-01 00:00:00Z"})
    return forward()


def _microsoft_dead_grant(description: str, code: int):
    def quirk(method, path, headers, body, forward):
        if is_refresh(path, body):
            return json_answer(400, {"error": "invalid_grant", "error_codes": [code],
                                     "error_description": description + " Trace ID: 0000 Correlation ID: 0000"})
        return forward()
    return quirk


# https://learn.microsoft.com/en-us/entra/identity-platform/reference-error-codes: "AADSTS700082:
# ExpiredOrRevokedGrantInactiveToken - The refresh token has expired due to inactivity. The token was issued on
# {issueDate} and was inactive for {time}."
microsoft_refresh_token_inactive = _microsoft_dead_grant(
    "AADSTS700082: The refresh token has expired due to inactivity. The token was issued on 2026-01-01T00:00:00Z "
    "and was inactive for 90.00:00:00.", 700082)

# https://learn.microsoft.com/en-us/troubleshoot/entra/entra-id/app-integration/error-code-aadsts50173-grant-expired-revoked:
# "AADSTS50173: The provided grant has expired due to it being revoked, a fresh auth token is needed. The user might
# have changed or reset their password."
microsoft_password_changed = _microsoft_dead_grant(
    "AADSTS50173: The provided grant has expired due to it being revoked, a fresh auth token is needed. The user "
    "might have changed or reset their password.", 50173)


# ---------------------------------------------------------------------------------------------------------------
# GitHub (github.com/login/oauth/access_token)

def _as_form(answer):
    status, headers, payload = answer
    if status != 200:
        return answer
    obj = json.loads(payload)
    return 200, [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")], urlencode(obj).encode()


def github_form_unless_json_accepted(method, path, headers, body, forward):
    """https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#2-users-are-redirected-back-to-your-site-by-github:
    "By default, the response takes the following form: access_token=gho_16C7e42F292c6912E7710c838347Ae178B4a&scope=repo%2Cgist&token_type=bearer
    You can also receive the response in different formats if you provide the format in the Accept header."."""
    answer = forward()
    if not path.startswith(TOKEN_PATH) or "application/json" in (headers.get("Accept") or ""):
        return answer
    return _as_form(answer)


def github_form_encoded_anyway(method, path, headers, body, forward):
    """The same documented default form-encoded answer, sent whatever the Accept header says (a proxy that drops
    Accept; https://github.com/orgs/community/discussions/101123 reports the endpoint's content types disagreeing)."""
    answer = forward()
    return _as_form(answer) if path.startswith(TOKEN_PATH) else answer


def github_errors_with_http_200(method, path, headers, body, forward):
    """https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors
    ("Bad verification code": "If the verification code you pass is incorrect, expired, or doesn't match what you
    received in the first request for authorization you will receive this error." with `error=bad_verification_code`)
    and https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens
    (`bad_refresh_token`): GitHub answers these with HTTP 200 and the error in the body."""
    status, headers_out, payload = forward()
    if not path.startswith(TOKEN_PATH) or status == 200:
        return status, headers_out, payload
    if is_refresh(path, body):
        return json_answer(200, {"error": "bad_refresh_token",
                                 "error_description": "The refresh token passed is incorrect or expired.",
                                 "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#bad-refresh-token"})
    if is_code_exchange(path, body):
        return json_answer(200, {"error": "bad_verification_code",
                                 "error_description": "The code passed is incorrect or expired.",
                                 "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#bad-verification-code"})
    return status, headers_out, payload


def github_refresh_without_scope(method, path, headers, body, forward):
    """https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens
    lists the refresh request's parameters as client_id, client_secret, grant_type and refresh_token: a `scope` sent
    with it is not among them, and the new token has the scopes of the user's authorization. Here the proxy drops
    `scope` from a refresh, so the fixture answers with all of the sign-in's scopes."""
    if not is_refresh(path, body):
        return forward()
    form = form_of(body)
    form.pop("scope", None)
    return forward(urlencode(form).encode())


def github_comma_separated_scopes(method, path, headers, body, forward):
    """The example answer in
    https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#2-users-are-redirected-back-to-your-site-by-github
    is {"access_token":"gho_...", "scope":"repo,gist", "token_type":"bearer"}: scopes separated by commas."""
    answer = forward()
    if not path.startswith(TOKEN_PATH):
        return answer
    return rewrite_json(answer, lambda obj: {**obj, "scope": ",".join(obj.get("scope", "").split())})


def github_oauth_app_token(method, path, headers, body, forward):
    """https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#2-users-are-redirected-back-to-your-site-by-github:
    an OAuth app's answer is {"access_token":"gho_...", "scope":"repo,gist", "token_type":"bearer"}: no expires_in
    and no refresh_token (OAuth app tokens do not expire; https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/differences-between-github-apps-and-oauth-apps)."""
    answer = forward()
    if not is_code_exchange(path, body):
        return answer
    return rewrite_json(answer, lambda obj: {k: v for k, v in obj.items() if k not in ("expires_in", "refresh_token")})


def github_app_expiring_user_tokens(method, path, headers, body, forward):
    """https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens:
    "The user access token expires after eight hours, and the refresh token expires after six months."; the
    answer carries "expires_in": "28800" and "refresh_token_expires_in": "15811200" (strings, as in GitHub's example)."""
    answer = forward()
    if not path.startswith(TOKEN_PATH):
        return answer
    return rewrite_json(answer, lambda obj: {**obj, "expires_in": "28800", "refresh_token_expires_in": "15811200"})


def refresh_token_lifetime(seconds: dict):
    """A server that says how long the sign-in lives: `refresh_token_expires_in` on every token answer (code exchange
    and refresh), as GitHub Apps send it (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens:
    "refresh_token_expires_in: The number of seconds until refresh_token expires"). `seconds["value"]` is read at
    each answer, so a test can change it between requests."""
    def quirk(method, path, headers, body, forward):
        answer = forward()
        if not path.startswith(TOKEN_PATH):
            return answer
        return rewrite_json(answer, lambda obj: {**obj, "refresh_token_expires_in": seconds["value"]})
    return quirk


# ---------------------------------------------------------------------------------------------------------------
# Google

def google_refresh_without_refresh_token(method, path, headers, body, forward):
    """https://developers.google.com/identity/protocols/oauth2/native-app#offline: the answer to a refresh is
    {"access_token": "1/fFAGRNJru1FTz70BzhT3Zg", "expires_in": 3920, "scope": "...", "token_type": "Bearer"}, with no
    refresh_token: the one from the sign-in stays valid (run with the fixture's AS_ROTATE_REFRESH_TOKEN=0)."""
    answer = forward()
    if not is_refresh(path, body):
        return answer
    return rewrite_json(answer, lambda obj: {k: v for k, v in obj.items() if k != "refresh_token"})


# ---------------------------------------------------------------------------------------------------------------
# GitLab

class GitLabRotationRevokesOld:
    """https://docs.gitlab.com/api/oauth2/#authorization-code-with-proof-key-for-code-exchange-pkce: a refresh
    "Invalidates the existing access_token and refresh_token. Sends new tokens in the response." The fixture does
    exactly that (ROTATE_REFRESH_TOKEN, no grace period); this quirk only records a digest of every refresh token
    sent (never the token), so the test can check that none is sent twice."""

    def __init__(self):
        self.sent: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, method, path, headers, body, forward):
        if is_refresh(path, body):
            with self.lock:
                self.sent.append(digest(form_of(body)["refresh_token"]))
        return forward()


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
