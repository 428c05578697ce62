"""URL configuration for chatsite project: the admin, and piagent's chat under /agent/."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path('admin/', admin.site.urls),
    path('agent/', include('piagent.contrib.django.urls')),
]
