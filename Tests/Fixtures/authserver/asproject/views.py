"""DPoP (RFC 9449) and pushed authorization requests (RFC 9126) around django-oauth-toolkit's views.

Token endpoint, introspection, both metadata documents and the authorization endpoint are DOT's views with a
layer in front; /o/par/ and /api/resource are the fixture's own. README.md documents every answer."""
import base64
import binascii
import hmac
import json
import os
import secrets
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, unquote_plus

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseRedirect, JsonResponse, QueryDict
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider import views as dot_views
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import get_access_token_model, get_application_model
from django import forms

from . import dpop
from .dpop import ProofError, event

PAR = os.environ.get("AS_PAR", "on")
if PAR not in ("off", "on", "required"):
    raise SystemExit(f"AS_PAR must be off, on or required, not {PAR!r}")
PAR_EXPIRES = int(os.environ.get("AS_PAR_EXPIRES", "60"))
PAR_DPOP_HEADER = os.environ.get("AS_PAR_DPOP_HEADER", "accept")
if PAR_DPOP_HEADER not in ("accept", "refuse"):
    raise SystemExit(f"AS_PAR_DPOP_HEADER must be accept or refuse, not {PAR_DPOP_HEADER!r}")
REQUEST_URI_PREFIX = "urn:ietf:params:oauth:request_uri:"


def _oauth_error(status, error, description, nonce=None):
    r = JsonResponse({"error": error, "error_description": description}, status=status)
    r["Cache-Control"] = "no-store"
    if nonce:
        r["DPoP-Nonce"] = nonce
    return r


# ---------------------------------------------------------------------------------------------------------------
# Metadata: both documents advertise DPoP and PAR.

def _extend_metadata(response):
    if response.status_code != 200:
        return response
    data = json.loads(response.content)
    if dpop.MODE != "off":
        data["dpop_signing_alg_values_supported"] = list(dpop.ALGS)
    if PAR != "off":
        data["pushed_authorization_request_endpoint"] = settings.ISSUER + "/par/"
        if PAR == "required":
            data["require_pushed_authorization_requests"] = True
    new = JsonResponse(data)
    for k in ("Access-Control-Allow-Origin", "Cache-Control"):
        if k in response:
            new[k] = response[k]
    return new


class DiscoveryView(dot_views.ConnectDiscoveryInfoView):
    def get(self, request, *args, **kwargs):
        return _extend_metadata(super().get(request, *args, **kwargs))


class ServerMetadataView(dot_views.OAuthServerMetadataView):
    def get(self, request, *args, **kwargs):
        return _extend_metadata(super().get(request, *args, **kwargs))


# ---------------------------------------------------------------------------------------------------------------
# Token endpoint (RFC 9449 §5): every grant.

def _proof_for(request, endpoint, nonces, required_jkt=None):
    """Checks the request's DPoP header; returns its jkt or None (no header). ProofError on a bad proof."""
    try:
        value = dpop.proof_header(request)
        if value is None:
            return None
        jkt, claims = dpop.check_proof(value, request, nonces=nonces, jkt=required_jkt)
    except ProofError as e:
        event("proof", endpoint=endpoint, result="refused", error=e.error, reason=e.reason)
        raise
    event("proof", endpoint=endpoint, result="accepted", jkt=jkt, alg=json.loads(
        base64.urlsafe_b64decode(value.split(".")[0] + "==")).get("alg"), nonce="nonce" in claims)
    return jkt


