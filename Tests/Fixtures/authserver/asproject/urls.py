from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from oauth2_provider import views as dot_views

from . import views

urlpatterns = [
    # DPoP (RFC 9449) and PAR (RFC 9126) layers in front of DOT's own views at the same paths (views.py).
    path("o/token/", views.TokenView.as_view(), name="token-dpop"),
    path("o/authorize/", views.AuthorizationView.as_view(), name="authorize-par"),
    path("o/introspect/", views.IntrospectView.as_view(), name="introspect-dpop"),
    path("o/par/", views.PARView.as_view(), name="par"),
    re_path(r"^o/\.well-known/openid-configuration/?$", views.DiscoveryView.as_view()),
    path("o/.well-known/oauth-authorization-server", views.ServerMetadataView.as_view()),
    # RFC 8414 well-known location for issuer http://127.0.0.1:PORT/o
    path(".well-known/oauth-authorization-server/o", views.ServerMetadataView.as_view()),
    # The DPoP-protected resource (RFC 9449 §7).
    path("api/resource", views.ResourceView.as_view(), name="resource"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
]


class DeviceAuthorizationView(dot_views.DeviceAuthorizationView):
    """RFC 8628 §3.1-3.2. DOT 3.4.1 passes oauthlib 4's extra `scope` key to DeviceCodeResponse (TypeError,
    HTTP 500); the scope is still stored, DOT reads it from the request."""

    def create_device_authorization_response(self, request):
        headers, response, status = super().create_device_authorization_response(request)
        if status == 200 and isinstance(response, dict):
            response.pop("scope", None)
        return headers, response, status


# Ahead of DOT's own view at the same path.
urlpatterns.insert(0, path("o/device-authorization/", DeviceAuthorizationView.as_view(), name="device-authorization-fixed"))
