"""Small stand-ins for the daemon's collaborators."""

from __future__ import annotations


class RecordingNotifier:
    """Stands in for sdnotify.SystemdNotifier: keeps what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def notify(self, state: str) -> None:
        self.sent.append(state)