@method_decorator(csrf_exempt, name="dispatch")
class TokenView(dot_views.TokenView):
    def post(self, request, *args, **kwargs):
        if dpop.MODE == "off":
            return super().post(request, *args, **kwargs)
        nonces = dpop.AS_NONCES if dpop.NONCE else None
        grant = request.POST.get("grant_type", "")
        # What the presented grant is bound to (RFC 9449 §5 refresh tokens, §10 dpop_jkt on the code).
        need = None
        if grant == "refresh_token" and request.POST.get("refresh_token"):
            need = dpop.bound_jkt(request.POST["refresh_token"], "refresh")
            what = "refresh token"
        elif grant == "authorization_code" and request.POST.get("code"):
            need = dpop.bound_jkt(request.POST["code"], "code")
            what = "authorization code (dpop_jkt)"
        try:
            jkt = _proof_for(request, "token", nonces)
            if jkt is None and (dpop.MODE == "required" or need):
                reason = (f"{what} is bound to a DPoP key: a proof is required" if need
                          else "DPoP proof required (AS_DPOP=required)")
                event("proof", endpoint="token", result="refused", error="invalid_dpop_proof", reason=reason)
                raise ProofError("invalid_dpop_proof", reason)
            if need and jkt != need:
                reason = f"proof key is not the key the {what} is bound to"
                event("proof", endpoint="token", result="refused", error="invalid_dpop_proof", reason=reason)
                raise ProofError("invalid_dpop_proof", reason)
        except ProofError as e:
            return _oauth_error(400, e.error, e.reason, nonces.fresh() if nonces else None)

        response = super().post(request, *args, **kwargs)
        if response.status_code == 200 and jkt:
            response = self._bind(response, jkt, grant)
        elif response.status_code == 200:
            self._record(response, None, grant)
        if nonces:
            response["DPoP-Nonce"] = nonces.fresh()
        return response

    def _record(self, response, jkt, grant, token_type=None, access_bound=None, refresh_bound=None):
        body = json.loads(response.content)
        event("token", grant=grant, jkt=jkt, token_type=token_type or body.get("token_type"),
              access_token=dpop.ref(body["access_token"]) if "access_token" in body else None,
              refresh_token=dpop.ref(body["refresh_token"]) if "refresh_token" in body else None,
              access_bound=bool(access_bound), refresh_bound=bool(refresh_bound))

    def _bind(self, response, jkt, grant):
        body = json.loads(response.content)
        at, rt = body.get("access_token"), body.get("refresh_token")
        app = None
        if at:
            tok = get_access_token_model().objects.filter(token_checksum=dpop.sha256_hex(at)).first()
            app = tok.application if tok else None
        public = app is not None and app.client_type == app.CLIENT_PUBLIC
        access_bound = bool(at) and dpop.BIND == "access"
        # RFC 9449 §5: refresh tokens of confidential clients are not bound (client authentication binds them).
        refresh_bound = bool(rt) and public
        if access_bound:
            dpop.bind(at, "access", jkt)
        if refresh_bound:
            dpop.bind(rt, "refresh", jkt)
        body["token_type"] = "DPoP" if access_bound else "Bearer"
        new = HttpResponse(json.dumps(body), status=200, content_type="application/json")
        for k, v in response.items():
            if k.lower() not in ("content-type", "content-length"):
                new[k] = v
        self._record(new, jkt, grant, body["token_type"], access_bound, refresh_bound)
        return new


# ---------------------------------------------------------------------------------------------------------------
# Introspection: cnf.jkt and token_type DPoP for bound access tokens (RFC 9449 §6.2).

@method_decorator(csrf_exempt, name="dispatch")
class IntrospectView(dot_views.IntrospectTokenView):
    def _extend(self, response, token):
        if response.status_code != 200 or not token:
            return response
        data = json.loads(response.content)
        if data.get("active"):
            jkt = dpop.bound_jkt(token, "access")
            if jkt:
                data["cnf"] = {"jkt": jkt}
                data["token_type"] = "DPoP"
            else:
                data["token_type"] = "Bearer"
            return JsonResponse(data)
        return response

    def get(self, request, *args, **kwargs):
        return self._extend(super().get(request, *args, **kwargs), request.GET.get("token"))

    def post(self, request, *args, **kwargs):
        return self._extend(super().post(request, *args, **kwargs), request.POST.get("token"))


# ---------------------------------------------------------------------------------------------------------------
# Protected resource (RFC 9449 §7): GET|POST /api/resource.

def _challenge(status, error=None, description=None, scheme_error="DPoP"):
    parts = []
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append('error_description="{}"'.format(description.replace('"', "'")))
    parts.append('algs="{}"'.format(" ".join(dpop.ALGS)))
    r = JsonResponse({"error": error or "invalid_token", "error_description": description or "no token"},
                     status=status)
    r["WWW-Authenticate"] = f"{scheme_error} " + ", ".join(parts) if dpop.MODE != "off" else (
        'Bearer error="{}"'.format(error or "invalid_token"))
    r["Cache-Control"] = "no-store"
    return r


