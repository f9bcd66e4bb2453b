"""Task control in the builder API, mounted at /api/v1/builder/."""

from django.urls import path

from apps.projects.builder import by_method
from apps.tasks.api import views as v

urlpatterns = [
    path("tasks", by_method(get=v.TaskListApi.as_view(), post=v.TaskCreateApi.as_view()), name="builder-tasks"),
    path("tasks/<str:task_id>", v.TaskGetApi.as_view(), name="builder-task"),
    path("tasks/<str:task_id>/control", v.TaskControlApi.as_view(), name="builder-task-control"),
]
