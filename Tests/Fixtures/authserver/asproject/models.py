"""Fixture state for DPoP (RFC 9449) and pushed authorization requests (RFC 9126), in the same sqlite DB as
DOT's tables so it survives a server restart with them. Tokens and codes are never stored here, only their
SHA-256 (hex)."""
from django.db import models


class Binding(models.Model):
    """A token or authorization code bound to a DPoP key: kind is access, refresh or code."""

    token_sha256 = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=8)
    jkt = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)


class SeenProof(models.Model):
    """Replay cache: SHA-256 of `jkt.jti` for every accepted proof (pruned past the iat window)."""

    key = models.CharField(max_length=64, unique=True)
    seen = models.FloatField(db_index=True)


class PushedRequest(models.Model):
    """RFC 9126: one pushed authorization request. params is the JSON of the pushed form (lists of values)."""

    request_uri = models.CharField(max_length=200, unique=True)
    client_id = models.CharField(max_length=100)
    params = models.TextField()
    dpop_jkt = models.CharField(max_length=64, blank=True, default="")
    expires = models.FloatField()
    used = models.BooleanField(default=False)