@method_decorator(csrf_exempt, name="dispatch")
class ResourceView(View):
    def get(self, request):
        return self._serve(request)

    def post(self, request):
        return self._serve(request)

    def _serve(self, request):
        nonces = dpop.RS_NONCES if (dpop.RS_NONCE and dpop.MODE != "off") else None
        response = self._answer(request, nonces)
        if nonces:
            response["DPoP-Nonce"] = nonces.fresh()
        return response

    def _refuse(self, error, reason, scheme=None):
        event("resource", result="refused", error=error, reason=reason, scheme=scheme)
        return _challenge(401, error, reason)

    def _answer(self, request, nonces):
        auth = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if not auth:
            event("resource", result="refused", error=None, reason="no Authorization header", scheme=None)
            return _challenge(401)
        scheme = scheme.lower()
        if scheme not in ("bearer", "dpop") or not token or (scheme == "dpop" and dpop.MODE == "off"):
            return self._refuse("invalid_request", f"Authorization scheme {scheme!r} not accepted", scheme)
        tok = get_access_token_model().objects.filter(token_checksum=dpop.sha256_hex(token)).first()
        if tok is None or tok.is_expired():
            return self._refuse("invalid_token", "unknown, expired or revoked access token", scheme)
        jkt = dpop.bound_jkt(token, "access") if dpop.MODE != "off" else None
        if scheme == "bearer":
            if jkt:
                return self._refuse("invalid_token", "DPoP-bound access token sent as Bearer", scheme)
            if "HTTP_DPOP" in request.META:
                event("resource", result="note", reason="DPoP header with a Bearer token ignored")
        else:
            if not jkt:
                return self._refuse("invalid_token", "access token is not DPoP-bound: use Bearer", scheme)
            value = request.META.get("HTTP_DPOP")
            if value is None:
                return self._refuse("invalid_dpop_proof", "DPoP proof missing", scheme)
            try:
                dpop.proof_header(request)
                dpop.check_proof(value, request, nonces=nonces, access_token=token, jkt=jkt)
            except ProofError as e:
                return self._refuse(e.error, e.reason, scheme)
        event("resource", result="accepted", scheme=scheme, jkt=jkt, method=request.method,
              access_token=dpop.ref(token))
        r = JsonResponse({"user": tok.user.get_username() if tok.user else None,
                          "client_id": tok.application.client_id if tok.application else None,
                          "scope": tok.scope, "token_type": "DPoP" if scheme == "dpop" else "Bearer",
                          "jkt": jkt, "method": request.method})
        r["Cache-Control"] = "no-store"
        return r


# ---------------------------------------------------------------------------------------------------------------
# Pushed authorization requests (RFC 9126).

def _client_auth(request):
    """(application, error response). Client authentication as at the token endpoint: HTTP Basic or
    client_id (+ client_secret) in the body; a public client sends only client_id."""
    App = get_application_model()
    basic_id = basic_secret = None
    auth = request.META.get("HTTP_AUTHORIZATION", "")
    if auth.lower().startswith("basic "):
        try:
            raw = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
            basic_id, _, basic_secret = raw.partition(":")
            basic_id, basic_secret = unquote_plus(basic_id), unquote_plus(basic_secret)
        except (binascii.Error, UnicodeDecodeError):
            return None, _oauth_error(401, "invalid_client", "malformed Basic authorization")
    body_id = request.POST.get("client_id")
    if basic_id and body_id and basic_id != body_id:
        return None, _oauth_error(400, "invalid_request", "client_id differs from the Basic authorization")
    client_id = basic_id or body_id
    if not client_id:
        return None, _oauth_error(401, "invalid_client", "no client_id")
    app = App.objects.filter(client_id=client_id).first()
    if app is None:
        return None, _oauth_error(401, "invalid_client", "unknown client")
    if app.client_type == App.CLIENT_CONFIDENTIAL:
        secret = basic_secret if basic_id else request.POST.get("client_secret")
        if not secret or not hmac.compare_digest(secret.encode(), app.client_secret.encode()):
            return None, _oauth_error(401, "invalid_client", "client authentication failed")
    return app, None


