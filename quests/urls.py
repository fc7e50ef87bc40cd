from django.urls import path

from quests import views

urlpatterns = [
    path("", views.board, name="board"),
]
