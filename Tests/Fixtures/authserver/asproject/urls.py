from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider import views as dot_views

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    # RFC 8414 well-known location for issuer http://127.0.0.1:PORT/o
    path(".well-known/oauth-authorization-server/o", dot_views.OAuthServerMetadataView.as_view()),
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