@method_decorator(csrf_exempt, name="dispatch")
class PARView(View):
    def post(self, request):
        from .models import PushedRequest

        if PAR == "off":
            return _oauth_error(404, "invalid_request", "pushed authorization requests are off (AS_PAR=off)")
        nonces = dpop.AS_NONCES if (dpop.NONCE and dpop.MODE != "off") else None
        response = self._push(request, nonces, PushedRequest)
        if nonces and "DPoP-Nonce" not in response:
            response["DPoP-Nonce"] = nonces.fresh()
        return response

    def _refuse(self, status, error, reason, client_id=None):
        event("par_push", result="refused", error=error, reason=reason, client_id=client_id)
        return _oauth_error(status, error, reason)

    def _push(self, request, nonces, PushedRequest):
        App = get_application_model()
        app, err = _client_auth(request)
        if err:
            body = json.loads(err.content)
            event("par_push", result="refused", error=body["error"], reason=body["error_description"],
                  client_id=request.POST.get("client_id"))
            return err
        p = request.POST
        header_jkt = None
        if dpop.MODE != "off" and "HTTP_DPOP" in request.META:
            if PAR_DPOP_HEADER == "refuse":
                return self._refuse(400, "invalid_request",
                                    "DPoP header not accepted at the PAR endpoint: send dpop_jkt", app.client_id)
            try:
                header_jkt = _proof_for(request, "par", nonces)
            except ProofError as e:
                event("par_push", result="refused", error=e.error, reason=e.reason, client_id=app.client_id)
                return _oauth_error(400, e.error, e.reason, nonces.fresh() if nonces else None)
        if "request_uri" in p:
            return self._refuse(400, "invalid_request", "request_uri is not allowed in a pushed request",
                                app.client_id)
        for name, values in p.lists():
            if len(values) > 1 and name != "resource":
                return self._refuse(400, "invalid_request", f"{name} repeated", app.client_id)
        if app.authorization_grant_type != App.GRANT_AUTHORIZATION_CODE:
            return self._refuse(400, "unauthorized_client", "client may not use the authorization code grant",
                                app.client_id)
        if p.get("response_type") != "code":
            return self._refuse(400, "unsupported_response_type", "response_type must be code", app.client_id)
        redirect_uri = p.get("redirect_uri")
        if not redirect_uri or not app.redirect_uri_allowed(redirect_uri):
            return self._refuse(400, "invalid_request", "redirect_uri missing or not registered", app.client_id)
        if not p.get("code_challenge") or p.get("code_challenge_method") != "S256":
            return self._refuse(400, "invalid_request", "PKCE with code_challenge_method S256 required",
                                app.client_id)
        unknown = [s for s in p.get("scope", "").split() if s not in settings.OAUTH2_PROVIDER["SCOPES"]]
        if unknown:
            return self._refuse(400, "invalid_scope", f"unknown scope {' '.join(unknown)}", app.client_id)
        dpop_jkt = p.get("dpop_jkt", "") if dpop.MODE != "off" else ""
        if dpop_jkt and not dpop.valid_jkt(dpop_jkt):
            return self._refuse(400, "invalid_request", "dpop_jkt is not a SHA-256 JWK thumbprint", app.client_id)
        if header_jkt and dpop_jkt and header_jkt != dpop_jkt:
            event("par_push", result="refused", error="invalid_dpop_proof", reason="dpop_jkt differs",
                  client_id=app.client_id)
            return _oauth_error(400, "invalid_dpop_proof", "dpop_jkt is not the thumbprint of the proof's key",
                                nonces.fresh() if nonces else None)
        dpop_jkt = dpop_jkt or header_jkt or ""
        params = {k: v for k, v in p.lists() if k not in ("client_secret",)}
        params["client_id"] = [app.client_id]
        request_uri = REQUEST_URI_PREFIX + secrets.token_urlsafe(32)
        PushedRequest.objects.create(request_uri=request_uri, client_id=app.client_id, params=json.dumps(params),
                                     dpop_jkt=dpop_jkt, expires=time.time() + PAR_EXPIRES)
        event("par_push", result="accepted", client_id=app.client_id, request_uri=dpop.ref(request_uri),
              dpop_jkt=dpop_jkt or None, dpop_header=header_jkt is not None, params=sorted(params),
              expires_in=PAR_EXPIRES)
        r = JsonResponse({"request_uri": request_uri, "expires_in": PAR_EXPIRES}, status=201)
        r["Cache-Control"] = "no-store"
        return r


# ---------------------------------------------------------------------------------------------------------------
# Authorization endpoint: request_uri expansion (RFC 9126 §4), AS_PAR=required, dpop_jkt on the code (RFC 9449 §10).

class ParAllowForm(AllowForm):
    request_uri = forms.CharField(required=False, widget=forms.HiddenInput())
    dpop_jkt = forms.CharField(required=False, widget=forms.HiddenInput())


def _error_page(status, error, description):
    body = (f"<!doctype html><title>Error: {error}</title><h2>Error: {error}</h2>"
            f"<p>{description}</p>").encode()
    return HttpResponse(body, status=status, content_type="text/html; charset=utf-8")


