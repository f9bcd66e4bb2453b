from django.urls import path

from apps.agent_auth.api import views

# No trailing slashes: agent hosts never follow redirects.
urlpatterns = [
    path("authorizations", views.AuthorizationCreateApi.as_view(), name="agent-auth-authorization-create"),
    path("authorizations/<uuid:authorization_id>", views.AuthorizationDetailApi.as_view(),
         name="agent-auth-authorization-detail"),
    path("authorizations/<uuid:authorization_id>/approve", views.AuthorizationApproveApi.as_view(),
         name="agent-auth-authorization-approve"),
    path("authorizations/<uuid:authorization_id>/deny", views.AuthorizationDenyApi.as_view(),
         name="agent-auth-authorization-deny"),
    path("token", views.TokenApi.as_view(), name="agent-auth-token"),
    path("session", views.SessionDetailApi.as_view(), name="agent-auth-session"),
    path("revoke", views.RevokeApi.as_view(), name="agent-auth-revoke"),
    path("sessions/<uuid:session_id>/revoke", views.ClientSessionRevokeApi.as_view(),
         name="agent-auth-client-session-revoke"),
]
