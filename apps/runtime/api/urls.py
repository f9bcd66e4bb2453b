from django.urls import path

from apps.runtime.api import invocations, knowledge, memories, tasks, tools, turns, views

# No trailing slashes: agent hosts never follow redirects. `<str:route>` takes any segment so a
# malformed key reaches the view and is answered 400 `invalid_route`, not a bare 404.
urlpatterns = [
    path("workspaces", views.WorkspaceListApi.as_view(), name="agent-api-workspaces"),
    path("workspaces/<str:route>/system-info", views.WorkspaceSystemInfoApi.as_view(),
         name="agent-api-workspace-system-info"),
    path("workspaces/<str:route>/bootstrap", views.WorkspaceBootstrapApi.as_view(),
         name="agent-api-workspace-bootstrap"),
]

# ledger: turns, completion, memory notes
urlpatterns += [
    path("workspaces/<str:route>/turns", turns.TurnOpenApi.as_view(), name="agent-api-turns"),
    path("runs/<str:run_id>/complete", turns.RunCompleteApi.as_view(), name="agent-api-run-complete"),
    path("workspaces/<str:route>/memories", memories.RouteMemoriesApi.as_view(), name="agent-api-memories"),
    path("workspaces/<str:route>/memories/<str:memory_id>", memories.RouteMemoryApi.as_view(),
         name="agent-api-memory"),
    path("workspaces/<str:route>/project-memories", memories.ProjectMemoriesApi.as_view(),
         name="agent-api-project-memories"),
    path("workspaces/<str:route>/project-memories/<str:memory_id>", memories.ProjectMemoryApi.as_view(),
         name="agent-api-project-memory"),
]

# runtime: agent knowledge on demand, bailing.agent-knowledge.v1
urlpatterns += [
    path("workspaces/<str:route>/knowledge/capabilities", knowledge.KnowledgeCapabilitiesApi.as_view(),
         name="agent-api-knowledge-capabilities"),
    path("workspaces/<str:route>/knowledge/search", knowledge.KnowledgeSearchApi.as_view(),
         name="agent-api-knowledge-search"),
    path("workspaces/<str:route>/knowledge/read", knowledge.KnowledgeReadApi.as_view(),
         name="agent-api-knowledge-read"),
]

# tools: discovery (capability search, detail, legacy catalog)
urlpatterns += [
    path("workspaces/<str:route>/capabilities/search", tools.CapabilitySearchApi.as_view(),
         name="agent-api-capability-search"),
    path("tools", tools.ToolCatalogApi.as_view(), name="agent-api-tool-catalog"),
    path("tools/<str:name>", tools.ToolDetailApi.as_view(), name="agent-api-tool-detail"),
]

# tools: governed invocations
urlpatterns += [
    path("tool-invocations", invocations.ToolInvocationApi.as_view(), name="agent-api-tool-invocations"),
    path("tool-invocations/inspection-capabilities", invocations.ToolInvocationInspectionApi.as_view(),
         name="agent-api-tool-invocation-inspection"),
    path("tool-invocations/<str:invocation_id>/resume", invocations.ToolInvocationResumeApi.as_view(),
         name="agent-api-tool-invocation-resume"),
    path("tool-invocations/<str:invocation_id>/receipt", invocations.ToolInvocationReceiptApi.as_view(),
         name="agent-api-tool-invocation-receipt"),
]

# tasks: task control for agents (the operator side is the builder API and the admin)
urlpatterns += [
    path("task-control/capabilities", tasks.TaskControlCapabilitiesApi.as_view(),
         name="agent-api-task-control-capabilities"),
    path("tasks/<str:task_id>", tasks.TaskSnapshotApi.as_view(), name="agent-api-task"),
]
