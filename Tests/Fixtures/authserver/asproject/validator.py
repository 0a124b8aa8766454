from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):
    """Adds email / preferred_username claims to ID tokens and userinfo."""

    oidc_claim_scope = dict(OAuth2Validator.oidc_claim_scope or {})
    oidc_claim_scope.update({"email": "email", "email_verified": "email", "preferred_username": "profile"})

    def get_additional_claims(self):
        return {
            "email": lambda r: r.user.email,
            "email_verified": lambda r: True,
            "preferred_username": lambda r: r.user.get_username(),
        }

    # oauthlib leaves these abstract (prompt=none would raise -> HTTP 500). DOT only
    # reaches them for a logged-in user (anonymous prompt=none -> error=login_required),
    # and every seeded app has skip_authorization=True.
    def validate_silent_login(self, request):
        return True

    def validate_silent_authorization(self, request):
        return True

    # RFC 8628 device grant: oauthlib 4 asks the validator for the device_code's status, a hook that
    # django-oauth-toolkit 3.4.1 does not implement (polling after approval -> AttributeError, HTTP 500).
    def validate_device_code(self, client_id, code, request, *args, **kwargs):
        from oauth2_provider.models import get_device_grant_model
        from oauthlib.oauth2.rfc8628.grant_types.device_code import DeviceCodeGrant

        model = get_device_grant_model()
        grant = model.objects.filter(device_code=code, client_id=client_id).first()
        if grant is None:
            return None
        if grant.is_expired():
            return DeviceCodeGrant.DEVICE_CODE_EXPIRED
        if grant.status == model.DENIED:
            return DeviceCodeGrant.DEVICE_CODE_DENIED
        if grant.status == model.AUTHORIZED and grant.user is not None:
            request.user = grant.user
            request.scopes = grant.scope.split() if grant.scope else []
            grant.status = model.EXPIRED  # single use: a replayed device_code gets expired_token
            grant.save(update_fields=["status"])
            return DeviceCodeGrant.DEVICE_CODE_AUTHORIZED
        return DeviceCodeGrant.DEVICE_CODE_PENDING
