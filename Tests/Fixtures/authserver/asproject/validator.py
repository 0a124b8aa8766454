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
