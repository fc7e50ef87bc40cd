"""Real receivers for the notification tests: an SMTP server (aiosmtpd) and an HTTP server
(http.server) on loopback, each in a thread, keeping what they receive."""

import socket
import threading
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append(message_from_bytes(envelope.original_content, policy=policy.default))
        return "250 Message accepted for delivery"


class SmtpServer:
    def __init__(self) -> None:
        self.mailbox = Mailbox()
        with socket.socket() as probe:  # the controller checks its server by connecting: it needs a real port
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> "SmtpServer":
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()

    @property
    def messages(self) -> list[EmailMessage]:
        return self.mailbox.messages


class Received:
    def __init__(self, headers: dict[str, str], body: bytes, path: str) -> None:
        self.headers, self.body, self.path = headers, body, path


class HttpReceiver:
    """Answers every POST with `status` (and `location`, for a redirect), after waiting on `hold`
    when it is set: the test decides when the first request gets its answer."""

    def __init__(self, status: int = 204, location: str = "") -> None:
        self.received: list[Received] = []
        self.status, self.location = status, location
        self.hold: threading.Event | None = None
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.received.append(Received(dict(self.headers.items()), body, self.path))
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(60)
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> "HttpReceiver":
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()
