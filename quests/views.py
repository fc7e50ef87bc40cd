from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from quests.models import Mission


@login_required
def board(request):
    missions = Mission.objects.filter(owner=request.user)
    return render(request, "quests/board.html", {"missions": missions})
