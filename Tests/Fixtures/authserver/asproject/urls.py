from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider import views as dot_views

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    # RFC 8414 well-known location for issuer http://127.0.0.1:PORT/o
    path(".well-known/oauth-authorization-server/o", dot_views.OAuthServerMetadataView.as_view()),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
]