class AuthorizationView(dot_views.AuthorizationView):
    form_class = ParAllowForm

    def get_initial(self):
        initial = super().get_initial()
        initial["request_uri"] = getattr(self, "par_request_uri", None) or ""
        initial["dpop_jkt"] = getattr(self, "dpop_jkt", None) or ""
        return initial

    def dispatch(self, request, *args, **kwargs):
        from .models import PushedRequest

        self.par_request_uri = None
        self.pushed = None
        self.dpop_jkt = None
        data = request.GET if request.method == "GET" else request.POST
        request_uri = data.get("request_uri") or None
        if PAR != "off" and request_uri:
            pushed = PushedRequest.objects.filter(request_uri=request_uri).first()
            reason = None
            if pushed is None:
                reason = "unknown request_uri"
            elif data.get("client_id") != pushed.client_id:
                reason = "client_id missing or not the client that pushed the request"
            elif pushed.used:
                reason = "request_uri already used"
            elif time.time() > pushed.expires:
                reason = "request_uri expired"
            if reason:
                event("par_use", result="refused", reason=reason, request_uri=dpop.ref(request_uri),
                      method=request.method)
                return _error_page(400, "invalid_request_uri", reason)
            self.par_request_uri, self.pushed = request_uri, pushed
            self.dpop_jkt = pushed.dpop_jkt or None
            if request.method == "GET":
                extra = sorted(set(request.GET) - {"client_id", "request_uri"})
                event("par_use", result="accepted", request_uri=dpop.ref(request_uri), client_id=pushed.client_id,
                      ignored_params=extra, authenticated=request.user.is_authenticated)
                params = json.loads(pushed.params)
                prompt = (params.get("prompt") or [""])[0].split()
                if not request.user.is_authenticated and "none" not in prompt:
                    # To the login page with next = this URL as the browser sent it (client_id + request_uri).
                    return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
                # The pushed parameters replace the browser's (RFC 9126 §4).
                qs = urlencode([(k, v) for k, vs in params.items() for v in vs])
                request.META["QUERY_STRING"] = qs
                request.GET = QueryDict(qs)
        elif PAR == "required" and request.method in ("GET", "POST"):
            return self._par_required(request, data)
        elif dpop.MODE != "off" and data.get("dpop_jkt"):
            if not dpop.valid_jkt(data["dpop_jkt"]):
                return _error_page(400, "invalid_request", "dpop_jkt is not a SHA-256 JWK thumbprint")
            self.dpop_jkt = data["dpop_jkt"]

        response = super().dispatch(request, *args, **kwargs)
        self._finish(response)
        return response

    def _par_required(self, request, data):
        event("par_use", result="refused", reason="no request_uri (AS_PAR=required)", method=request.method)
        App = get_application_model()
        app = App.objects.filter(client_id=data.get("client_id") or "").first()
        redirect_uri = data.get("redirect_uri")
        if app and redirect_uri and app.redirect_uri_allowed(redirect_uri):
            q = {"error": "invalid_request",
                 "error_description": "pushed authorization request required (use /o/par/)"}
            if data.get("state"):
                q["state"] = data["state"]
            if settings.OAUTH2_PROVIDER.get("COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS"):
                q["iss"] = settings.ISSUER
            sep = "&" if "?" in redirect_uri else "?"
            return self.redirect(redirect_uri + sep + urlencode(q), app)
        return _error_page(400, "invalid_request", "pushed authorization request required (use /o/par/)")

    def _finish(self, response):
        """On the answer that sends the browser back to the client: the request_uri is used up, and a code of
        a request with dpop_jkt is bound to that key."""
        location = response.get("Location") if 300 <= response.status_code < 400 else None
        if not location or location.startswith("/") or location.startswith(settings.ISSUER):
            return
        q = dict(parse_qsl(urlsplit(location).query))
        if self.pushed is not None:
            from .models import PushedRequest

            PushedRequest.objects.filter(pk=self.pushed.pk).update(used=True)
            event("par_done", request_uri=dpop.ref(self.par_request_uri),
                  outcome="code" if "code" in q else q.get("error", "redirect"))
        if "code" in q and self.dpop_jkt:
            dpop.bind(q["code"], "code", self.dpop_jkt)
            event("code", code=dpop.ref(q["code"]), dpop_jkt=self.dpop_jkt)
